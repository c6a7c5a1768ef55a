#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
#include "font.glsl"
// A trainable module's loss plot (500 x 200; pipeline/trainer.py: loss_plot): log10(loss) over
// the frames shown, from the per-column summary of grange.comp, drawn by
// shaders/include/lossplot.glsl at font scale 1 in the plot area [x0, x1) x [y0, y1) (push
// constants, trainer.py's GRAPH_PLOT), one cols column per pixel column.
layout(push_constant) uniform Push { int len; int x0, y0, x1, y1; } push;
SSBO_IN(0, float, cols)
IMG_OUT(1, plot)
#include "lossplot.glsl"

void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (!inside(1, p)) return;
  ivec4 a = ivec4(push.x0, push.y0, push.x1, push.y1);
  plot[p.x + p.y * node.roi[1].x] = vec4(loss_plot(p, a, 1, a.z - a.x), 1.0);
}
