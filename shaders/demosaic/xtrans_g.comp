#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
#include "cfa.glsl"

SSBO_OUT(1, float, g)

// X-Trans, first pass: green everywhere. A green photosite keeps its value; elsewhere the
// mean of the balanced green photosites in the 5 x 5 window, weighted by the tent
// (3 - |dx|) (3 - |dy|) (every 5 x 5 window of the pattern holds all three colours).
void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (!inside(1, p)) return;
  float v;
  if (cfa_colour(p) == 1) {
    v = balanced(p);
  } else {
    float num = 0.0, den = 0.0;
    for (int dy = -2; dy <= 2; dy++)
      for (int dx = -2; dx <= 2; dx++) {
        ivec2 s = reflect2(p + ivec2(dx, dy), node.roi[0].xy);
        if (cfa_colour(s) != 1) continue;
        float w = float((3 - abs(dx)) * (3 - abs(dy)));
        num += w * balanced(s);
        den += w;
      }
    v = den > 0.0 ? num / den : 0.0;
  }
  g[p.x + p.y * node.roi[1].x] = v;
}
