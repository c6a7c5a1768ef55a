#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
#include "layout.gen"  // KPN_NW etc.: the weight layout (modules/kpn-t/forward.py)
#include "kpn.glsl"
// Weight gradient as a matrix product over pixels, blocked (mlp_weight_grad in mlp.glsl):
// workgroup (chunk, layer l) of 16x16 threads computes the 64x64 partial
//   dW_l[o][c] = sum_{p in chunk} g_{l+1}[p][o] h_l[p][c]
// with g_{l+1} = G slot l (l < 6) or dK (l = 6, 16 columns) and h_l = A slot l. Partials go
// to part[chunk * NW + 4096 l + 64 o + c] (reduce sums them).
layout(push_constant) uniform Push { int N; int chunk; } push;
SSBO_IN(0, float, A)
SSBO_IN(1, float, G)
SSBO_IN(2, float, dK)
SSBO_OUT(3, float, part)

#define MLP_WIDTH 64
#define MLP_GRAD_ROWS 16
int layer;
uint base;  // first word of slot `layer` in A and G

float mlp_grad_in(int p, int c) { return A[base + uint(p * 64 + c)]; }
float mlp_grad_out(int p, int o) {
  if (layer < 6) return G[base + uint(p * 64 + o)];
  return o < N_OUT ? dK[p * N_OUT + o] : 0.0;
}

#include "mlp.glsl"

void main() {
  layer = int(gl_WorkGroupID.y);
  int chunk = int(gl_WorkGroupID.x);
  base = uint(layer) * uint(push.N) * 64u;
  int pbeg = chunk * push.chunk, pend = min(push.N, pbeg + push.chunk);
  float acc[MLP_GB * MLP_GB];
  for (int k = 0; k < MLP_GB * MLP_GB; k++) acc[k] = 0.0;
  mlp_weight_grad(pbeg, pend, acc);
  uint out0 = uint(chunk) * KPN_NW + uint(layer) * 4096u;
  for (int k = 0; k < MLP_GB * MLP_GB; k++) {
    ivec2 oc = mlp_grad_entry(k);
    part[out0 + uint(oc.x * 64 + oc.y)] = acc[k];
  }
}
