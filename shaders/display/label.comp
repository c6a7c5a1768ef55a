#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
#include "font.glsl"
#include "compose.glsl"

// A panel's label: a strip along the panel's top with a short text (character codes
// text.z .. text.z + text.w - 1 of the labels buffer) in the 5x7 font, each font pixel a
// scale x scale block, in cells of 6 x 8 font pixels. Dispatched over the strip's wd x ht.
layout(std430, set = 1, binding = 0) readonly buffer Labels { int code[]; } labels;

layout(push_constant) uniform Push {
  ivec4 strip;  // x, y, wd, ht of the label strip in the window
  ivec4 win;    // window wd, ht; bgra texels (1) or rgba (0); font scale
  ivec4 text;   // unused, unused, first code, number of codes
} pc;

const vec3 BACK = vec3(0.06);  // sRGB-encoded: the panel colour
const vec3 FORE = vec3(0.75);
const int PAD = 4;  // window pixels left of the text

void main() {
  ivec2 q = ivec2(gl_GlobalInvocationID.xy);
  if (any(greaterThanEqual(q, pc.strip.zw))) return;
  ivec2 p = pc.strip.xy + q;
  if (any(greaterThanEqual(p, pc.win.xy))) return;
  ivec3 c = text_at(q, pc.strip.w, max(pc.win.w, 1), PAD);
  bool on = c.x >= 0 && c.x < pc.text.w && font_pixel(labels.code[pc.text.z + c.x], c.y, c.z);
  window.texel[p.x + p.y * pc.win.x] = pack_texel(on ? FORE : BACK, pc.win.z);
}
