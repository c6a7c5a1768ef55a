#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
#include "font.glsl"
#include "compose.glsl"

// The status line: text from the params buffer drawn with the 5x7 font, each font pixel a
// scale x scale block, in cells of 6 x 8 font pixels. Dispatched over the strip's wd x ht.
layout(std430, set = 0, binding = 1) readonly buffer Text { int len; int code[]; } text;

layout(push_constant) uniform Push {
  ivec4 strip;  // x, y, wd, ht of the status strip in the window
  ivec4 win;    // window wd, ht; bgra texels (1) or rgba (0); font scale
} pc;

const vec3 BACK = vec3(0.13);  // sRGB-encoded
const vec3 FORE = vec3(0.86);
const int PAD = 8;  // window pixels left of the text

void main() {
  ivec2 q = ivec2(gl_GlobalInvocationID.xy);
  if (any(greaterThanEqual(q, pc.strip.zw))) return;
  ivec2 p = pc.strip.xy + q;
  if (any(greaterThanEqual(p, pc.win.xy))) return;
  ivec3 c = text_at(q, pc.strip.w, max(pc.win.w, 1), PAD);
  bool on = c.x >= 0 && c.x < text.len && font_pixel(text.code[c.x], c.y, c.z);
  window.texel[p.x + p.y * pc.win.x] = pack_texel(on ? FORE : BACK, pc.win.z);
}
