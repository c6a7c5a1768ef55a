#version 460
#extension GL_GOOGLE_include_directive : enable
#ifdef PRECISE
#extension GL_ARB_gpu_shader_fp64 : require
#endif
#include "vkgraph.glsl"
#include "kpn.glsl"
// I(p) = sum_k w_k D(p + T_k) / max(S, 0.001), S = sum_k w_k   (plain, mode 0)
// I(p) = sum_k softmax(K)_k D(p + T_k)                          (softmax, mode 1)
// I(p) = sigmoid(K_15) sum_k softmax(K)_k D(p + T_k)             (blend, mode 2: the band's
//        gain beta = sigmoid(K_15) lets the network remove a band where it is only noise)
// PRECISE (plain mode, gradient check): K, the sums and I in float64 (Kd in, Id out).
layout(push_constant) uniform Push { int mode; } push;
IMG_IN(0, detail)
SSBO_IN(1, float, K)
IMG_RW(2, filtered)
#ifdef PRECISE
SSBO_IN(3, double, Kd)
SSBO_OUT(4, dvec4, Id)

dvec3 apply_precise(int i, ivec2 p) {
  double S = 0.0lf;
  dvec3 num = dvec3(0.0lf);
  for (int k = 0; k < N_TAPS; k++) {
    double wk = tap_ok(K[i * N_OUT + k]) ? Kd[i * N_OUT + k] : double(TAP_FALLBACK);
    S += wk;
    num += wk * dvec3(detail[texel(0, p + taps[k])].rgb);
  }
  return num / max(S, double(S_FLOOR));
}
#endif

void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (!inside(2, p)) return;
  int i = p.x + p.y * node.roi[2].x;
#ifdef PRECISE
  if (push.mode == 0) {
    dvec3 I = apply_precise(i, p);
    filtered[i] = vec4(vec3(I), 1.0);
    Id[i] = dvec4(I, 1.0lf);
    return;
  }
#endif
  float wk[N_TAPS];
  float S = 0.0;
  if (push.mode >= 1) {
    SOFTMAX_EXP(K, i, wk, S)
    float gain = push.mode == 2 ? sigmoid(K[i * N_OUT + N_TAPS]) : 1.0;
    for (int k = 0; k < N_TAPS; k++) wk[k] *= gain / S;
    S = 1.0;
  } else {
    for (int k = 0; k < N_TAPS; k++) {
      float v = K[i * N_OUT + k];
      wk[k] = tap_ok(v) ? v : TAP_FALLBACK;
      S += wk[k];
    }
  }
  vec3 s = vec3(0.0);
  for (int k = 0; k < N_TAPS; k++) s += wk[k] * detail[texel(0, p + taps[k])].rgb;
  filtered[i] = vec4(s / max(S, S_FLOOR), 1.0);
#ifdef PRECISE
  Id[i] = dvec4(filtered[i]);  // softmax: no float64 exp in GLSL, the fp32 result
#endif
}
