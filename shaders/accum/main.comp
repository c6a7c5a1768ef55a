#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"

#include "params.gen"  // the params block, generated from modules/accum/params
IMG_IN(0, img_in)
IMG_IN(1, img_back)
IMG_OUT(2, img_out)

// mode 0: running mean  out_f = back + (in - back) / (f + 1)
// mode 1: running sum   out_f = back + in
// back is the module's own output of the previous frame (feedback edge; zeros at frame 0)
void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (!inside(2, p)) return;
  vec4 c = img_in[texel(0, p)];
  vec4 b = img_back[texel(1, p)];
  vec4 o = params.mode == 1 ? b + c : b + (c - b) / float(global.frame + 1);
  img_out[p.x + p.y * node.roi[2].x] = o;
}
