#version 460
#extension GL_GOOGLE_include_directive : enable
#ifdef PRECISE
#extension GL_ARB_gpu_shader_fp64 : require
#endif
#ifndef KPN_NL
#define KPN_NL 1  // arch 2's kernel (kpn.glsl's K layout)
#endif
#include "vkgraph.glsl"
#include "kpn.glsl"
// Arch 2's filter (modules/kpn-t/reference.py: apply_ctx given block_match's indices, which
// defines it): arch 1's filter in the opponent space of P over 27 taps, the star's 15 and
// then the pixel's NL_TAPS matched offsets (match.comp's indices), with 28 values of K a group:
//   Io.x  = sigmoid(K_27) sum_k softmax(K_0..26)_k Do.x(p + t_k)      (luma)
//   Io.yz = sigmoid(K_55) sum_k softmax(K_28..54)_k Do.yz(p + t_k)    (chroma)
//   I = P^T Io,  Do = P D,  mirrored borders.
// PRECISE (gradient check): the weights, sums and I in float64 from fwd's Kd (Id out).
IMG_IN(0, detail)
SSBO_IN(1, float, K)
SSBO_IN(2, uint, nltap)
IMG_OUT(3, filtered)
#include "nl.glsl"
#ifdef PRECISE
#include "f64.glsl"
SSBO_IN(4, double, Kd)
SSBO_OUT(5, dvec4, Id)
DEFINE_GROUP_WEIGHTS64(group_weights64, NT, NK)  // group g's softmax weights times its gain
#endif

void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (!inside(3, p)) return;
  int i = p.x + p.y * node.roi[3].x;
#ifdef PRECISE
  double wy[NT], wc[NT];
  group_weights64(i, 0, wy);
  group_weights64(i, 1, wc);
  dmat3 P = dmat3(opp);
  dvec3 Io = dvec3(0.0lf);
  for (int k = 0; k < NT; k++) {
    dvec3 Do = P * dvec3(detail[texel(0, p + tap_offset(i, k))].rgb);
    Io += dvec3(wy[k] * Do.x, wc[k] * Do.yz);
  }
  dvec3 I = Io * P;
  filtered[i] = vec4(vec3(I), 1.0);
  Id[i] = dvec4(I, 1.0lf);
#else
  float sy[NT], sc[NT], by, bc;
  group_softmax_nl(i, 0, sy, by);
  group_softmax_nl(i, 1, sc, bc);
  vec3 Fo = vec3(0.0);
  for (int k = 0; k < NT; k++) {
    vec3 Do = opp * detail[texel(0, p + tap_offset(i, k))].rgb;
    Fo += vec3(sy[k] * Do.x, sc[k] * Do.yz);
  }
  filtered[i] = vec4((Fo * vec3(by, bc, bc)) * opp, 1.0);
#endif
}
