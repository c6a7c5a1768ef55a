#version 460
#extension GL_GOOGLE_include_directive : enable
#ifndef KPN_NL
#define KPN_NL 1  // arch 2's kernel (kpn.glsl's K layout)
#endif
#include "vkgraph.glsl"
#include "kpn.glsl"
// dE/dK of arch 2's filter (apply_nl.comp; modules/kpn-t/reference.py: apply_ctx_backward
// given block_match's indices)
// from dE/dI: dIo = P dI, Do = P D at the 27 taps, per group g (luma: K_0..27 and Do.x;
// chroma: K_28..55 and Do.yz) with F = sum_k s_k Do(p + t_k):
//   dK_k = beta s_k <dIo, Do(p + t_k) - F>,   dK_27 = beta (1 - beta) <dIo, F>
// over the group's components; K's unused values (56..63) get 0. No gradient reaches the
// matches.
IMG_IN(0, detail)
SSBO_IN(1, float, K)
SSBO_IN(2, uint, nltap)
IMG_IN(3, dI)
SSBO_OUT(4, float, dK)
#include "nl.glsl"

void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (!inside(3, p)) return;
  int i = p.x + p.y * node.roi[3].x;
  for (int k = 2 * NK; k < N_OUT; k++) dK[i * N_OUT + k] = 0.0;
  vec3 g = opp * dI[i].rgb;
  vec3 Do[NT];
  for (int k = 0; k < NT; k++) Do[k] = opp * detail[texel(0, p + tap_offset(i, k))].rgb;
  for (int grp = 0; grp < 2; grp++) {
    float s[NT], beta;
    group_softmax_nl(i, grp, s, beta);
    vec3 mask = grp == 0 ? vec3(1.0, 0.0, 0.0) : vec3(0.0, 1.0, 1.0);
    vec3 gg = g * mask;
    vec3 F = vec3(0.0);
    for (int k = 0; k < NT; k++) F += s[k] * Do[k];
    int o = i * N_OUT + grp * NK;
    for (int k = 0; k < NT; k++) dK[o + k] = beta * s[k] * dot(gg, Do[k] - F);
    dK[o + NT] = beta * (1.0 - beta) * dot(gg, F);
  }
}
