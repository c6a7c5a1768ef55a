#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
#include "kpn.glsl"
// I(p) = sum_k w_k D(p + T_k) / max(S, 0.001), S = sum_k w_k   (plain, mode 0)
// I(p) = sum_k softmax(K)_k D(p + T_k)                          (softmax, mode 1)
layout(push_constant) uniform Push { int mode; } push;
IMG_IN(0, detail)
SSBO_IN(1, float, K)
IMG_OUT(2, filtered)

void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (!inside(2, p)) return;
  int i = p.x + p.y * node.roi[2].x;
  float wk[N_TAPS];
  float S = 0.0;
  if (push.mode == 1) {
    float mx = -1e30;
    for (int k = 0; k < N_TAPS; k++) mx = max(mx, K[i * N_OUT + k]);
    for (int k = 0; k < N_TAPS; k++) { wk[k] = exp(K[i * N_OUT + k] - mx); S += wk[k]; }
    for (int k = 0; k < N_TAPS; k++) wk[k] /= S;
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
}
