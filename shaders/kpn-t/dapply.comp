#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
#include "kpn.glsl"
// dE/dK from dE/dI (= dE/dO_i), the exact adjoint of apply:
//   plain, S > 0.001:  dK_k = <dI, D(p+T_k) - I> / S;   S <= 0.001: <dI, D(p+T_k)> / 0.001;
//                      replaced taps (non-finite, |K| >= 10): 0
//   softmax:           dK_k = s_k <dI, D(p+T_k) - I>
//   blend (I = beta F, F = sum s_k D(p+T_k), beta = sigmoid(K_15)):
//                      dK_k = beta s_k <dI, D(p+T_k) - F>,  dK_15 = beta (1 - beta) <dI, F>
//   K_15 is unused (0) but in blend mode.
//   KPN_CTX (arch 1, blend only; apply.comp): dIo = P dI, Do = P D, per group g (luma: taps
//   0..14, gain 15, Do.x; chroma: 16..30, 31, Do.yz) the blend rule above with dIo's and Do's
//   components of the group.
// K and dK are read and written as N_OUT / 4 vec4 a pixel (16-byte accesses: one float at a time,
// a warp's accesses strided by 64 bytes, kept the kernel far from the memory bandwidth).
layout(push_constant) uniform Push { int mode; } push;
IMG_IN(0, detail)
SSBO_IN(1, vec4, K4)
IMG_IN(2, filtered)
IMG_IN(3, dI_img)
SSBO_OUT(4, vec4, dK4)

#ifdef KPN_CTX
// group g's dK (N_TAPS taps and the gain at 16 g ..) from its softmax weights s (summing to
// 1), gain beta, the group's components of dIo and of Do at the taps (Dg[k])
void group_grad(inout float dk[N_OUT], int g, float s[N_TAPS], float beta, vec2 dIo,
                vec2 Dg[N_TAPS]) {
  vec2 F = vec2(0.0);
  for (int k = 0; k < N_TAPS; k++) F += s[k] * Dg[k];
  for (int k = 0; k < N_TAPS; k++) dk[16 * g + k] = beta * s[k] * dot(dIo, Dg[k] - F);
  dk[16 * g + N_TAPS] = beta * (1.0 - beta) * dot(dIo, F);
}
#endif

void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (!inside(0, p)) return;
  int i = p.x + p.y * node.roi[0].x;
  float kv[N_OUT], dk[N_OUT];
  LOAD_K(K4, i, kv)
  vec3 dI = dI_img[i].rgb;
#ifdef KPN_CTX
  vec3 dIo = opp * dI;
  vec2 Dy[N_TAPS], Dc[N_TAPS];
  for (int k = 0; k < N_TAPS; k++) {
    vec3 Do = opp * detail[texel(0, p + taps[k])].rgb;
    Dy[k] = vec2(Do.x, 0.0);
    Dc[k] = Do.yz;
  }
  float s[N_TAPS];
  group_softmax(kv, 0, s);
  group_grad(dk, 0, s, sigmoid(kv[N_TAPS]), vec2(dIo.x, 0.0), Dy);
  group_softmax(kv, 1, s);
  group_grad(dk, 1, s, sigmoid(kv[16 + N_TAPS]), dIo.yz, Dc);
#else
  vec3 I = filtered[i].rgb;
  float wk[N_TAPS];
  float S = 0.0;
  dk[15] = 0.0;
  if (push.mode >= 1) {
    SOFTMAX_EXP(kv, 0, wk, S)
    float beta = 1.0;
    if (push.mode == 2) {  // F = sum s_k D_k, recomputed (I / beta is unstable for small beta)
      beta = sigmoid(kv[N_TAPS]);
      I = vec3(0.0);
      for (int k = 0; k < N_TAPS; k++) I += wk[k] / S * detail[texel(0, p + taps[k])].rgb;
      dk[15] = beta * (1.0 - beta) * dot(dI, I);
    }
    for (int k = 0; k < N_TAPS; k++)
      dk[k] = beta * wk[k] / S * dot(dI, detail[texel(0, p + taps[k])].rgb - I);
  } else {
    for (int k = 0; k < N_TAPS; k++) {
      float v = kv[k];
      wk[k] = tap_ok(v) ? v : TAP_FALLBACK;
      S += wk[k];
    }
    for (int k = 0; k < N_TAPS; k++) {
      vec3 d = detail[texel(0, p + taps[k])].rgb;
      float g = S > S_FLOOR ? dot(dI, d - I) / S : dot(dI, d) / S_FLOOR;
      dk[k] = tap_ok(kv[k]) ? g : 0.0;
    }
  }
#endif  // KPN_CTX
  for (int q = 0; q < N_OUT / 4; q++)
    dK4[N_OUT / 4 * i + q] = vec4(dk[4 * q], dk[4 * q + 1], dk[4 * q + 2], dk[4 * q + 3]);
}
