#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
// dw[i] = acc[i] + sum_chunks part[chunk * 28672 + i]: adds one level's weight-gradient
// partials to the sum over the levels before it (FIRST: no earlier levels).
layout(push_constant) uniform Push { int chunks; } push;
SSBO_IN(0, float, part)
#ifdef FIRST
SSBO_OUT(1, float, dw)
#else
SSBO_IN(1, float, acc)
SSBO_OUT(2, float, dw)
#endif

void main() {
  uint i = gl_GlobalInvocationID.x;
  if (i >= 28672u) return;
  float s = 0.0;
  for (int c = 0; c < push.chunks; c++) s += part[uint(c) * 28672u + i];
#ifndef FIRST
  s += acc[i];
#endif
  dw[i] = s;
}
