#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
#include "kpn.glsl"
// D_i = M_i - U(M_{i+1}); alpha = the MLP's feature source (kpn.glsl): the luminance of |D_i|,
// or with NOISE_FEATURES its signal-to-noise ratio log2(1 + Y(|D_i|) / sigma_i), where
// sigma_i = band * sqrt(M_i.alpha): M_i's alpha holds the local noise variance of a level-0
// pixel (nmap, blurred by sub) and `band` is the std of D_i for unit white noise at level 0.
// KPN_CTX: also the context plane of arch 1's features (kpn.glsl).
// FEATURE_PLANE: the feature source also goes to `feat` as f16, one a pixel, for the
// cooperative-matrix kernels (which round it to f16 anyway): their gathers of 64 features a
// pixel then read 2 bytes each instead of a 16-byte texel.
#ifdef FEATURE_PLANE
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#endif
IMG_IN(0, fine)
IMG_IN(1, coarse)
IMG_OUT(2, detail)
#ifdef FEATURE_PLANE
SSBO_OUT(3, float16_t, feat)
#endif
#ifdef KPN_CTX  // arch 1's context plane Q_i (kpn.glsl): (s_i, c_i, 0, 0), NOISE_FEATURES only
IMG_OUT(3, ctx)
#endif
DEFINE_UPSAMPLE(upsample, coarse, 1)
#ifdef NOISE_FEATURES
layout(push_constant) uniform Push { float band; } push;
#endif

void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (!inside(2, p)) return;
  int i = p.x + p.y * node.roi[2].x;
  vec4 m = fine[i];
  vec3 d = m.rgb - upsample(p).rgb;
  float f = dot(abs(d), luma2020);
#ifdef NOISE_FEATURES
  float sigma = push.band * sqrt(max(m.a, 0.0));
  f = log2(1.0 + f / max(sigma, SIGMA_FLOOR));
#endif
  detail[i] = vec4(d, f);
#ifdef KPN_CTX
  float y = dot(d, luma2020), s = max(sigma, SIGMA_FLOOR);
  vec3 o = opp * d;
  ctx[i] = vec4(sign(y) * log2(1.0 + abs(y) / s), log2(1.0 + length(o.yz) / s), 0.0, 0.0);
#endif
#ifdef FEATURE_PLANE
  feat[i] = float16_t(f);
#endif
}
