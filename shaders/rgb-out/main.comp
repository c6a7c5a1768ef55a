#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
#include "params.gen"

// rgba -> out.rgb = M in.rgb (params.matrix, row by row), rows one after another, each as
// three floats a pixel (params.planar 0: an (h, w, 3) float32 array as it lies in memory) or
// as its r, g and b planes (1: (h, 3, w), each channel of a row contiguous, as an OpenEXR
// scanline holds them). `bad` counts the pixels with a non-finite result, so that the host
// can refuse them (it is zeroed before every frame).
IMG_IN(0, img_in)
SSBO_OUT(1, float, img_out)
layout(std430, set = 1, binding = 2) buffer bad_buf { uint bad[]; };

void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (!inside(0, p)) return;
  vec3 c = img_in[texel(0, p)].rgb;
  float m[9] = params.matrix;
  vec3 o = vec3(dot(vec3(m[0], m[1], m[2]), c), dot(vec3(m[3], m[4], m[5]), c),
                dot(vec3(m[6], m[7], m[8]), c));
  if (any(isnan(o)) || any(isinf(o))) atomicAdd(bad[0], 1u);
  int wd = node.roi[0].x;
  int i = 3 * p.y * wd + (params.planar != 0 ? p.x : 3 * p.x);
  int step = params.planar != 0 ? wd : 1;  // from one channel of the pixel to the next
  img_out[i] = o.r;
  img_out[i + step] = o.g;
  img_out[i + 2 * step] = o.b;
}
