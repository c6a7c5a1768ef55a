#version 460
#extension GL_GOOGLE_include_directive : enable
#extension GL_EXT_control_flow_attributes : enable
#extension GL_KHR_shader_subgroup_shuffle : enable
#include "vkgraph.glsl"
#include "layout.gen"  // KPN_NW etc.: the weight layout (modules/kpn-t/forward.py)
#include "kpn.glsl"
// Weight gradient for CPU drivers (the "cpu" variant; mulw.comp's partials, each summed over
// its chunk's pixels in the same order): workgroup (chunk, layer l) is one subgroup of 8
// lanes; lane i owns dW_l[o][c] for all 64 rows o and the 8 columns c = 4i..4i+3,
// 32+4i..32+4i+3 (on the stack: far more than the registers). On llvmpipe every load inside
// the pixel loop is a loop over the lanes (per component, also where all lanes read the same
// address), so per pixel a lane loads its h_l[p] columns as two vec4s and two vec4s of g
// (rows 4i..4i+3, 32+4i..32+4i+3), and subgroupShuffle from a constant lane hands each g to
// every lane (cpu.glsl says why a shuffle, not a broadcast): 4 vec4 loads for 64 x 8
// multiply-adds a lane; and it takes two pixels a step, so each accumulator goes to and from
// the stack once for both. Measured at 64^2, 4 levels, one llvmpipe thread: 32.2 ms with
// 8-row blocks and g as uniform vec4 loads, 16.5 ms with 32-row blocks one pixel a step;
// two llvmpipe threads: 10.5 ms at 32 rows, 10.0 with two pixels a step, 4.9 at 64 rows.
//   dW_l[o][c] = sum_{p in chunk} g_{l+1}[p][o] h_l[p][c]
// g_{l+1} = G slot l (l < 6) or dK (l = 6, 16 columns); partials go to
// part[chunk * NW + 4096 l + 64 o + c] (reduce sums them).
layout(push_constant) uniform Push { int N; int chunk; } push;
#include "cpu.glsl"  // VEC4_IN
VEC4_IN(0, A4)   // h_s[p][4q..4q+3] = V4(A4, 16 (s N + p) + q)
VEC4_IN(1, G4)   // g_{s+1}[p][4q..4q+3] = V4(G4, 16 (s N + p) + q)
VEC4_IN(2, dK4)  // dK[p][4q..4q+3] = V4(dK4, N_OUT / 4 p + q)
SSBO_OUT(3, vec4, part4)

// rows 4J..4J+3 for pixels a and b (TWO), g from lane J % 8 of g?[J / 8]; the
// second pixel's products are added after the first's, so each accumulator is read from the
// stack and written back once for both (the same sums in the same order as one at a time)
#define G4(gv, J) float[4](subgroupShuffle(gv.x, J % 8), subgroupShuffle(gv.y, J % 8), \
                           subgroupShuffle(gv.z, J % 8), subgroupShuffle(gv.w, J % 8))
#define ROWS4(J)                                                              \
  if (4 * J < nrows) {                                                        \
    float g4[4] = G4(ga[J / 8], J);                                           \
    if (TWO) {                                                                \
      float g4b[4] = G4(gb[J / 8], J);                                        \
      [[unroll]] for (int j = 0; j < 4; j++) {                                \
        acc[4 * J + j][0] = acc[4 * J + j][0] + g4[j] * ha0 + g4b[j] * hb0;   \
        acc[4 * J + j][1] = acc[4 * J + j][1] + g4[j] * ha1 + g4b[j] * hb1;   \
      }                                                                       \
    } else {                                                                  \
      [[unroll]] for (int j = 0; j < 4; j++) {                                \
        acc[4 * J + j][0] += g4[j] * ha0;                                     \
        acc[4 * J + j][1] += g4[j] * ha1;                                     \
      }                                                                       \
    }                                                                         \
  }

// pixel p's h_layer columns c0 + 4 lane .. +3, and its g_{layer+1} rows 32 k + 4 lane .. +3
// (dK has N_OUT / 4 vec4s a pixel: lanes past them load copies that no row uses)
#define LOAD_H(p, c0) V4(A4, 16 * (layer * N + (p)) + (c0) + lane)
#define LOAD_G(p, k)                                                                   \
  (layer < 6 ? V4(G4, 16 * (layer * N + (p)) + 8 * (k) + lane) : V4(dK4, N_OUT / 4 * (p) + min(8 * (k) + lane, N_OUT / 4 - 1)))
#define LOAD_PIXEL(p, h0, h1, g)                                   \
  vec4 h0 = LOAD_H(p, 0), h1 = LOAD_H(p, 8), g[2];                 \
  g[0] = LOAD_G(p, 0);                                             \
  g[1] = LOAD_G(p, 1)
#define ALL_ROWS                                                   \
  ROWS4(0) ROWS4(1) ROWS4(2) ROWS4(3) ROWS4(4) ROWS4(5) ROWS4(6) ROWS4(7)        \
  ROWS4(8) ROWS4(9) ROWS4(10) ROWS4(11) ROWS4(12) ROWS4(13) ROWS4(14) ROWS4(15)

void main() {
  int N = push.N;
  int lane = int(gl_SubgroupInvocationID);
  int chunk = int(gl_WorkGroupID.x), layer = int(gl_WorkGroupID.y);
  int pbeg = chunk * push.chunk, pend = min(N, pbeg + push.chunk);
  // rows N_OUT..63 of the last matrix have no gradient (they stay 0)
  int nrows = layer < 6 ? 64 : N_OUT;
  vec4 acc[64][2];  // [row o][column half]
  [[unroll]] for (int r = 0; r < 64; r++) { acc[r][0] = vec4(0.0); acc[r][1] = vec4(0.0); }
  int p = pbeg;
  for (; p + 1 < pend; p += 2) {  // two pixels a step
    LOAD_PIXEL(p, ha0, ha1, ga);
    LOAD_PIXEL(p + 1, hb0, hb1, gb);
#define TWO true
    ALL_ROWS
#undef TWO
  }
  if (p < pend) {  // an odd last pixel
    LOAD_PIXEL(p, ha0, ha1, ga);
    vec4 hb0, hb1, gb[2];
#define TWO false
    ALL_ROWS
#undef TWO
  }
  int out0 = (chunk * int(KPN_NW) + layer * 4096) / 4;
  [[unroll]] for (int o = 0; o < 64; o++) {
    part4[out0 + 16 * o + lane] = acc[o][0];
    part4[out0 + 16 * o + 8 + lane] = acc[o][1];
  }
}
