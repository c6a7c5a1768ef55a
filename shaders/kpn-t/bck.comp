#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
#include "kpn.glsl"
// MLP backward for MLP_BATCH pixels per workgroup, one thread per neuron:
//   g_6 = leaky'(h_6) * (W_6^T dK),  g_l = leaky'(h_l) * (W_l^T g_{l+1})  (l = 5..1)
// g_l = dE/dz_l goes to G slot l-1 (at (l-1)*N*64 + 64p + c); no gradient to the features.
layout(push_constant) uniform Push { int N; } push;
#define MLP_WIDTH 64
#define MLP_BATCH 32
#define MLP_W(i) w[i]
SSBO_IN(0, float, w)
SSBO_IN(1, float, A)
SSBO_IN(2, float, dK)
SSBO_OUT(3, float, G)
#include "mlp.glsl"

void main() {
  int N = push.N;
  int p0 = int(gl_WorkGroupID.x) * MLP_BATCH;
  uint c = gl_LocalInvocationIndex;
  for (int r = 0; r < MLP_BATCH; r++) {
    int p = p0 + r;
    mlp_act[r][c] = (p < N && c < N_OUT) ? dK[p * N_OUT + int(c)] : 0.0;
  }
  barrier();
  for (int l = 6; l >= 1; l--) {
    mlp_backward_layer(0u, l);  // mlp_act = dE/dh_l
    for (int r = 0; r < MLP_BATCH; r++) {
      int p = p0 + r;
      float g = 0.0;
      if (p < N) {
        float h = A[uint(l) * uint(N) * 64u + uint(p) * 64u + c];
        g = mlp_act[r][c] * mlp_activate_grad(h, ACT_LEAKY);
        G[uint(l - 1) * uint(N) * 64u + uint(p) * 64u + c] = g;
      }
      mlp_act[r][c] = g;
    }
    barrier();
  }
}
