#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
#include "cfa.glsl"

SSBO_IN(1, float, g)  // xtrans_g's green plane
IMG_OUT(2, img_out)

// X-Trans, second pass: red and blue as colour differences. A photosite keeps its own
// colour; a missing colour c is g + the tent-weighted mean of (z - g) over the colour-c
// photosites of the 5 x 5 window.
void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (!inside(2, p)) return;
  int wd = node.roi[0].x;
  vec3 num = vec3(0.0), den = vec3(0.0);
  for (int dy = -2; dy <= 2; dy++)
    for (int dx = -2; dx <= 2; dx++) {
      ivec2 s = reflect2(p + ivec2(dx, dy), node.roi[0].xy);
      int c = cfa_colour(s);
      float w = float((3 - abs(dx)) * (3 - abs(dy)));
      num[c] += w * (balanced(s) - g[s.x + s.y * wd]);
      den[c] += w;
    }
  float gp = g[p.x + p.y * wd];
  vec3 rgb = vec3(gp + (den.x > 0.0 ? num.x / den.x : 0.0), gp,
                  gp + (den.z > 0.0 ? num.z / den.z : 0.0));
  int own = cfa_colour(p);
  if (own != 1) rgb[own] = balanced(p);
  img_out[p.x + p.y * node.roi[2].x] = vec4(to_output(rgb), 1.0);
}
