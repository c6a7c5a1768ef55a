#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
#include "kpn.glsl"
// The predicted kernels of level 0, drawn over the dim detail image (input size):
//   background  clamp(0.05 + 0.5 D_0(p).rgb, 0, 1)
//   in every 8x8 block with its centre c = 8 (p div 8) + 3 inside the image, the pixel
//   c + T_k shows tap k's normalised weight n_k (what apply multiplies D(c + T_k) by):
//     plain (mode 0)    n_k = w_k / max(S, 0.001), w_k = K_k (0.001 if not tap_ok), S = sum w
//     softmax (mode 1)  n_k = softmax(K_0..14)_k
//   as mix(background, tint, min(4 |n_k|, 1)), tint yellow (1, 1, 0) for n_k >= 0 and
//   blue (0.2, 0.4, 1) for n_k < 0 (a uniform kernel, n = 1/15, shows at 27%).
layout(push_constant) uniform Push { int mode; } push;
IMG_IN(0, detail)
SSBO_IN(1, float, K)
IMG_OUT(2, dbg)

void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (!inside(2, p)) return;
  ivec2 size = node.roi[2].xy;
  vec3 col = clamp(vec3(0.05) + 0.5 * detail[p.x + p.y * size.x].rgb, 0.0, 1.0);
  ivec2 c = (p / 8) * 8 + 3;
  ivec2 d = p - c;
  int tap = -1;
  for (int k = 0; k < N_TAPS; k++)
    if (taps[k] == d) tap = k;
  if (tap >= 0 && all(lessThan(c, size))) {
    int i = c.x + c.y * size.x;
    float wk[N_TAPS];
    float S = 0.0;
    if (push.mode >= 1) {  // blend (2): the taps without the band's gain
      SOFTMAX_EXP(K, i, wk, S)
    } else {
      for (int k = 0; k < N_TAPS; k++) {
        float v = K[i * N_OUT + k];
        wk[k] = tap_ok(v) ? v : TAP_FALLBACK;
        S += wk[k];
      }
      S = max(S, S_FLOOR);
    }
    float n = wk[tap] / S;
    vec3 tint = n >= 0.0 ? vec3(1.0, 1.0, 0.0) : vec3(0.2, 0.4, 1.0);
    col = mix(col, tint, min(4.0 * abs(n), 1.0));
  }
  dbg[p.x + p.y * size.x] = vec4(col, 1.0);
}
