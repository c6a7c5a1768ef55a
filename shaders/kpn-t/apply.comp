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
// PRECISE (gradient check): K, the taps' weights, the sums and I in float64 (Kd in, Id out);
// softmax and the band gain through a float64 exp (f64.glsl).
// KPN_CTX (arch 1, mode 2 only): in the opponent space of P (kpn.glsl), Do = P D,
//   Io.x = sigmoid(K_15) sum_k softmax(K_0..14)_k Do.x(p + T_k)          (luma)
//   Io.yz = sigmoid(K_31) sum_k softmax(K_16..30)_k Do.yz(p + T_k)      (chroma)
//   I = P^T Io
layout(push_constant) uniform Push { int mode; } push;
IMG_IN(0, detail)
#ifdef PRECISE
SSBO_IN(1, float, K)
#else
SSBO_IN(1, vec4, K4)  // K: N_OUT / 4 vec4 a pixel (16-byte reads, as dapply.comp)
#endif
IMG_RW(2, filtered)
#ifdef PRECISE
#include "f64.glsl"
SSBO_IN(3, double, Kd)
SSBO_OUT(4, dvec4, Id)

#ifdef KPN_CTX
DEFINE_GROUP_WEIGHTS64(group_weights64, N_TAPS, 16)  // group g (0 luma, 1 chroma) of pixel i

dvec3 apply_precise(int i, ivec2 p, int mode) {
  double wy[N_TAPS], wc[N_TAPS];
  group_weights64(i, 0, wy);
  group_weights64(i, 1, wc);
  dmat3 P = dmat3(opp);
  dvec3 Io = dvec3(0.0lf);
  for (int k = 0; k < N_TAPS; k++) {
    dvec3 Do = P * dvec3(detail[texel(0, p + taps[k])].rgb);
    Io += dvec3(wy[k] * Do.x, wc[k] * Do.yz);
  }
  return Io * P;
}
#else
dvec3 apply_precise(int i, ivec2 p, int mode) {
  double wk[N_TAPS];
  double S = 0.0lf;
  double mx = -1e300lf;
  for (int k = 0; k < N_TAPS; k++) mx = max(mx, Kd[i * N_OUT + k]);
  for (int k = 0; k < N_TAPS; k++) {
    if (mode == 0)
      wk[k] = tap_ok(K[i * N_OUT + k]) ? Kd[i * N_OUT + k] : double(TAP_FALLBACK);
    else
      wk[k] = mlp_exp64(Kd[i * N_OUT + k] - mx);
    S += wk[k];
  }
  dvec3 num = dvec3(0.0lf);
  for (int k = 0; k < N_TAPS; k++) num += wk[k] * dvec3(detail[texel(0, p + taps[k])].rgb);
  if (mode == 0) return num / max(S, double(S_FLOOR));
  dvec3 I = num / S;
  if (mode == 2) I /= 1.0lf + mlp_exp64(-Kd[i * N_OUT + N_TAPS]);  // the band gain
  return I;
}
#endif  // KPN_CTX
#endif

void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (!inside(2, p)) return;
  int i = p.x + p.y * node.roi[2].x;
#ifdef PRECISE
  dvec3 Ip = apply_precise(i, p, push.mode);
  filtered[i] = vec4(vec3(Ip), 1.0);
  Id[i] = dvec4(Ip, 1.0lf);
#else
  float kv[N_OUT];
  LOAD_K(K4, i, kv)
#ifdef KPN_CTX
  float sy[N_TAPS], sc[N_TAPS];
  group_softmax(kv, 0, sy);
  group_softmax(kv, 1, sc);
  vec3 Fo = vec3(0.0);
  for (int k = 0; k < N_TAPS; k++) {
    vec3 Do = opp * detail[texel(0, p + taps[k])].rgb;
    Fo += vec3(sy[k] * Do.x, sc[k] * Do.yz);
  }
  vec3 Io = Fo * vec3(sigmoid(kv[N_TAPS]), vec2(sigmoid(kv[16 + N_TAPS])));
  filtered[i] = vec4(Io * opp, 1.0);
#else
  float wk[N_TAPS];
  float S = 0.0;
  if (push.mode >= 1) {
    SOFTMAX_EXP(kv, 0, wk, S)
    float gain = push.mode == 2 ? sigmoid(kv[N_TAPS]) : 1.0;
    for (int k = 0; k < N_TAPS; k++) wk[k] *= gain / S;
    S = 1.0;
  } else {
    for (int k = 0; k < N_TAPS; k++) {
      float v = kv[k];
      wk[k] = tap_ok(v) ? v : TAP_FALLBACK;
      S += wk[k];
    }
  }
  vec3 s = vec3(0.0);
  for (int k = 0; k < N_TAPS; k++) s += wk[k] * detail[texel(0, p + taps[k])].rgb;
  filtered[i] = vec4(s / max(S, S_FLOOR), 1.0);
#endif  // KPN_CTX
#endif
}
