#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
#include "kpn.glsl"
// Arch 2's filter (modules/kpn-t/reference.py: apply_nl, which defines it): arch 1's filter
// in the opponent space of P over 27 taps, the star's 15 and then the pixel's NL_TAPS matched
// offsets (match.comp's indices, 4 to a word), with 28 values of K a group:
//   Io.x  = sigmoid(K_27) sum_k softmax(K_0..26)_k Do.x(p + t_k)      (luma)
//   Io.yz = sigmoid(K_55) sum_k softmax(K_28..54)_k Do.yz(p + t_k)    (chroma)
//   I = P^T Io,  Do = P D,  mirrored borders.
#define NT (N_TAPS + NL_TAPS)
#define NK (NT + 1)
IMG_IN(0, detail)
SSBO_IN(1, float, K)      // 2 NK values a pixel
SSBO_IN(2, uint, nltap)   // NL_TAPS / 4 words a pixel
IMG_OUT(3, filtered)

// the softmax weights of group g (0 luma, 1 chroma) of pixel i, times the group's gain
void group_weights(int i, int g, out float w[NT]) {
  int o = (2 * i + g) * NK;
  float mx = -1e30, S = 0.0;
  for (int k = 0; k < NT; k++) mx = max(mx, K[o + k]);
  for (int k = 0; k < NT; k++) {
    w[k] = exp(K[o + k] - mx);
    S += w[k];
  }
  float gain = sigmoid(K[o + NT]) / S;
  for (int k = 0; k < NT; k++) w[k] *= gain;
}

// tap k of pixel i: the star's, then its matched offsets
ivec2 tap_offset(int i, int k) {
  if (k < N_TAPS) return taps[k];
  int m = k - N_TAPS;
  return nl_offset((nltap[NL_TAPS / 4 * i + m / 4] >> (8 * (m % 4))) & 255u);
}

void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (!inside(3, p)) return;
  int i = p.x + p.y * node.roi[3].x;
  float wy[NT], wc[NT];
  group_weights(i, 0, wy);
  group_weights(i, 1, wc);
  vec3 Io = vec3(0.0);
  for (int k = 0; k < NT; k++) {
    vec3 Do = opp * detail[texel(0, p + tap_offset(i, k))].rgb;
    Io += vec3(wy[k] * Do.x, wc[k] * Do.yz);
  }
  filtered[i] = vec4(Io * opp, 1.0);
}
