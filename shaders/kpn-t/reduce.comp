#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
// dw[i] = acc[i] + sum_chunks part[chunk * 28672 + i]: adds one level's weight-gradient
// partials to the sum over the levels before it (FIRST: no earlier levels). Workgroup j
// (256 threads) holds weights 32 j .. 32 j + 31: thread t sums the chunks c = t / 32 + 8 m of
// weight 32 j + t % 32, and the 8 slices are added in a fixed order (one thread a weight
// looping over ~130 partials measured 0.034 ms a level at 1024^2 on the H100).
layout(push_constant) uniform Push { int chunks; } push;
SSBO_IN(0, float, part)
#ifdef FIRST
SSBO_OUT(1, float, dw)
#else
SSBO_IN(1, float, acc)
SSBO_OUT(2, float, dw)
#endif

shared float s_part[256];

void main() {
  uint t = gl_LocalInvocationIndex;
  uint i = 32u * gl_WorkGroupID.x + t % 32u, slice = t / 32u;
  float s = 0.0;
  for (uint c = slice; c < uint(push.chunks); c += 8u) s += part[c * 28672u + i];
  s_part[t] = s;
  barrier();
  if (slice != 0u) return;
  s = ((s_part[t] + s_part[t + 32u]) + (s_part[t + 64u] + s_part[t + 96u]))
      + ((s_part[t + 128u] + s_part[t + 160u]) + (s_part[t + 192u] + s_part[t + 224u]));
#ifndef FIRST
  s += acc[i];
#endif
  dw[i] = s;
}
