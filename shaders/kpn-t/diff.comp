#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
#include "kpn.glsl"
// D_i = M_i - U(M_{i+1}); alpha = the luminance of |D_i|, the MLP's feature (kpn.glsl)
IMG_IN(0, fine)
IMG_IN(1, coarse)
IMG_OUT(2, detail)
DEFINE_UPSAMPLE(upsample, coarse, 1)

void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (!inside(2, p)) return;
  int i = p.x + p.y * node.roi[2].x;
  vec3 d = fine[i].rgb - upsample(p).rgb;
  detail[i] = vec4(d, dot(abs(d), luma2020));
}
