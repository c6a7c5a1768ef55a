#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
// Squared errors against a reference, for kpn's PSNR summary: each 8x8 workgroup writes
// (sum over its pixels and rgb of (input - ref)^2, same for output) to part[2 g], part[2 g + 1].
IMG_IN(0, inp)
IMG_IN(1, outp)
IMG_IN(2, ref)
SSBO_OUT(3, vec2, part)

shared vec2 acc[64];

void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  vec2 e = vec2(0.0);
  if (inside(0, p)) {
    int i = p.x + p.y * node.roi[0].x;
    vec3 r = ref[texel(2, p)].rgb;
    vec3 a = inp[i].rgb - r, b = outp[i].rgb - r;
    e = vec2(dot(a, a), dot(b, b));
  }
  uint t = gl_LocalInvocationIndex;
  acc[t] = e;
  barrier();
  for (uint s = 32u; s > 0u; s >>= 1) {
    if (t < s) acc[t] += acc[t + s];
    barrier();
  }
  if (t == 0u) part[gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x] = acc[0];
}
