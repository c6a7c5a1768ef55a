#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
#include "kpn.glsl"
// O_i = U(O_{i+1}) + I_i  (O_{i+1} is M_L at the coarsest level), alpha 1
IMG_IN(0, filtered)
IMG_IN(1, coarse)
IMG_OUT(2, outp)
DEFINE_UPSAMPLE(upsample, coarse, 1)

void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (!inside(2, p)) return;
  int i = p.x + p.y * node.roi[2].x;
  outp[i] = vec4(upsample(p).rgb + filtered[i].rgb, 1.0);
}
