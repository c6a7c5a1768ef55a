#version 460
#extension GL_GOOGLE_include_directive : enable
#ifdef PRECISE
#extension GL_ARB_gpu_shader_fp64 : require
#endif
#include "vkgraph.glsl"
#include "kpn.glsl"
// O_i = U(O_{i+1}) + I_i  (O_{i+1} is M_L at the coarsest level), alpha 1.
// PRECISE (gradient check): also in float64 from Id and the coarser Od (Cd) into Od;
// COARSEST: the coarse image is M_L, which does not depend on the weights (fp32 is exact).
IMG_IN(0, filtered)
IMG_IN(1, coarse)
IMG_OUT(2, outp)
DEFINE_UPSAMPLE(upsample, coarse, 1)
#ifdef PRECISE
SSBO_IN(3, dvec4, Id)
SSBO_OUT(4, dvec4, Od)
#ifndef COARSEST
SSBO_IN(5, dvec4, Cd)
#endif

dvec3 upsample_d(ivec2 p) {
  ivec2 n = node.roi[1].xy;
  ivec2 k = min(p >> 1, n - 1);
  ivec2 k1 = min(k + (p & 1), n - 1);
#ifdef COARSEST
#define CD(i) dvec3(coarse[i].rgb)
#else
#define CD(i) Cd[i].rgb
#endif
  return 0.25lf * (CD(k.x + k.y * n.x) + CD(k1.x + k.y * n.x) + CD(k.x + k1.y * n.x) +
                   CD(k1.x + k1.y * n.x));
}
#endif

void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (!inside(2, p)) return;
  int i = p.x + p.y * node.roi[2].x;
#ifdef PRECISE
  dvec3 o = upsample_d(p) + Id[i].rgb;
  Od[i] = dvec4(o, 1.0lf);
  outp[i] = vec4(vec3(o), 1.0);
#else
  outp[i] = vec4(upsample(p).rgb + filtered[i].rgb, 1.0);
#endif
}
