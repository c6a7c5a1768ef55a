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
// K and dK are read and written as 4 vec4 a pixel (16-byte accesses: one float at a time,
// a warp's accesses strided by 64 bytes, kept the kernel far from the memory bandwidth).
layout(push_constant) uniform Push { int mode; } push;
IMG_IN(0, detail)
SSBO_IN(1, vec4, K4)
IMG_IN(2, filtered)
IMG_IN(3, dI_img)
SSBO_OUT(4, vec4, dK4)
#if N_OUT != 16
#error "K and dK are 4 vec4 a pixel"
#endif

void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (!inside(0, p)) return;
  int i = p.x + p.y * node.roi[0].x;
  float kv[N_OUT], dk[N_OUT];
  LOAD_K16(K4, i, kv)
  vec3 dI = dI_img[i].rgb;
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
  for (int q = 0; q < 4; q++)
    dK4[4 * i + q] = vec4(dk[4 * q], dk[4 * q + 1], dk[4 * q + 2], dk[4 * q + 3]);
}
