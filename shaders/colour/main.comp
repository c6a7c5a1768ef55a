#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"

IMG_IN(0, img_in)
IMG_OUT(1, img_out)

layout(push_constant) uniform Push { float m[9]; } pc;  // row by row

// out.rgb = M in.rgb, alpha kept
void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (!inside(1, p)) return;
  vec4 c = img_in[p.x + p.y * node.roi[0].x];
  img_out[p.x + p.y * node.roi[1].x] = vec4(dot(vec3(pc.m[0], pc.m[1], pc.m[2]), c.rgb),
                                            dot(vec3(pc.m[3], pc.m[4], pc.m[5]), c.rgb),
                                            dot(vec3(pc.m[6], pc.m[7], pc.m[8]), c.rgb), c.a);
}
