#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
#include "params.gen"  // the params block, generated from modules/mlp-t/params
// The current networks over the target's grid: pixel (x, y) of tile n is net n at the tile-
// local texel centre uv = ((x - x0 + 1/2) / tw, (y - y0 + 1/2) / th), outputs -> r, g, b, a
// (one output: grey; alpha 1 where there is none). Workgroup (j, n) does the MLP_BATCH pixels
// of tile n from j MLP_BATCH on, then those G MLP_BATCH further (G = gl_NumWorkGroups.x),
// and so on. Runs on frames f % preview == 0 (preview > 0) and on the last frame; the output
// keeps its last picture in between. The host leaves the node out of the frames where it is
// not due (module.py: preview_due) unless another node of the graph is due then, so the
// kernel checks it too (the host caps G: such a frame launches few workgroups).
IMG_IN(0, target)
SSBO_IN(1, float, w)
IMG_OUT(2, outp)
#define MLP_W(i) w[i]
#include "net.glsl"

void main() {
  bool due = global.frame == global.frame_cnt - 1 ||
             (params.preview > 0 && global.frame % params.preview == 0);
  if (!due) return;  // uniform over the dispatch
  int n = int(gl_WorkGroupID.y);
  ivec4 rect = tile_rect(n);
  int c = int(gl_LocalInvocationIndex);
  uint woff = uint(n) * uint(NET_W);
  for (int j0 = int(gl_WorkGroupID.x) * MLP_BATCH; j0 < rect.z * rect.w;
       j0 += int(gl_NumWorkGroups.x) * MLP_BATCH) {  // (uniform over the workgroup)
    barrier();  // the previous rows' outputs are read
    for (int r = c; r < MLP_BATCH; r += MLP_WIDTH) net_uv[r] = texel_pos(rect, j0 + r, POS(0.5));
    barrier();
    net_inputs();
    for (int l = 0; l < MLP_LAYERS; l++) net_layer(woff, l);
    for (int r = c; r < MLP_BATCH; r += MLP_WIDTH) {
      int j = j0 + r;
      if (j >= rect.z * rect.w) continue;
      vec4 y = vec4(mlp_act[r][0], mlp_act[r][1], mlp_act[r][2], mlp_act[r][3]);
      if (N_OUT == 1) y = vec4(y.xxx, 1.0);
      else if (N_OUT == 2) y = vec4(y.xy, 0.0, 1.0);
      else if (N_OUT == 3) y.w = 1.0;
      ivec2 p = rect.xy + ivec2(j % rect.z, j / rect.z);
      outp[p.y * node.roi[0].x + p.x] = y;
    }
  }
}
