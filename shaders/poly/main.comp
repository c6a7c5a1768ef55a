#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
// The Slang autodiff tutorial's targets at texel centres (x, y) = ((i + 1/2)/W, (j + 1/2)/H):
//   r = (x + y) / (1 + y^2),  g = 2x + y,  b = x^2/2 + 1.2 y,  a = x + y^2/2
IMG_OUT(0, outp)

void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  ivec2 size = node.roi[0].xy;
  if (any(greaterThanEqual(p, size))) return;
  vec2 q = (vec2(p) + 0.5) / vec2(size);
  float x = q.x, y = q.y;
  outp[p.x + p.y * size.x] = vec4((x + y) / (1.0 + y * y), 2.0 * x + y,
                                  0.5 * x * x + 1.2 * y, x + 0.5 * y * y);
}
