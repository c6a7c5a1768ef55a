#version 460
#extension GL_GOOGLE_include_directive : enable
#extension GL_EXT_control_flow_attributes : enable
#include "vkgraph.glsl"
#include "kpn.glsl"
// Weight gradient for CPU drivers (the "cpu" variant; mulw.comp's partials, each summed over
// its chunk's pixels in the same order): workgroup (chunk, layer l, row block b) is one
// subgroup of 8 lanes; lane i owns dW_l[o][c] for the 8 rows o = 8b..8b+7 and the 8 columns
// c = 4i..4i+3, 32+4i..32+4i+3, in registers. Per pixel a lane loads h_l[p] and g[p] as vec4
// (few, wide loads: on llvmpipe each per-lane load is a loop over the lanes) and does 64
// multiply-adds.
//   dW_l[o][c] = sum_{p in chunk} g_{l+1}[p][o] h_l[p][c]
// g_{l+1} = G slot l (l < 6) or dK (l = 6, 16 columns); partials go to
// part[chunk * 28672 + 4096 l + 64 o + c] (reduce sums them).
layout(push_constant) uniform Push { int N; int chunk; } push;
SSBO_IN(0, vec4, A4)   // h_s[p][4q..4q+3] = A4[16 (s N + p) + q]
SSBO_IN(1, vec4, G4)   // g_{s+1}[p][4q..4q+3] = G4[16 (s N + p) + q]
SSBO_IN(2, vec4, dK4)  // dK[p][4q..4q+3] = dK4[4 p + q]
SSBO_OUT(3, vec4, part4)

void main() {
  int N = push.N;
  int lane = int(gl_LocalInvocationIndex);
  int chunk = int(gl_WorkGroupID.x), layer = int(gl_WorkGroupID.y), blk = int(gl_WorkGroupID.z);
  int pbeg = chunk * push.chunk, pend = min(N, pbeg + push.chunk);
  vec4 acc[8][2];  // [row o - 8 blk][column half]
  [[unroll]] for (int r = 0; r < 8; r++) { acc[r][0] = vec4(0.0); acc[r][1] = vec4(0.0); }
  if (layer < 6 || blk < 2) {  // rows 16..63 of the last matrix have no gradient
    for (int p = pbeg; p < pend; p++) {
      vec4 h0 = A4[16 * (layer * N + p) + lane];
      vec4 h1 = A4[16 * (layer * N + p) + 8 + lane];
      vec4 g0, g1;
      if (layer < 6) {
        g0 = G4[16 * (layer * N + p) + 2 * blk];
        g1 = G4[16 * (layer * N + p) + 2 * blk + 1];
      } else {
        g0 = dK4[4 * p + 2 * blk];
        g1 = dK4[4 * p + 2 * blk + 1];
      }
      float g[8] = float[8](g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w);
      [[unroll]] for (int r = 0; r < 8; r++) {
        acc[r][0] += g[r] * h0;
        acc[r][1] += g[r] * h1;
      }
    }
  }
  int out0 = (chunk * 28672 + layer * 4096) / 4;
  [[unroll]] for (int r = 0; r < 8; r++) {
    int o = 8 * blk + r;
    part4[out0 + 16 * o + lane] = acc[r][0];
    part4[out0 + 16 * o + 8 + lane] = acc[r][1];
  }
}
