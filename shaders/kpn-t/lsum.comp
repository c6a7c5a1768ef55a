#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
#include "dfloat.glsl"
// Sum the loss partials of this frame: hist[frame % len] (the per-frame loss history, kept
// across frames) and cur[0] + cur[1] (this frame's loss as a double-float pair: the host adds
// them in float64). One workgroup of 256 threads.
layout(push_constant) uniform Push { int n; int len; } push;
SSBO_IN(0, vec2, Epart)
SSBO_RW(1, float, hist)
SSBO_RW(2, float, cur)

shared vec2 part[256];

void main() {
  uint t = gl_LocalInvocationIndex;
  vec2 s = vec2(0.0);
  for (int i = int(t); i < push.n; i += 256) s = df_add(s, Epart[i]);
  part[t] = s;
  barrier();
  for (uint k = 128u; k > 0u; k >>= 1) {
    if (t < k) part[t] = df_add(part[t], part[t + k]);
    barrier();
  }
  if (t == 0u) {
    hist[global.frame % push.len] = part[0].x + part[0].y;
    cur[0] = part[0].x;
    cur[1] = part[0].y;
  }
}
