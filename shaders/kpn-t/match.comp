#version 460
#extension GL_GOOGLE_include_directive : enable
#extension GL_EXT_control_flow_attributes : enable
#include "vkgraph.glsl"
#include "kpn.glsl"
// Block matching at one level, the nonlocal taps of arch 2 (modules/kpn-t/reference.py:
// block_match, which defines it). For pixel p and each offset o of the 11x11 search window
// (the centre left out; index k in row-major order), d(p, o) is the mean over the 5x5 patch
// of (Y(p + u + o) - Y(p + u))^2, Y the luma of the level's image, positions mirrored. Keeps
// the NL_TAPS smallest in ascending order (equal ones: the lower index first) and writes
// their indices (8 bits each, 4 to a word) and features log2(1 + d / (2 sigma^2)), sigma from
// the level's noise variance (alpha) as diff's. A workgroup of MATCH_TILE^2 pixels first
// reads the luma of its tile and the halo the patches reach into shared memory.
#define MATCH_TILE 8
#define HALO (NL_RADIUS + NL_PATCH)
#define SPAN (MATCH_TILE + 2 * HALO)
IMG_IN(0, fine)
SSBO_OUT(1, uint, nltap)  // NL_TAPS / 4 words a pixel
SSBO_OUT(2, float, nldist)  // NL_TAPS features a pixel
layout(push_constant) uniform Push { float band; } push;

shared float Y[SPAN * SPAN];

#define PATCH (2 * NL_PATCH + 1)

// the mean squared difference of the patch at `at` + o to the pixel's own, `own` (loops
// unrolled: the CPU driver then keeps `own` in registers instead of indexing memory)
float patch_distance(ivec2 at, ivec2 o, float own[PATCH * PATCH]) {
  float s = 0.0;
  int row = (at.y + o.y - NL_PATCH) * SPAN + at.x + o.x - NL_PATCH;
  [[unroll]] for (int v = 0; v < PATCH; v++)
    [[unroll]] for (int u = 0; u < PATCH; u++) {
      float e = Y[row + v * SPAN + u] - own[v * PATCH + u];
      s += e * e;
    }
  return s / float(PATCH * PATCH);
}

void main() {
  ivec2 size = node.roi[0].xy;
  ivec2 base = ivec2(gl_WorkGroupID.xy) * MATCH_TILE - HALO;
  for (uint t = gl_LocalInvocationIndex; t < SPAN * SPAN; t += MATCH_TILE * MATCH_TILE)
    Y[t] = dot(fine[texel(0, base + ivec2(t % SPAN, t / SPAN))].rgb, luma2020);
  barrier();
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (!inside(0, p)) return;
  ivec2 at = ivec2(gl_LocalInvocationID.xy) + HALO;  // p in the shared tile
  float best[NL_TAPS];
  int which[NL_TAPS];
  for (int j = 0; j < NL_TAPS; j++) {
    best[j] = 3.0e38;  // above any distance of values in [0, 1e19)
    which[j] = 0;
  }
  float own[PATCH * PATCH];  // the pixel's own patch, read once
  [[unroll]] for (int v = 0; v < PATCH; v++)
    [[unroll]] for (int u = 0; u < PATCH; u++)
      own[v * PATCH + u] = Y[(at.y + v - NL_PATCH) * SPAN + at.x + u - NL_PATCH];
  for (uint k = 0u; k < (2 * NL_RADIUS + 1) * (2 * NL_RADIUS + 1) - 1; k++) {
    float s = patch_distance(at, nl_offset(k), own);
    if (s < best[NL_TAPS - 1]) {  // insert, behind any equal one: a chain of selects with
      int w = int(k);             // fixed indices (no branch per step); from the insertion
      bool moved = false;         // on, each entry moves one place down
      [[unroll]] for (int j = 0; j < NL_TAPS; j++) {
        bool c = moved || s < best[j];
        moved = c;
        float bs = best[j];
        int bw = which[j];
        best[j] = c ? s : bs;
        which[j] = c ? w : bw;
        s = c ? bs : s;
        w = c ? bw : w;
      }
    }
  }
  int i = p.x + p.y * size.x;
  float sigma = max(push.band * sqrt(max(fine[i].a, 0.0)), SIGMA_FLOOR);
  for (int w = 0; w < NL_TAPS / 4; w++)
    nltap[NL_TAPS / 4 * i + w] = uint(which[4 * w]) | uint(which[4 * w + 1]) << 8
                                | uint(which[4 * w + 2]) << 16 | uint(which[4 * w + 3]) << 24;
  for (int j = 0; j < NL_TAPS; j++)
    nldist[NL_TAPS * i + j] = log2(1.0 + best[j] / (2.0 * sigma * sigma));
}
