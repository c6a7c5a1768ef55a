#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
// The loss sum of every trainable module (pipeline/trainer.py: loss_sum): E = the sum of this
// frame's n (hi, lo) loss partials -> hist[frame % len], cur (losssum.glsl). 256 threads.
layout(push_constant) uniform Push { int n; int len; } push;
SSBO_IN(0, vec2, Epart)
SSBO_RW(1, float, hist)
SSBO_RW(2, float, cur)
#include "losssum.glsl"

void main() { loss_sum(gl_LocalInvocationIndex, push.n, push.len); }
