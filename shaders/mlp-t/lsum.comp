#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
#include "dfloat.glsl"
// E = sum of the n loss partials of this frame, each a (hi, lo) float pair, summed as
// double-float pairs in a fixed order (reproducible, and precise enough for the gradient
// check) -> hist[frame % len] (the loss history across frames) and cur[0] + cur[1] (the
// host adds them in float64). 256 threads.
layout(push_constant) uniform Push { int n; int len; } push;
SSBO_IN(0, vec2, Epart)
SSBO_RW(1, float, hist)
SSBO_RW(2, float, cur)

shared vec2 s_sum[256];

void main() {
  uint t = gl_LocalInvocationIndex;
  vec2 s = vec2(0.0);
  for (int i = int(t); i < push.n; i += 256) s = df_add(s, Epart[i]);
  s_sum[t] = s;
  barrier();
  for (uint h = 128u; h > 0u; h >>= 1) {
    if (t < h) s_sum[t] = df_add(s_sum[t], s_sum[t + h]);
    barrier();
  }
  if (t == 0u) {
    hist[global.frame % push.len] = s_sum[0].x + s_sum[0].y;
    cur[0] = s_sum[0].x;
    cur[1] = s_sum[0].y;
  }
}
