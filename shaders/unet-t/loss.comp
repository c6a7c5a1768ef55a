#version 460
#extension GL_GOOGLE_include_directive : enable
#ifdef PRECISE
#extension GL_ARB_gpu_shader_fp64 : require
#endif
#include "vkgraph.glsl"
#include "unet.glsl"  // `real` and the push constants (no layer)
// The output O = X - s N (N: the network's 3 planes, X the noisy input, s its tile's
// scale_of) and, with a reference R (REF), the L1 loss
//   E = (1/P) sum_p sum_rgb |O - R|,   dE/dN = -s sign(O - R) / P   (sign(0) = 0)
// or with L2 (param `loss` 1) the squared error
//   E = (1/P) sum_p sum_rgb (O - R)^2,   dE/dN = -2 s (O - R) / P
// N (and dN) are push.wi x push.hi planes, X and O push.wo x push.ho (P pixels): unet's N is
// the padded image's, of which O keeps the top left (unet-t: the same size).
// CFA: X is an RGGB mosaic, N 12 planes of its cells (push.wi x push.hi, half X's size) and
// O the full-resolution RGB: the pixel p = 2 cell + (dx, dy) of the cell's base colour
// base = (R, (G1 + G2) / 2, B) (prep.comp's photosites) gets
//   O(p, c) = base_c - s N[(2 dy + dx) 3 + c],   alpha 1
// (s of the photosite (2x, 2y)'s tile), with the loss over X's pixels as above.
// CELLS: X is RGB and N 12 planes of its cells (prep.comp): O(p, c) = X(p, c) - s
// N[(2 dy + dx) 3 + c] at the pixel p = 2 cell + (dx, dy), alpha X's.
// MOSAIC: X is a mosaic of any pattern (prep.comp: v(q) the value of photosite q, c(q) its
// colour), N 12 planes of its cells as with CELLS, and O(p, c) = base_c(p) - s N[...] with
//   base_c(p) = v(p) for c = c(p), else sum_q w(q) v(q) / sum_q w(q) over the photosites q
//   of colour c in the 5 x 5 window around p inside p's tile (and the image), w(q) = (3 -
//   |q.x - p.x|) (3 - |q.y - p.y|), v(p) where the window holds none;
// alpha 1.
// Each 8x8 workgroup writes its partial sum of E as a (hi, lo) float pair to Epart (summed by
// lsum, no atomics: runs are bit-reproducible); PRECISE: in float64.
SSBO_IN(0, real, N)
IMG_IN(1, inp)
SSBO_IN(2, float, noiseab)
IMG_OUT(3, outp)
#ifdef REF
IMG_IN(4, ref)
SSBO_OUT(5, real, dN)
SSBO_OUT(6, vec2, Epart)
shared real part[64];
#endif
#include "noise.glsl"

void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  int n = push.wo * push.ho, nn = push.wi * push.hi;
  real e = real(0);
  if (p.x < push.wo && p.y < push.ho) {
#if defined(CFA) || defined(CELLS) || defined(MOSAIC)
    ivec2 cell = p / 2, d = p - 2 * cell;  // the network's pixel, and p's place in it
    int i = p.x + p.y * push.wo, j = cell.x + cell.y * push.wi;
    int plane = 3 * (2 * d.y + d.x);  // the first of the pixel's 3 planes of N
    real a, b;
    profile(2 * cell, a, b);  // the cell's tile, as prep.comp's
#else
    int i = p.x + p.y * push.wo, j = p.x + p.y * push.wi, plane = 0;
    real a, b;
    profile(p, a, b);
#endif
    real s = scale_of(a, b);
    real base[3];
#ifdef CFA
    vec4 x = photosites(2 * cell.x + 2 * cell.y * push.wo, push.wo);
    base[0] = real(x[0]);
    base[1] = (real(x[1]) + real(x[2])) * real(0.5);
    base[2] = real(x[3]);
    float alpha = 1.0;
#elif defined(MOSAIC)
    vec4 x = inp[i];
    int own = colour_of(x);
    real num[3] = real[3](real(0), real(0), real(0)), den[3] = num;
    ivec2 lo, hi;
    tile_box(p, ivec2(push.wo, push.ho), lo, hi);
    for (int dy = -2; dy <= 2; dy++)
      for (int dx = -2; dx <= 2; dx++) {
        ivec2 q = p + ivec2(dx, dy);
        if (any(lessThan(q, lo)) || any(greaterThanEqual(q, hi))) continue;
        vec4 y = inp[q.x + q.y * push.wo];
        int c = colour_of(y);
        real w = real((3 - abs(dx)) * (3 - abs(dy)));
        num[c] += w * real(y[c]);
        den[c] += w;
      }
    for (int c = 0; c < 3; c++)
      base[c] = c != own && den[c] > real(0) ? num[c] / den[c] : real(x[own]);
    float alpha = 1.0;
#else
    vec4 x = inp[i];
    for (int c = 0; c < 3; c++) base[c] = real(x[c]);
    float alpha = x.a;
#endif
    real o[3];
    for (int c = 0; c < 3; c++) o[c] = base[c] - s * N[(plane + c) * nn + j];
    outp[i] = vec4(float(o[0]), float(o[1]), float(o[2]), alpha);
#ifdef REF
    vec4 r = ref[i];
    for (int c = 0; c < 3; c++) {
      real d = o[c] - real(r[c]);
#ifdef L2
      e += d * d;
      dN[(plane + c) * nn + j] = real(-2) * s * d / real(n);
#else
      e += abs(d);
      dN[(plane + c) * nn + j] = -s * sign(d) / real(n);
#endif
    }
#endif
  }
#ifdef REF
  uint t = gl_LocalInvocationIndex;
  part[t] = e / real(n);
  barrier();
  for (uint k = 32u; k > 0u; k >>= 1) {
    if (t < k) part[t] += part[t + k];
    barrier();
  }
  if (t == 0u) {
    float hi = float(part[0]);
    Epart[gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x] =
        vec2(hi, float(part[0] - real(hi)));
  }
#endif
}
