#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
#include "config.glsl"
// Per net n (workgroup y, 256 threads): gn[2n] = ||dw_n||_2 over the net's weights and
// gn[2n+1] = 1 if all of them are finite, else 0 (adam then skips that net's update). The
// encoding's table (TABLE floats after the weights) counts as net 0's.
SSBO_IN(0, float, dw)
SSBO_OUT(1, float, gn)

shared float s_sum[256];
shared uint s_bad;

void main() {
  uint t = gl_LocalInvocationIndex;
  uint n = gl_WorkGroupID.y;
  if (t == 0u) s_bad = 0u;
  barrier();
  float s = 0.0;
  bool fin = true;
  for (uint k = t; k < uint(NET_W); k += 256u) {
    float g = dw[n * uint(NET_W) + k];
    fin = fin && !isnan(g) && !isinf(g);
    s += g * g;
  }
  for (uint k = t; n == 0u && k < uint(TABLE); k += 256u) {
    float g = dw[uint(NW) + k];
    fin = fin && !isnan(g) && !isinf(g);
    s += g * g;
  }
  if (!fin) atomicOr(s_bad, 1u);
  s_sum[t] = s;
  barrier();
  for (uint h = 128u; h > 0u; h >>= 1) {
    if (t < h) s_sum[t] += s_sum[t + h];
    barrier();
  }
  if (t == 0u) {
    gn[2u * n] = sqrt(s_sum[0]);
    gn[2u * n + 1u] = (s_bad == 0u && !isinf(s_sum[0])) ? 1.0 : 0.0;
  }
}
