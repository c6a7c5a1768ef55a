#version 460
#extension GL_GOOGLE_include_directive : enable
#extension GL_EXT_control_flow_attributes : enable
#include "vkgraph.glsl"
#include "layout.gen"  // KPN_NW etc.: the weight layout (modules/kpn-t/forward.py)
// dw[i] = acc[i] + sum_chunks part[chunk * NW + i]: adds one level's weight-gradient
// partials to the sum over the levels before it (FIRST: no earlier levels). The chunks of a
// weight are dealt into 8 slices, c = slice + 8 m, each summed in increasing c, and the 8
// slice sums are added in a fixed tree (slice8). Workgroup j (256 threads) holds weights
// 32 j .. 32 j + 31: thread t sums slice t / 32 of weight 32 j + t % 32 (one thread a weight
// looping over ~130 partials measured 0.034 ms a level at 1024^2 on the H100).
// SERIAL (CPU drivers): one invocation sums 4 weights' 8 slices one after the other (as
// vec4s read through texel views: vector gathers on llvmpipe, where storage-buffer loads
// loop over the lanes), the same sums in the same order, so the same bits, without shared
// memory or a barrier (on llvmpipe a workgroup barrier switches between the invocations'
// coroutines: 1.0-1.6 ms a level at 64^2 with 256-thread groups).
layout(push_constant) uniform Push { int chunks; } push;
// T: the type summed (4 weights, or 1); PART(i) and ACC(i): element i of part and acc,
// counted in T
#ifdef SERIAL
#define T vec4
#define NT (KPN_NW / 4u)  // the weights, counted in T
TEX_IN(0, part)
#define PART(i) texelFetch(part, int(i))
#define ACC(i) texelFetch(acc, int(i))
#else
#define T float
#define NT KPN_NW
SSBO_IN(0, float, part)
#define PART(i) part[i]
#define ACC(i) acc[i]
#endif
#ifdef FIRST
SSBO_OUT(1, T, dw)
#elif defined(SERIAL)
TEX_IN(1, acc)
SSBO_OUT(2, T, dw)
#else
SSBO_IN(1, float, acc)
SSBO_OUT(2, T, dw)
#endif

T slice(uint i, uint k) {
  T s = T(0.0);
  for (uint c = k; c < uint(push.chunks); c += 8u) s += PART(c * NT + i);
  return s;
}

// the slice sums s(0..7) of weight i -> dw[i]
#define SLICE8(s, i)                                                        \
  {                                                                         \
    T v_ = ((s(0u) + s(1u)) + (s(2u) + s(3u))) + ((s(4u) + s(5u)) + (s(6u) + s(7u))); \
    STORE_DW(i, v_)                                                         \
  }
#ifdef FIRST
#define STORE_DW(i, v) dw[i] = v;
#else
#define STORE_DW(i, v) dw[i] = v + ACC(i);
#endif

#ifdef SERIAL
void main() {
  uint i = gl_GlobalInvocationID.x;
  if (i >= NT) return;
  T s[8];
  [[unroll]] for (uint k = 0u; k < 8u; k++) s[k] = slice(i, k);
#define S_SERIAL(k) s[k]
  SLICE8(S_SERIAL, i)
}
#else
shared float s_part[256];

void main() {
  uint t = gl_LocalInvocationIndex;
  uint i = 32u * gl_WorkGroupID.x + t % 32u;
  s_part[t] = slice(i, t / 32u);
  barrier();
  if (t >= 32u) return;
#define S_SHARED(k) s_part[t + 32u * (k)]
  SLICE8(S_SHARED, i)
}
#endif
