#version 460
#extension GL_GOOGLE_include_directive : enable
#extension GL_EXT_control_flow_attributes : enable
#extension GL_KHR_shader_subgroup_ballot : enable
#extension GL_KHR_shader_subgroup_shuffle : enable
#include "vkgraph.glsl"
#include "kpn.glsl"
// MLP backward for CPU drivers (the "cpu" variant; bck.comp's maths and order of sums, so
// the results are the same bits): one pixel per invocation, PX pixels per invocation as in
// fwd_cpu.comp (see there why: wide vec4 loads of weight rows, a subgroupShuffle from a
// constant lane hands each weight to every lane).
//   g_6 = leaky'(h_6) * (W_6^T dK),  g_l = leaky'(h_l) * (W_l^T g_{l+1})  (l = 5..1)
// g_l = dE/dz_l goes to G slot l-1 (at (l-1)*N*64 + 64p + c), as bck writes it.
layout(push_constant) uniform Push { int N; } push;
#include "cpu.glsl"  // PX, SG, ROW2, VEC4_IN
VEC4_IN(0, w4)   // W_l[o][4q..4q+3] = V4(w4, 1024 l + 16 o + q)
VEC4_IN(1, A4)   // h_s[p][4q..4q+3] = V4(A4, 16 (s N + p) + q)
VEC4_IN(2, dK4)  // dK[p][4q..4q+3] = V4(dK4, N_OUT / 4 p + q)
SSBO_OUT(3, vec4, G4)  // g_l[p][4q..4q+3] = G4[16 ((l-1) N + p) + q]
#define MLP_WIDTH 64
#include "mlp.glsl"

float g[PX][64];  // dE/dz of the layer's output
float d[PX][64];  // W^T g

// d[k][c] += W_l[o][c] g[k][o] + W_l[o+1][c] g[k][o+1] for c = c0 + 4 L + comp, the
// weights coming from lane L: rows o and o + 1 at once, so each d goes to and from the stack
// once for both (the sums in the same order as one row at a time, so the same bits)
#define MAC2(ca, cb, L, c)                                                          \
  {                                                                                 \
    float wa = FROM_LANE(ca, L), wb = FROM_LANE(cb, L);                             \
    [[unroll]] for (int k = 0; k < PX; k++) d[k][c] = d[k][c] + wa * ga[k] + wb * gb[k]; \
  }

void main() {
  int N = push.N;
  int lane = int(gl_SubgroupInvocationID);
  int base = (int(gl_GlobalInvocationID.x) - lane) * PX + lane;
  // every lane stays active (the broadcasts read all lanes): pixels past N compute a copy
  // of pixel N-1 and store nothing
  [[unroll]] for (int k = 0; k < PX; k++) {
    int p = min(base + SG * k, N - 1);
    [[unroll]] for (int q = 0; q < N_OUT / 4; q++) {
      vec4 v = V4(dK4, N_OUT / 4 * p + q);
      g[k][4 * q] = v.x; g[k][4 * q + 1] = v.y; g[k][4 * q + 2] = v.z; g[k][4 * q + 3] = v.w;
    }
  }
  for (int l = 6; l >= 1; l--) {
    [[unroll]] for (int k = 0; k < PX; k++)
      [[unroll]] for (int c = 0; c < 64; c++) d[k][c] = 0.0;
    int nin = l == 6 ? N_OUT : 64;  // g_7 = dK has N_OUT columns (bck adds the zero rest)
    for (int o = 0; o < nin; o += 2) {  // (nin is even)
      float ga[PX], gb[PX];
      [[unroll]] for (int k = 0; k < PX; k++) {
        ga[k] = g[k][o];
        gb[k] = g[k][o + 1];
      }
      vec4 a0 = V4(w4, 1024 * l + 16 * o + lane), a1 = V4(w4, 1024 * l + 16 * o + 8 + lane);
      vec4 b0 = V4(w4, 1024 * l + 16 * o + 16 + lane), b1 = V4(w4, 1024 * l + 16 * o + 24 + lane);
      ROW2(a0, b0, 0)
      ROW2(a1, b1, 32)
    }
    [[unroll]] for (int k = 0; k < PX; k++) {
      int p = base + SG * k;
      int pc = min(p, N - 1);
      [[unroll]] for (int q = 0; q < 16; q++) {
        vec4 hv = V4(A4, 16 * (l * N + pc) + q);
        vec4 gv = vec4(d[k][4 * q], d[k][4 * q + 1], d[k][4 * q + 2], d[k][4 * q + 3]) *
                  vec4(mlp_activate_grad(hv.x, ACT_LEAKY), mlp_activate_grad(hv.y, ACT_LEAKY),
                       mlp_activate_grad(hv.z, ACT_LEAKY), mlp_activate_grad(hv.w, ACT_LEAKY));
        g[k][4 * q] = gv.x; g[k][4 * q + 1] = gv.y; g[k][4 * q + 2] = gv.z; g[k][4 * q + 3] = gv.w;
        if (p < N) G4[16 * ((l - 1) * N + p) + q] = gv;
      }
    }
  }
}
