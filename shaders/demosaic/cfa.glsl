// What the demosaic kernels share: the mosaic (binding 0, one float per photosite), the
// push constants, the colour of a photosite, reflected borders, the white-balanced sample
// and the colour matrix (modules/demosaic/README.md). Each kernel declares its outputs.
#ifndef DEMOSAIC_CFA_GLSL
#define DEMOSAIC_CFA_GLSL

SSBO_IN(0, float, mosaic)

layout(push_constant) uniform Push {
  ivec4 cfa;   // x, y, z: the P x P colours (0 R, 1 G, 2 B) row by row, 2 bits each, 12 per
               // int; w: P (2 Bayer, 6 X-Trans)
  vec4 gain;   // white-balance gains of r, g, b
  float m[9];  // the colour matrix, row by row: out = m * balanced camera rgb
} pc;

int cfa_colour(ivec2 p) {
  int P = pc.cfa.w;
  int k = (p.y % P) * P + (p.x % P);
  return (pc.cfa[k / 12] >> (2 * (k % 12))) & 3;
}

// the photosite at q (reflected: -1 -> 1, which keeps the pattern's colours at the borders)
// times its colour's gain; a saturated photosite (at the white level, 1) is white whatever its
// gain, so clipped highlights stay white
float balanced(ivec2 q) {
  ivec2 s = reflect2(q, node.roi[0].xy);
  float m = mosaic[s.x + s.y * node.roi[0].x];
  return m >= 1.0 ? 1.0 : m * pc.gain[cfa_colour(s)];
}

// the output colour: the matrix times the balanced camera rgb
vec3 to_output(vec3 rgb) {
  return vec3(dot(vec3(pc.m[0], pc.m[1], pc.m[2]), rgb),
              dot(vec3(pc.m[3], pc.m[4], pc.m[5]), rgb),
              dot(vec3(pc.m[6], pc.m[7], pc.m[8]), rgb));
}

#endif
