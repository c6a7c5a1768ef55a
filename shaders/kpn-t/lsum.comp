#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
// Sum the loss partials of this frame: hist[frame % len] (the per-frame loss history, kept
// across frames) and cur[0] (this frame's loss). One workgroup of 256 threads.
layout(push_constant) uniform Push { int n; int len; } push;
SSBO_IN(0, float, Epart)
SSBO_RW(1, float, hist)
SSBO_RW(2, float, cur)

shared float part[256];

void main() {
  uint t = gl_LocalInvocationIndex;
  float s = 0.0;
  for (int i = int(t); i < push.n; i += 256) s += Epart[i];
  part[t] = s;
  barrier();
  for (uint k = 128u; k > 0u; k >>= 1) {
    if (t < k) part[t] += part[t + k];
    barrier();
  }
  if (t == 0u) {
    hist[global.frame % push.len] = part[0];
    cur[0] = part[0];
  }
}
