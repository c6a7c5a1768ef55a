#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"

// cnngenin generate 6, step 3 of 3: imgo from the decoded JPEG planes of jpeg.comp (one thread
// per output pixel): libjpeg's h2v2 "fancy" (triangle) upsampling of Cb and Cr, its YCbCr to
// rgb, then sRGB decoded to linear and rounded to half like every cnngenin output.
#include "params.gen"
#include "jpeg.glsl"

SSBO_IN(0, float, luma)
SSBO_IN(1, float, chroma)
IMG_OUT(2, imgo)

ivec2 g_plane;  // the luma plane's size

int chroma_at(ivec2 q, int k) {
  return int(chroma[q.x + (q.y + k * g_plane.y / 2) * g_plane.x / 2]);
}

// jdsample.c h2v2_fancy_upsample at cell pixel lp of component k (0 Cb, 1 Cr): 3/4 of the
// nearest chroma sample and 1/4 of the next in each direction (weights 9 3 3 1 of 16), +8
// on even columns and +7 on odd ones; the cell's chroma edges repeat
int upsampled(ivec2 cbase, ivec2 csize, ivec2 lp, int k) {
  ivec2 i = lp >> 1;
  ivec2 odd = lp & 1;
  ivec2 nxt = clamp(i + 2 * odd - 1, ivec2(0), csize - 1);
  int here = 3 * chroma_at(cbase + i, k) + chroma_at(cbase + ivec2(i.x, nxt.y), k);
  int next = 3 * chroma_at(cbase + ivec2(nxt.x, i.y), k) + chroma_at(cbase + nxt, k);
  return (3 * here + next + 8 - odd.x) >> 4;
}

void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (!inside(2, p)) return;
  ivec2 osize = node.roi[2].xy;
  ivec2 cs = cell_size(osize), ps = padded(cs);
  g_plane = osize / cs * ps;
  ivec2 cell = p / cs;
  ivec2 lp = p - cell * cs;
  ivec2 q = cell * ps + lp;
  int y = int(luma[q.x + q.y * g_plane.x]);
  ivec2 cbase = cell * ps / 2, csize = (cs + 1) / 2;
  ivec3 rgb = ycc_to_rgb(y, upsampled(cbase, csize, lp, 0), upsampled(cbase, csize, lp, 1));
  vec3 lin = vec3(srgb_decode8(rgb.r), srgb_decode8(rgb.g), srgb_decode8(rgb.b));
  imgo[p.x + p.y * osize.x] = to_half(vec4(lin, 1.0));
}
