// Malvar-He-Cutler gradient-corrected bilinear demosaicing of one Bayer photosite (modules/
// demosaic/README.md has the four 5 x 5 filters, x 1/8): v holds the 5 x 5 mosaic values around
// it, v[(dy + 2) * 5 + dx + 2]; c is its colour (0 R, 1 G, 2 B) and `beside` the colour of its
// right neighbour (which, for a green photosite, tells whether red lies in its row or its
// column). The photosite keeps its own colour.
#ifndef MHC_GLSL
#define MHC_GLSL

vec3 mhc(float v[25], int c, int beside) {
  float c0 = v[12];
  float cross1 = v[7] + v[11] + v[13] + v[17];  // the 4 neighbours
  float cross2 = v[2] + v[10] + v[14] + v[22];  // the 4 at distance 2
  float diag = v[6] + v[8] + v[16] + v[18];
  vec3 rgb;
  if (c == 1) {
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
  return rgb;
}

#endif
