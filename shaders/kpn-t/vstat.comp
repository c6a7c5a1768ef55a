#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
// Pre-pass of vis.comp: per weight matrix l (one workgroup of 256 threads each, l = 0..6)
// the sums of squares over its used weights (matrix 6: rows 0..15) of
//   stats[l] = sum w^2,  stats[8 + l] = sum dw^2      (stats[7], stats[15] unused)
// where dw is this frame's gradient (computed at these weights w).
SSBO_IN(0, float, w)
SSBO_IN(1, float, dw)
SSBO_OUT(2, float, stats)

shared float sw[256];
shared float sg[256];

void main() {
  uint t = gl_LocalInvocationIndex;
  uint l = gl_WorkGroupID.y;
  uint n = l == 6u ? 1024u : 4096u;
  float a = 0.0, b = 0.0;
  for (uint i = t; i < n; i += 256u) {
    float x = w[4096u * l + i], g = dw[4096u * l + i];
    a += x * x;
    b += g * g;
  }
  sw[t] = a;
  sg[t] = b;
  barrier();
  for (uint k = 128u; k > 0u; k >>= 1) {
    if (t < k) {
      sw[t] += sw[t + k];
      sg[t] += sg[t + k];
    }
    barrier();
  }
  if (t == 0u) {
    stats[l] = sw[0];
    stats[8u + l] = sg[0];
  }
}
