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
SSBO_IN(0, vec4, w4)   // W_l[o][4q..4q+3] = w4[1024 l + 16 o + q]
SSBO_IN(1, vec4, A4)   // h_s[p][4q..4q+3] = A4[16 (s N + p) + q]
SSBO_IN(2, vec4, dK4)  // dK[p][4q..4q+3] = dK4[4 p + q]
SSBO_OUT(3, vec4, G4)  // g_l[p][4q..4q+3] = G4[16 ((l-1) N + p) + q]
#define MLP_WIDTH 64
#include "mlp.glsl"
#include "cpu.glsl"  // PX, SG, ROW

float g[PX][64];  // dE/dz of the layer's output
float d[PX][64];  // W^T g

// d[k][c] += W_l[o][c] g[k][o] for c = c0 + 4 L + comp, the weight coming from lane L
#define MAC(comp, L, c)                                                 \
  {                                                                     \
    float wv = FROM_LANE(comp, L);                              \
    [[unroll]] for (int k = 0; k < PX; k++) d[k][c] += wv * go[k];      \
  }

void main() {
  int N = push.N;
  int lane = int(gl_SubgroupInvocationID);
  int base = (int(gl_GlobalInvocationID.x) - lane) * PX + lane;
  // every lane stays active (the broadcasts read all lanes): pixels past N compute a copy
  // of pixel N-1 and store nothing
  [[unroll]] for (int k = 0; k < PX; k++) {
    int p = min(base + SG * k, N - 1);
    [[unroll]] for (int q = 0; q < 4; q++) {
      vec4 v = dK4[4 * p + q];
      g[k][4 * q] = v.x; g[k][4 * q + 1] = v.y; g[k][4 * q + 2] = v.z; g[k][4 * q + 3] = v.w;
    }
  }
  for (int l = 6; l >= 1; l--) {
    [[unroll]] for (int k = 0; k < PX; k++)
      [[unroll]] for (int c = 0; c < 64; c++) d[k][c] = 0.0;
    int nin = l == 6 ? N_OUT : 64;  // g_7 = dK has N_OUT columns (bck adds the zero rest)
    for (int o = 0; o < nin; o++) {
      float go[PX];
      [[unroll]] for (int k = 0; k < PX; k++) go[k] = g[k][o];
      vec4 v0 = w4[1024 * l + 16 * o + lane];
      vec4 v1 = w4[1024 * l + 16 * o + 8 + lane];
      ROW(v0, 0)
      ROW(v1, 32)
    }
    [[unroll]] for (int k = 0; k < PX; k++) {
      int p = base + SG * k;
      int pc = min(p, N - 1);
      [[unroll]] for (int q = 0; q < 16; q++) {
        vec4 hv = A4[16 * (l * N + pc) + q];
        vec4 gv = vec4(d[k][4 * q], d[k][4 * q + 1], d[k][4 * q + 2], d[k][4 * q + 3]) *
                  vec4(mlp_activate_grad(hv.x, ACT_LEAKY), mlp_activate_grad(hv.y, ACT_LEAKY),
                       mlp_activate_grad(hv.z, ACT_LEAKY), mlp_activate_grad(hv.w, ACT_LEAKY));
        g[k][4 * q] = gv.x; g[k][4 * q + 1] = gv.y; g[k][4 * q + 2] = gv.z; g[k][4 * q + 3] = gv.w;
        if (p < N) G4[16 * ((l - 1) * N + p) + q] = gv;
      }
    }
  }
}
