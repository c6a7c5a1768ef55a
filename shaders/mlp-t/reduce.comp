#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
#include "params.glsl"
#include "config.glsl"
// dw[i] = (sum over chunks of part[chunk * NW + i]) / lscale = dE/dw_i: the loss scale that
// the backward carried is divided out here, so dw is the plain gradient.
layout(push_constant) uniform Push { int chunks; } push;
SSBO_IN(0, float, part)
SSBO_OUT(1, float, dw)

void main() {
  uint i = gl_GlobalInvocationID.x;
  if (i >= uint(NW)) return;
  float s = 0.0;
  for (int k = 0; k < push.chunks; k++) s += part[uint(k) * uint(NW) + i];
  dw[i] = s / params.lscale;
}
