#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"

#include "params.gen"  // the params block, generated from modules/exposure/params
IMG_IN(0, img_in)
IMG_OUT(1, img_out)

// out.rgb = (in.rgb - black) * 2^exposure, alpha kept
void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (!inside(1, p)) return;
  vec4 c = img_in[texel(0, p)];
  img_out[p.x + p.y * node.roi[1].x] = vec4((c.rgb - params.black) * exp2(params.exposure), c.a);
}
