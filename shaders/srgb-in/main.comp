#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
#include "srgb8.glsl"

// packed 8-bit sRGB (one uint a pixel: r in the low byte, then g, b, a) -> linear rgba:
// each colour code's linear value from the host's own table (SRGB8_LINEAR: the same float32
// numbers as decode_unorm), alpha scaled linearly (SRGB8_UNORM: a / 255 as the host rounds it)
SSBO_IN(0, uint, img_in)
IMG_OUT(1, img_out)

float to_linear(uint c) { return uintBitsToFloat(SRGB8_LINEAR[c]); }

void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (!inside(1, p)) return;
  int i = p.x + p.y * node.roi[1].x;
  uint w = img_in[i];
  uvec4 c = uvec4(w, w >> 8, w >> 16, w >> 24) & 255u;
  img_out[i] = vec4(to_linear(c.r), to_linear(c.g), to_linear(c.b),
                    uintBitsToFloat(SRGB8_UNORM[c.a]));
}
