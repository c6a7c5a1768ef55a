#version 460
#extension GL_GOOGLE_include_directive : enable
#ifdef PRECISE
#extension GL_ARB_gpu_shader_fp64 : require
#endif
#include "vkgraph.glsl"
#include "unet.glsl"  // `real` and the push constants (no layer)
// The network's input F = (X.rgb / s, sigma / s) of the noisy image X, 4 planes (README.md):
//   sigma = sqrt(max(a + 65535 b max(Y(X), 0), 0)) / 65535,  s = scale_of(a, b)
// F is push.wo x push.ho; X is read mirrored (texel) where it is smaller: unet pads the
// image to the network's multiple of 2^(scales-1) (unet-t's X is F's size).
// CFA: X is an RGGB mosaic M of even size and F 5 planes of its cells (half its size), cell
// p = (x, y) the photosites (2x + dx, 2y + dy):
//   F = (R, G1, G2, B, sigma) / s,  R = M(2x, 2y).r, G1 = M(2x+1, 2y).g, G2 = M(2x, 2y+1).g,
//   B = M(2x+1, 2y+1).b (each photosite's own colour: an RGB image reads as its mosaic),
// sigma of the luma of base = (R, (G1 + G2) / 2, B), (a, b) at the photosite (2x, 2y). Cells
// beyond the input are read mirrored at the cell level (the cell index mirrored, the
// photosite within the cell kept): the colour phase never changes.
// CELLS: X is RGB and F 13 planes of its cells of 2 x 2 pixels (half of the padded size),
//   F = (X(2x, 2y).rgb, X(2x+1, 2y).rgb, X(2x, 2y+1).rgb, X(2x+1, 2y+1).rgb, sigma) / s,
// the pixel (2x + dx, 2y + dy) in planes 3 (2 dy + dx) + c, each pixel read mirrored as
// above, sigma of the cell's mean luma, (a, b) at the pixel (2x, 2y).
// MOSAIC: X is a mosaic of any pattern, photosite q's value v(q) = X(q)[c(q)] of its colour
// c(q) = alpha (0 r, 1 g, 2 b), and F 25 planes of its cells of 2 x 2 photosites: the
// photosite (2x + dx, 2y + dy) = q, d = 2 dy + dx, puts v(q) / s in plane 3 d + c(q) and 0 in
// the other two of 3 d .. 3 d + 2, and 1 in plane 12 + 3 d + c(q), 0 in the other two (its
// colour, not over s); plane 24 sigma / s of the mean of the 4 values; read mirrored as above
// (alpha with the value: a mirrored photosite keeps its colour).
IMG_IN(0, inp)
SSBO_IN(1, float, noiseab)
SSBO_OUT(2, real, F)
#include "noise.glsl"

void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (p.x >= push.wo || p.y >= push.ho) return;
  int n = push.wo * push.ho, i = p.x + p.y * push.wo;
  real a, b;
#ifdef CFA
  profile(2 * p, a, b);
  real s = scale_of(a, b);
  ivec2 q = 2 * mirror2(p, node.roi[0].xy / 2);  // the cell's red photosite
  vec4 x = photosites(q.x + q.y * node.roi[0].x, node.roi[0].x);
  real r = real(x[0]), g1 = real(x[1]), g2 = real(x[2]), bl = real(x[3]);
  real g = (g1 + g2) * real(0.5);
#elif defined(CELLS)
  profile(2 * p, a, b);
  real s = scale_of(a, b);
  real r = real(0), g = real(0), bl = real(0);
  for (int d = 0; d < 4; d++) {
    vec4 x = inp[texel(0, 2 * p + ivec2(d & 1, d >> 1))];
    for (int c = 0; c < 3; c++) F[(3 * d + c) * n + i] = real(x[c]) / s;
    r += real(x.r);
    g += real(x.g);
    bl += real(x.b);
  }
  r *= real(0.25);
  g *= real(0.25);
  bl *= real(0.25);
#elif defined(MOSAIC)
  profile(2 * p, a, b);
  real s = scale_of(a, b);
  real mean = real(0);
  for (int d = 0; d < 4; d++) {
    vec4 x = inp[texel(0, 2 * p + ivec2(d & 1, d >> 1))];
    int c = colour_of(x);
    real v = real(x[c]);
    for (int k = 0; k < 3; k++) {
      F[(3 * d + k) * n + i] = k == c ? v / s : real(0);
      F[(12 + 3 * d + k) * n + i] = real(k == c ? 1 : 0);
    }
    mean += v;
  }
  real r = mean * real(0.25), g = r, bl = r;  // the luma of grey: the mean itself
#else
  profile(p, a, b);
  real s = scale_of(a, b);
  vec4 x = inp[texel(0, p)];
  real r = real(x.r), g = real(x.g), bl = real(x.b);
#endif
  real y = max(LUMA_R * r + LUMA_G * g + LUMA_B * bl, real(0));
  real sigma = sqrt(max(a + real(65535) * b * y, real(0))) / real(65535);
#ifdef CFA
  F[i] = r / s;
  F[n + i] = g1 / s;
  F[2 * n + i] = g2 / s;
  F[3 * n + i] = bl / s;
  F[4 * n + i] = sigma / s;
#elif defined(CELLS)
  F[12 * n + i] = sigma / s;
#elif defined(MOSAIC)
  F[24 * n + i] = sigma / s;
#else
  F[i] = r / s;
  F[n + i] = g / s;
  F[2 * n + i] = bl / s;
  F[3 * n + i] = sigma / s;
#endif
}
