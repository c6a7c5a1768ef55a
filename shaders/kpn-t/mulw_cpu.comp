#version 460
#extension GL_GOOGLE_include_directive : enable
#extension GL_EXT_control_flow_attributes : enable
#extension GL_KHR_shader_subgroup_shuffle : enable
#include "vkgraph.glsl"
#include "kpn.glsl"
// Weight gradient for CPU drivers (the "cpu" variant; mulw.comp's partials, each summed over
// its chunk's pixels in the same order): workgroup (chunk, layer l, row block b) is one
// subgroup of 8 lanes; lane i owns dW_l[o][c] for the 32 rows o = 32b..32b+31 and the 8
// columns c = 4i..4i+3, 32+4i..32+4i+3 (spilled to the stack where registers run out). On
// llvmpipe every load inside the pixel loop is a loop over the lanes (per component, also
// where all lanes read the same address), so per pixel a lane loads its h_l[p] columns as
// two vec4s and one vec4 of g (rows 32b+4i..32b+4i+3), and subgroupShuffle from a constant
// lane hands each g to every lane (cpu.glsl says why a shuffle, not a broadcast): 3 vec4
// loads for 32 x 8 multiply-adds a lane. Measured at 64^2, 4 levels, one llvmpipe thread:
// 32.2 ms with 8-row blocks and g as uniform vec4 loads, 16.5 ms this way.
//   dW_l[o][c] = sum_{p in chunk} g_{l+1}[p][o] h_l[p][c]
// g_{l+1} = G slot l (l < 6) or dK (l = 6, 16 columns); partials go to
// part[chunk * 28672 + 4096 l + 64 o + c] (reduce sums them).
layout(push_constant) uniform Push { int N; int chunk; } push;
SSBO_IN(0, vec4, A4)   // h_s[p][4q..4q+3] = A4[16 (s N + p) + q]
SSBO_IN(1, vec4, G4)   // g_{s+1}[p][4q..4q+3] = G4[16 (s N + p) + q]
SSBO_IN(2, vec4, dK4)  // dK[p][4q..4q+3] = dK4[4 p + q]
SSBO_OUT(3, vec4, part4)

// rows 4J..4J+3 of the block, g from lane J's gv
#define ROWS4(J)                                                              \
  if (4 * J < nrows) {                                                        \
    float g4[4] = float[4](subgroupShuffle(gv.x, J), subgroupShuffle(gv.y, J), \
                           subgroupShuffle(gv.z, J), subgroupShuffle(gv.w, J)); \
    [[unroll]] for (int j = 0; j < 4; j++) {                                  \
      acc[4 * J + j][0] += g4[j] * h0;                                        \
      acc[4 * J + j][1] += g4[j] * h1;                                        \
    }                                                                         \
  }

void main() {
  int N = push.N;
  int lane = int(gl_SubgroupInvocationID);
  int chunk = int(gl_WorkGroupID.x), layer = int(gl_WorkGroupID.y), blk = int(gl_WorkGroupID.z);
  int pbeg = chunk * push.chunk, pend = min(N, pbeg + push.chunk);
  // rows 16..63 of the last matrix have no gradient (they stay 0)
  int nrows = layer < 6 ? 32 : N_OUT - 32 * blk;
  vec4 acc[32][2];  // [row o - 32 blk][column half]
  [[unroll]] for (int r = 0; r < 32; r++) { acc[r][0] = vec4(0.0); acc[r][1] = vec4(0.0); }
  if (nrows > 0) {
    for (int p = pbeg; p < pend; p++) {
      vec4 h0 = A4[16 * (layer * N + p) + lane];
      vec4 h1 = A4[16 * (layer * N + p) + 8 + lane];
      // dK has 4 vec4s a pixel: lanes 4..7 load copies that no row uses
      vec4 gv = layer < 6 ? G4[16 * (layer * N + p) + 8 * blk + lane] : dK4[4 * p + min(lane, 3)];
      ROWS4(0) ROWS4(1) ROWS4(2) ROWS4(3) ROWS4(4) ROWS4(5) ROWS4(6) ROWS4(7)
    }
  }
  int out0 = (chunk * 28672 + layer * 4096) / 4;
  [[unroll]] for (int r = 0; r < 32; r++) {
    int o = 32 * blk + r;
    part4[out0 + 16 * o + lane] = acc[r][0];
    part4[out0 + 16 * o + 8 + lane] = acc[r][1];
  }
}
