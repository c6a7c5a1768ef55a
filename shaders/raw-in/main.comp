#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
#include "params.gen"

// 16-bit photosites, two a uint (the left one in the low half: an (h, w) uint16 mosaic as it
// lies in memory) -> the normalised, white-balanced mosaic as rgba: v = (code - black) *
// scale with the black and scale of the photosite's place in its 2 x 2 cell (row by row),
// in r, g and b (a mosaic's reader takes each photosite's own colour), alpha 1
SSBO_IN(0, uint, img_in)
IMG_OUT(1, img_out)

void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (!inside(1, p)) return;
  uint w = img_in[p.x / 2 + p.y * (node.roi[1].x / 2)];
  float code = float((p.x & 1) == 0 ? w & 0xffffu : w >> 16);
  int k = (p.y & 1) * 2 + (p.x & 1);
  float v = (code - params.black[k]) * params.scale[k];
  img_out[p.x + p.y * node.roi[1].x] = vec4(v, v, v, 1.0);
}
