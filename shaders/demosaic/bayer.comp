#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
#include "cfa.glsl"

IMG_OUT(1, img_out)

// Malvar-He-Cutler gradient-corrected bilinear demosaicing of a Bayer mosaic (any phase):
// a photosite keeps its own colour; each missing colour is a 5 x 5 filter (x 8) of the
// balanced mosaic (modules/demosaic/README.md has the four filters).
void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (!inside(1, p)) return;
  float v[25];  // v[(dy + 2) * 5 + dx + 2]
  for (int dy = -2; dy <= 2; dy++)
    for (int dx = -2; dx <= 2; dx++)
      v[(dy + 2) * 5 + dx + 2] = balanced(p + ivec2(dx, dy));
  float c0 = v[12];
  float cross1 = v[7] + v[11] + v[13] + v[17];  // the 4 neighbours
  float cross2 = v[2] + v[10] + v[14] + v[22];  // the 4 at distance 2
  float diag = v[6] + v[8] + v[16] + v[18];
  vec3 rgb;
  int c = cfa_colour(p);
  if (c == 1) {
    // the colour left and right of this green one, and the colour above and below it
    int beside = cfa_colour(p + ivec2(1, 0));
    float row = (5.0 * c0 + 4.0 * (v[11] + v[13]) - diag - (v[10] + v[14])
                 + 0.5 * (v[2] + v[22])) / 8.0;
    float col = (5.0 * c0 + 4.0 * (v[7] + v[17]) - diag - (v[2] + v[22])
                 + 0.5 * (v[10] + v[14])) / 8.0;
    rgb[1] = c0;
    rgb[beside] = row;
    rgb[2 - beside] = col;
  } else {
    rgb[c] = c0;
    rgb[1] = (4.0 * c0 + 2.0 * cross1 - cross2) / 8.0;
    rgb[2 - c] = (6.0 * c0 + 2.0 * diag - 1.5 * cross2) / 8.0;
  }
  img_out[p.x + p.y * node.roi[1].x] = vec4(to_output(rgb), 1.0);
}
