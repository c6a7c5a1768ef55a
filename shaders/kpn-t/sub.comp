#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
// M_{i+1}(q) = sum_{dx,dy=-2..2} b[dx] b[dy] M_i(2q + d), b = (1,4,6,4,1)/16, mirrored borders
IMG_IN(0, fine)
IMG_OUT(1, coarse)

const float b[5] = float[](1.0, 4.0, 6.0, 4.0, 1.0);

void main() {
  ivec2 q = ivec2(gl_GlobalInvocationID.xy);
  if (!inside(1, q)) return;
  vec4 s = vec4(0.0);
  for (int dy = -2; dy <= 2; dy++)
    for (int dx = -2; dx <= 2; dx++)
      s += b[dx + 2] * b[dy + 2] * fine[texel(0, 2 * q + ivec2(dx, dy))];
  coarse[q.x + q.y * node.roi[1].x] = s / 256.0;
}
