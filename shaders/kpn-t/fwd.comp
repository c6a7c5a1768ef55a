#version 460
#extension GL_GOOGLE_include_directive : enable
#ifdef PRECISE
#extension GL_ARB_gpu_shader_fp64 : require
#endif
#ifdef W16
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#endif
#include "vkgraph.glsl"
#include "kpn.glsl"
// Features + MLP forward for MLP_BATCH pixels per workgroup, one thread per neuron.
//   h_0 = f (64 features), h_{l+1} = leaky(W_l h_l) (l = 0..5), K = W_6[0:N_OUT] h_6.
// TRAIN stores every post-activation h_0..h_6 in A (slot s at s*N*64 + 64p + c) for the
// backward; inference (kpn) only writes K. PRECISE computes in float64 and also writes K
// in float64 to Kd (for the gradient check, see mlp_f64.glsl).
#define MLP_WIDTH 64
#ifdef PRECISE
#define MLP_BATCH 16
#else
#define MLP_BATCH 32
#endif
#ifdef KPN_CTX  // arch 1 and 2: the context planes (and match features) of kpn.glsl
CTX_INPUTS
DEFINE_CTX_FEATURE(ctx_feature, ctxf, 0, ctxc, CTXC_B)
#else
IMG_IN(0, detail)
#endif
#ifdef W16  // kpn: f16 weights straight from a .lut
SSBO_IN(1, float16_t, w)
#define MLP_W(i) float(w[i])
#else
SSBO_IN(1, float, w)
#define MLP_W(i) w[i]
#endif
SSBO_OUT(2, float, K)
#ifdef TRAIN
SSBO_OUT(3, float, A)
#endif
#include "mlp.glsl"
#ifdef PRECISE
SSBO_OUT(4, double, Kd)
#include "mlp_f64.glsl"
#define ACT(r, c) float(mlp_dact[r][c])
#else
#define ACT(r, c) mlp_act[r][c]
#endif

void store(int slot, int p0, int N) {
#ifdef TRAIN
  uint c = gl_LocalInvocationIndex;
  for (int r = 0; r < MLP_BATCH; r++) {
    int p = p0 + r;
    if (p < N) A[uint(slot) * uint(N) * 64u + uint(p) * 64u + c] = ACT(r, c);
  }
#endif
}

void main() {
  ivec2 size = node.roi[0].xy;
  int N = size.x * size.y;
  int p0 = int(gl_WorkGroupID.x) * MLP_BATCH;
  int c = int(gl_LocalInvocationIndex);
  for (int r = 0; r < MLP_BATCH; r++) {
    int p = p0 + r;
    float f = 0.0;
#ifdef KPN_CTX
    if (p < N) f = ctx_feature(ivec2(p % size.x, p / size.x), c);
#else
    if (p < N) f = KPN_FEATURE(detail, 0, size, p, c);
#endif
#ifdef PRECISE
    mlp_dact[r][c] = double(f);
#else
    mlp_act[r][c] = f;
#endif
  }
  barrier();
  store(0, p0, N);
  for (int l = 0; l < 6; l++) {
#ifdef PRECISE
    mlp_forward_layer_f64(0u, l, MLP_WIDTH, ACT_LEAKY);
#else
    mlp_forward_layer(0u, l, MLP_WIDTH, ACT_LEAKY);
#endif
    store(l + 1, p0, N);
  }
#ifdef PRECISE
  mlp_forward_layer_f64(0u, 6, N_OUT, ACT_NONE);
#else
  mlp_forward_layer(0u, 6, N_OUT, ACT_NONE);
#endif
  if (c < N_OUT)
    for (int r = 0; r < MLP_BATCH; r++) {
      int p = p0 + r;
      if (p >= N) continue;
      K[p * N_OUT + c] = ACT(r, c);
#ifdef PRECISE
      Kd[p * N_OUT + c] = mlp_dact[r][c];
#endif
    }
}
