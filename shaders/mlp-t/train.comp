#version 460
#extension GL_GOOGLE_include_directive : enable
#if ENC >= 3
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_shader_atomic_int64 : require
#endif
#include "vkgraph.glsl"
#include "rng.glsl"
#include "params.gen"  // the params block, generated from modules/mlp-t/params
// One fused training step for MLP_BATCH samples of net n = workgroup y, one thread per neuron:
//   samples   uv_i from mrand seeded by (seed, frame, n, i), target t_i = T(uv_i) of the tile
//   forward   h_0 = enc(uv), h_{l+1} = act(W_l h_l), y = out_act(W_{L-1} h_{L-1})
//   loss      E_n = 1/(B K) sum_i sum_{k<K} l(y_ik, t_ik)   (B = batch, K = N_OUT)
//   backward  g_{L-1} = s dE/dy * out_act'(y),  g_{l-1} = act'(h_l) * (W_l^T g_l)
// with s = lscale. h_l goes to A slot l and g_l (= s dE/dz_{l+1}) to G slot l, row
// (slot * S + n * bpad + i) with S = NETS * bpad; wgrad forms the weight gradient from them.
// Rows i >= batch (padding of the last workgroup) get zero gradient and no loss. Loss
// partials are (hi, lo) float pairs. PRECISE (for the gradient check) runs the forward and
// the loss in float64 (mlp_f64.glsl) on the same samples every frame; the backward stays fp32.
// Table encodings (ENC 3, 4) go on to dE/dh_0 = W_0^T g_0 and scatter it through the
// interpolation weights into tacc: dE/dT_e += w_k dE/dh_0 as 64-bit fixed point (T_FIX),
// integer atomics, so the sum does not depend on the order (reproducible runs); a non-finite
// contribution counts in tacc[TABLE]. JITTER: sample i is texel (i k + rot_f) mod texels at a
// random offset inside it (k = max(1, texels / batch) spreads a smaller batch evenly over the
// tile, rot_f is a random rotation per frame), else uniform in [0,1)^DIMS.
layout(push_constant) uniform Push { int batch; int bpad; } push;
IMG_IN(0, target)
SSBO_IN(1, float, w)
SSBO_OUT(2, float, A)
SSBO_OUT(3, float, G)
SSBO_OUT(4, vec2, Epart)
#if ENC >= 3
SSBO_RW(5, int64_t, tacc)
#endif
#define MLP_W(i) w[i]
#include "net.glsl"

#ifdef PRECISE
#define LOSS_T double
#define LOSS_ABS(x) abs(x)
#define LOSS_C(x) double(x)
#else
#define LOSS_T float
#define LOSS_ABS(x) abs(x)
#define LOSS_C(x) float(x)
#endif

#include "loss.glsl"

shared vec4 s_t[MLP_BATCH];
shared LOSS_T s_e[MLP_WIDTH];

uint row(int slot, int s) {
  return (uint(slot) * uint(NETS * push.bpad) + uint(s)) * uint(MLP_WIDTH);
}

void main() {
  int n = int(gl_WorkGroupID.y);
  int i0 = int(gl_WorkGroupID.x) * MLP_BATCH;
  int s0 = n * push.bpad + i0;  // first row of this workgroup
  uint woff = uint(n) * uint(NET_W);
  int c = int(gl_LocalInvocationIndex);
  for (int r = c; r < MLP_BATCH; r += MLP_WIDTH) {
#ifdef PRECISE
    uint f = 0u;  // the gradient check needs the same samples every frame
#else
    uint f = params.resample != 0 ? uint(global.frame) : 0u;  // resample 0: the same batch
#endif
    POS uv = sample_pos(n, i0 + r, f, push.batch);
    net_uv[r] = uv;
    s_t[r] = fetch_target(n, uv);
  }
  barrier();
  net_inputs();
  for (int l = 0; l < MLP_LAYERS; l++) {
    for (int r = 0; r < MLP_BATCH; r++) A[row(l, s0 + r) + uint(c)] = NET_ACT(r, c);
    net_layer(woff, l);
  }
  // loss and its gradient at the output (thread k = output k)
  float scale = 1.0 / float(push.batch * N_OUT);
  LOSS_T e = LOSS_C(0.0);
  for (int r = 0; r < MLP_BATCH; r++) {
    float g = 0.0;
    if (c < N_OUT && i0 + r < push.batch) {
      float y = NET_ACT(r, c), t = s_t[r][c];
#ifdef PRECISE
      e += loss_value(mlp_dact[r][c], double(t));
#else
      e += loss_value(y, t);
#endif
      g = params.lscale * scale * loss_grad(y, t) * mlp_activate_grad(y, OUT_ACT);
    }
    mlp_act[r][c] = g;
    G[row(MLP_LAYERS - 1, s0 + r) + uint(c)] = g;
  }
  s_e[c] = e * LOSS_C(scale);
  barrier();
  if (c == 0) {
    LOSS_T sum = LOSS_C(0.0);
    for (int k = 0; k < N_OUT; k++) sum += s_e[k];
    float hi = float(sum);
    Epart[n * int(gl_NumWorkGroups.x) + int(gl_WorkGroupID.x)] = vec2(hi, float(sum - LOSS_C(hi)));
  }
  for (int l = MLP_LAYERS - 1; l >= 1; l--) {
    mlp_backward_layer(woff, l);  // mlp_act = s dE/dh_l
    for (int r = 0; r < MLP_BATCH; r++) {
      float g = 0.0;
      if (c < HIDDEN) g = mlp_act[r][c] * mlp_activate_grad(A[row(l, s0 + r) + uint(c)], ACT);
      mlp_act[r][c] = g;
      G[row(l - 1, s0 + r) + uint(c)] = g;
    }
    barrier();
  }
#if ENC >= 3
  mlp_backward_layer(woff, 0);  // mlp_act = s dE/dh_0
  if (c < N_IN) {
    int f = c % T_FEAT;
    for (int r = 0; r < MLP_BATCH && i0 + r < push.batch; r++) {
      float g = mlp_act[r][c] / params.lscale;
      if (g == 0.0) continue;
      uint idx[T_CORNERS];
      float wt[T_CORNERS];
      t_cell(c / T_FEAT, net_uv[r], idx, wt);
      T_SCATTER(tacc, idx, wt, f, g)
    }
  }
#endif
}
