// Shared by the window-composition kernels: linear float -> sRGB 8-bit texels packed as the
// swapchain stores them (the host copies the packed buffer straight into the image).
#ifndef COMPOSE_GLSL
#define COMPOSE_GLSL

// window texels, one packed 8-bit RGBA or BGRA texel per uint, row-major
layout(std430, set = 1, binding = 1) writeonly buffer Window { uint texel[]; } window;

// the sRGB transfer function of a linear value; NaN -> 0, clamped to [0, 1] like o-png
float srgb_encode(float x) {
  x = isnan(x) ? 0.0 : clamp(x, 0.0, 1.0);
  return x <= 0.0031308 ? 12.92 * x : 1.055 * pow(x, 1.0 / 2.4) - 0.055;
}

// an sRGB-encoded colour in [0, 1] as one opaque texel (bgra != 0: blue in the low byte)
uint pack_texel(vec3 srgb, int bgra) {
  uvec3 c = uvec3(round(clamp(srgb, 0.0, 1.0) * 255.0));
  if (bgra != 0) c = c.bgr;
  return c.r | (c.g << 8) | (c.b << 16) | (255u << 24);
}

uint pack_linear(vec3 rgb, int bgra) {
  return pack_texel(vec3(srgb_encode(rgb.r), srgb_encode(rgb.g), srgb_encode(rgb.b)), bgra);
}

// Text in a strip (the status line, a panel's label): for strip pixel q, the font cell and
// the pixel in it of text starting `pad` window pixels from the left, centred vertically in a
// strip `ht` high, each 5x7 font pixel a scale x scale block in cells of 6 x 8: (cell, x, y)
// for font_pixel, cell -1 left of or above the text.
ivec3 text_at(ivec2 q, int ht, int scale, int pad) {
  int x = q.x - pad, y = q.y - (ht - 7 * scale) / 2;
  if (x < 0 || y < 0) return ivec3(-1, 0, 0);
  return ivec3(x / (6 * scale), (x % (6 * scale)) / scale, y / scale);
}

#endif
