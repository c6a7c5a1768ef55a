#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"

// cnngenin generate 6, step 2 of 3: each tile's JPEG (modules/cnngenin/README.md). One thread
// per 8x8 block: z 0..3 the four luma blocks of a 16x16 MCU, 4 its Cb block, 5 its Cr block.
// A block gathers its samples from the noisy linear image (sRGB, 8 bits, YCbCr, and for
// chroma libjpeg's 2x2 downsampling), runs libjpeg's islow DCT, quantisation at the tile's
// quality (the alpha main.comp wrote), dequantisation and inverse DCT, and writes the decoded
// codes to its plane. Each tile is padded to whole MCUs as libjpeg expands a JPEG's edges.
#include "params.gen"
#include "jpeg.glsl"

IMG_IN(0, noisy)               // the output's size: noisy linear rgb, quality in alpha
SSBO_OUT(1, float, luma)       // decoded Y, the padded cells (cols * pw) x (rows * ph)
SSBO_OUT(2, float, chroma)     // decoded Cb then Cr, each (cols * pw / 2) x (rows * ph / 2)

// 8-bit sRGB rgb of output pixel q
ivec3 codes(ivec2 q) {
  vec3 v = noisy[texel(0, q)].rgb;
  return ivec3(srgb8(v.r), srgb8(v.g), srgb8(v.b));
}

// the chroma component k (1 Cb, 2 Cr) of the 2x2 box at chroma sample c of a cell of size cs
// at base: jcsample.c h2v2, bias 1, 2, 1, ... along the row; rows past the image repeat its
// last chroma row, columns its last pixel column (libjpeg's edge expansion)
int chroma_sample(ivec2 base, ivec2 cs, ivec2 c, int k) {
  c.y = min(c.y, (cs.y + 1) / 2 - 1);
  int sum = 0;
  for (int dy = 0; dy < 2; dy++)
    for (int dx = 0; dx < 2; dx++) {
      ivec3 rgb = codes(base + min(2 * c + ivec2(dx, dy), cs - 1));
      sum += k == 1 ? cb_of(rgb) : cr_of(rgb);
    }
  return (sum + 1 + (c.x & 1)) >> 2;
}

void main() {
  ivec3 id = ivec3(gl_GlobalInvocationID);
  ivec2 osize = node.roi[0].xy;
  ivec2 cs = cell_size(osize), ps = padded(cs);
  ivec2 cells = osize / cs;
  ivec2 plane = cells * ps;                   // the luma plane's size
  if (any(greaterThanEqual(id.xy * 16, plane)) || id.z > 5) return;
  ivec2 cell = id.xy * 16 / ps;
  ivec2 mcu = id.xy * 16 - cell * ps;         // the MCU's origin inside its cell
  ivec2 base = cell * cs;                     // the cell's first output pixel
  int quality = int(noisy[texel(0, base)].a);
  bool is_chroma = id.z >= 4;
  // the block's origin: luma inside the cell, chroma inside the cell's chroma
  ivec2 org = is_chroma ? mcu / 2 : mcu + 8 * ivec2(id.z & 1, id.z >> 1);
  int b[64];
  for (int v = 0; v < 8; v++)
    for (int u = 0; u < 8; u++) {
      ivec2 c = org + ivec2(u, v);
      b[8 * v + u] = is_chroma ? chroma_sample(base, cs, c, id.z - 3)
                               : luma_of(codes(base + min(c, cs - 1)));
    }
  block_roundtrip(b, is_chroma, quality);
  for (int v = 0; v < 8; v++)
    for (int u = 0; u < 8; u++) {
      if (is_chroma) {
        ivec2 q = cell * ps / 2 + org + ivec2(u, v);
        chroma[q.x + (q.y + (id.z - 4) * plane.y / 2) * plane.x / 2] = float(b[8 * v + u]);
      } else {
        ivec2 q = cell * ps + org + ivec2(u, v);
        luma[q.x + q.y * plane.x] = float(b[8 * v + u]);
      }
    }
}
