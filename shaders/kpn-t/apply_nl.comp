#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
#include "kpn.glsl"
// Arch 2's filter (modules/kpn-t/reference.py: apply_ctx given block_match's indices, which
// defines it): arch 1's filter in the opponent space of P over 27 taps, the star's 15 and
// then the pixel's NL_TAPS matched offsets (match.comp's indices), with 28 values of K a group:
//   Io.x  = sigmoid(K_27) sum_k softmax(K_0..26)_k Do.x(p + t_k)      (luma)
//   Io.yz = sigmoid(K_55) sum_k softmax(K_28..54)_k Do.yz(p + t_k)    (chroma)
//   I = P^T Io,  Do = P D,  mirrored borders.
IMG_IN(0, detail)
SSBO_IN(1, float, K)
SSBO_IN(2, uint, nltap)
IMG_OUT(3, filtered)
#include "nl.glsl"

void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (!inside(3, p)) return;
  int i = p.x + p.y * node.roi[3].x;
  float sy[NT], sc[NT], by, bc;
  group_softmax_nl(i, 0, sy, by);
  group_softmax_nl(i, 1, sc, bc);
  vec3 Fo = vec3(0.0);
  for (int k = 0; k < NT; k++) {
    vec3 Do = opp * detail[texel(0, p + tap_offset(i, k))].rgb;
    Fo += vec3(sy[k] * Do.x, sc[k] * Do.yz);
  }
  filtered[i] = vec4((Fo * vec3(by, bc, bc)) * opp, 1.0);
}
