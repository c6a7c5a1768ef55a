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
layout(push_constant) uniform Push { int mode; } push;
IMG_IN(0, detail)
SSBO_IN(1, float, K)
IMG_IN(2, filtered)
IMG_IN(3, dI_img)
SSBO_OUT(4, float, dK)

void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (!inside(0, p)) return;
  int i = p.x + p.y * node.roi[0].x;
  vec3 dI = dI_img[i].rgb;
  vec3 I = filtered[i].rgb;
  float wk[N_TAPS];
  float S = 0.0;
  float dK15 = 0.0;
  if (push.mode >= 1) {
    SOFTMAX_EXP(K, i, wk, S)
    float beta = 1.0;
    if (push.mode == 2) {  // F = sum s_k D_k, recomputed (I / beta is unstable for small beta)
      beta = sigmoid(K[i * N_OUT + N_TAPS]);
      I = vec3(0.0);
      for (int k = 0; k < N_TAPS; k++) I += wk[k] / S * detail[texel(0, p + taps[k])].rgb;
      dK15 = beta * (1.0 - beta) * dot(dI, I);
    }
    for (int k = 0; k < N_TAPS; k++)
      dK[i * N_OUT + k] = beta * wk[k] / S * dot(dI, detail[texel(0, p + taps[k])].rgb - I);
  } else {
    for (int k = 0; k < N_TAPS; k++) {
      float v = K[i * N_OUT + k];
      wk[k] = tap_ok(v) ? v : TAP_FALLBACK;
      S += wk[k];
    }
    for (int k = 0; k < N_TAPS; k++) {
      vec3 d = detail[texel(0, p + taps[k])].rgb;
      float g = S > S_FLOOR ? dot(dI, d - I) / S : dot(dI, d) / S_FLOOR;
      dK[i * N_OUT + k] = tap_ok(K[i * N_OUT + k]) ? g : 0.0;
    }
  }
  dK[i * N_OUT + 15] = dK15;
}
