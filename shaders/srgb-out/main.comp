#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
#include "srgb8.glsl"

// linear rgba -> packed 8-bit sRGB (one uint a pixel: r in the low byte, then g, b, and
// alpha 255), each colour clamped to [0, 1] (NaN becomes 0) and given the code the host's
// exact encoder gives it: the number of SRGB8_EDGE values at or below it (a binary search
// over the 255 edges; no float curve on the device, so the same codes as srgb_samples).
// `bad` counts the pixels with a non-finite colour, so that the host can refuse them (it is
// zeroed before every frame).
IMG_IN(0, img_in)
SSBO_OUT(1, uint, img_out)
layout(std430, set = 1, binding = 2) buffer bad_buf { uint bad[]; };

uint code(float v) {
  float x = isnan(v) ? 0.0 : clamp(v, 0.0, 1.0);
  uint c = 0u;  // edges at or below x so far
  for (uint step = 128u; step > 0u; step >>= 1)
    if (c + step <= 255u && uintBitsToFloat(SRGB8_EDGE[c + step - 1u]) <= x) c += step;
  return c;
}

void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (!inside(0, p)) return;
  int i = p.x + p.y * node.roi[0].x;
  vec3 c = img_in[texel(0, p)].rgb;
  if (any(isnan(c)) || any(isinf(c))) atomicAdd(bad[0], 1u);
  img_out[i] = code(c.r) | code(c.g) << 8 | code(c.b) << 16 | 255u << 24;
}
