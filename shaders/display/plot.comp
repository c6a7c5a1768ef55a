#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
#include "font.glsl"
#include "compose.glsl"

// The loss panel of the window: a trainable module's loss plot (shaders/include/lossplot.glsl)
// drawn at the panel's size and the window's font scale, from grange.comp's per-column summary
// of the module's loss history. Dispatched over the panel's wd x ht.
layout(std430, set = 1, binding = 0) readonly buffer Cols { float cols[]; };

layout(push_constant) uniform Push {
  ivec4 panel;  // x, y, wd, ht of the panel in the window
  ivec4 area;   // plot area x0, y0, x1, y1 (exclusive) in panel pixels
  ivec4 win;    // window wd, ht; bgra texels (1) or rgba (0); font scale
  int ncols;    // columns in cols
} pc;

#include "lossplot.glsl"

void main() {
  ivec2 q = ivec2(gl_GlobalInvocationID.xy);
  if (any(greaterThanEqual(q, pc.panel.zw))) return;
  ivec2 p = pc.panel.xy + q;
  if (any(greaterThanEqual(p, pc.win.xy))) return;
  vec3 c = loss_plot(q, pc.area, max(pc.win.w, 1), pc.ncols);
  window.texel[p.x + p.y * pc.win.x] = pack_linear(c, pc.win.z);
}
