#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
#include "params.gen"  // the params block, generated from modules/mlp-t/params
// Weight gradient of matrix l of net n over one chunk of its samples, blocked in shared
// memory (mlp_weight_grad in mlp.glsl): workgroup (chunk, l, n) of 16 x 16 threads computes
//   part[chunk][n][l][o][c] = sum_{i in chunk} g_l[i][o] h_l[i][c]
// from A slot l (h_l) and G slot l (g_l = s dE/dz_{l+1}); reduce sums the chunks.
layout(push_constant) uniform Push { int batch; int bpad; int chunk; } push;
SSBO_IN(0, float, A)
SSBO_IN(1, float, G)
SSBO_OUT(2, float, part)
#define MLP_GRAD_ROWS 16
#include "config.glsl"

uint slot_base;  // first word of slot l

float mlp_grad_in(int p, int c) { return A[slot_base + uint(p * MLP_WIDTH + c)]; }
float mlp_grad_out(int p, int o) { return G[slot_base + uint(p * MLP_WIDTH + o)]; }

#include "mlp.glsl"

void main() {
  int chunk = int(gl_WorkGroupID.x), l = int(gl_WorkGroupID.y), n = int(gl_WorkGroupID.z);
  slot_base = uint(l) * uint(NETS * push.bpad * MLP_WIDTH);
  int beg = chunk * push.chunk;
  int end = min(push.batch, beg + push.chunk);
  float acc[MLP_GB * MLP_GB];
  for (int k = 0; k < MLP_GB * MLP_GB; k++) acc[k] = 0.0;
  mlp_weight_grad(n * push.bpad + beg, n * push.bpad + end, acc);
  uint base = uint(chunk) * uint(NW) + uint(n) * uint(NET_W) + uint(l * MLP_WW);
  for (int k = 0; k < MLP_GB * MLP_GB; k++) {
    ivec2 oc = mlp_grad_entry(k);
    part[base + uint(oc.x * MLP_WIDTH + oc.y)] = acc[k];
  }
}
