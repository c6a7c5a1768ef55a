#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
#include "cfa.glsl"
#include "mhc.glsl"

IMG_OUT(1, img_out)

// Malvar-He-Cutler gradient-corrected bilinear demosaicing of a Bayer mosaic (any phase):
// a photosite keeps its own colour; each missing colour is a 5 x 5 filter (x 8) of the
// balanced mosaic (mhc.glsl; modules/demosaic/README.md has the four filters).
void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (!inside(1, p)) return;
  float v[25];  // v[(dy + 2) * 5 + dx + 2]
  for (int dy = -2; dy <= 2; dy++)
    for (int dx = -2; dx <= 2; dx++)
      v[(dy + 2) * 5 + dx + 2] = balanced(p + ivec2(dx, dy));
  vec3 rgb = mhc(v, cfa_colour(p), cfa_colour(p + ivec2(1, 0)));
  img_out[p.x + p.y * node.roi[1].x] = vec4(to_output(rgb), 1.0);
}
