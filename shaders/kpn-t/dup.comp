#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
// dO_{i+1} = U^T dO_i: coarse q gathers fine 2q (weight 1), 2q+1 (1/2, or 1 where q is the
// last coarse index: the clamped C[n] term) and 2q-1 (1/2), separably in x and y.
IMG_IN(0, gfine)
IMG_OUT(1, gcoarse)

float w1(int q, int d, int nc, int nf) {
  int x = 2 * q + d;
  if (x < 0 || x >= nf) return 0.0;
  if (d == 0) return 1.0;
  if (d == 1) return q + 1 >= nc ? 1.0 : 0.5;
  return 0.5;  // d == -1
}

void main() {
  ivec2 q = ivec2(gl_GlobalInvocationID.xy);
  if (!inside(1, q)) return;
  ivec2 nc = node.roi[1].xy, nf = node.roi[0].xy;
  vec3 s = vec3(0.0);
  for (int dy = -1; dy <= 1; dy++) {
    float wy = w1(q.y, dy, nc.y, nf.y);
    if (wy == 0.0) continue;
    for (int dx = -1; dx <= 1; dx++) {
      float wx = w1(q.x, dx, nc.x, nf.x);
      if (wx == 0.0) continue;
      ivec2 t = 2 * q + ivec2(dx, dy);
      s += wx * wy * gfine[t.x + t.y * nf.x].rgb;
    }
  }
  gcoarse[q.x + q.y * nc.x] = vec4(s, 0.0);
}
