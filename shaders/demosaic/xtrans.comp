#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
#include "cfa.glsl"

// X-Trans (any 6 x 6 pattern): a photosite keeps its own colour; each other colour is the
// mean of that colour's balanced photosites in the 5 x 5 window, weighted by the tent
// (3 - |dx|) (3 - |dy|).
void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (!inside(1, p)) return;
  vec3 num = vec3(0.0), den = vec3(0.0);
  for (int dy = -2; dy <= 2; dy++)
    for (int dx = -2; dx <= 2; dx++) {
      ivec2 s = reflect2(p + ivec2(dx, dy));
      int c = cfa_colour(s);
      float w = float((3 - abs(dx)) * (3 - abs(dy)));
      num[c] += w * balanced(s);
      den[c] += w;
    }
  vec3 rgb = vec3(den.x > 0.0 ? num.x / den.x : 0.0, den.y > 0.0 ? num.y / den.y : 0.0,
                  den.z > 0.0 ? num.z / den.z : 0.0);
  rgb[cfa_colour(p)] = balanced(p);
  store(p, rgb);
}
