#version 460
#extension GL_GOOGLE_include_directive : enable
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "vkgraph.glsl"
#include "layout.gen"  // KPN_NW etc.: the weight layout (modules/kpn-t/forward.py)
#include "kpn.glsl"
// The fused kernels' per-layer scales (fwd_cm, bck_fused; kpn.glsl, LAYER_SCALE): for matrix l
// (workgroup l) f_l = 2^-e_l, e_l = round(log2(|W_l|_F / r_l)), with r_l the Frobenius norm of
// a Xavier-initialised matrix of its shape (8 for 64 x 64; matrix 6: its N_OUT rows), where
// the activations are O(1): a layer whose weights grew by 2^e has its output scaled back by
// 2^-e, so f16 holds the activations however large the weights become (exact but for f16's
// rounding: powers of two, and the MLP is positively homogeneous). All-zero weights: 1;
// |e_l| <= 16, so that the kernels' products of the seven stay within f32's range.
layout(local_size_x = 256) in;
SSBO_IN(0, float16_t, w)
SSBO_OUT(1, float, lsc)

shared float part[256];

void main() {
  uint l = gl_WorkGroupID.x, t = gl_LocalInvocationIndex;
  uint n = l < 6u ? 4096u : uint(N_OUT) * 64u;
  float ss = 0.0;
  for (uint i = t; i < n; i += 256u) {
    float v = float(w[4096u * l + i]);
    ss += v * v;
  }
  part[t] = ss;
  barrier();
  for (uint k = 128u; k > 0u; k >>= 1) {
    if (t < k) part[t] += part[t + k];
    barrier();
  }
  if (t == 0u) {
    float r = 0.125 * sqrt(float(n));  // Xavier uniform +-sqrt(6/128): rms 1/8
    float e = part[0] > 0.0 && finite(part[0]) ? clamp(round(log2(sqrt(part[0]) / r)), -16.0, 16.0) : 0.0;
    lsc[l] = exp2(-e);
  }
}
