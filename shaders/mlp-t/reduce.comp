#version 460
#extension GL_GOOGLE_include_directive : enable
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#include "vkgraph.glsl"
#include "params.gen"  // the params block, generated from modules/mlp-t/params
#include "config.glsl"
// dw[i] = (sum over chunks of part[chunk * NW + i]) / lscale = dE/dw_i: the loss scale that
// the backward carried is divided out here, so dw is the plain gradient. Table entries
// (i >= NW): dw[i] = tacc[i - NW] / T_FIX, the fixed-point sum train scattered (already
// without the loss scale); NaN for all of them when a contribution was not finite.
// PART_SCALED (train_cm's partials): the chunks are the coopmat workgroups, whose partials
// are dE/dW already (no division).
// Workgroup j (256 threads) holds params 64 j .. 64 j + 63: thread t sums the chunks
// k = t / 64 + 4 m of param 64 j + t % 64, and the four slices are added in a fixed order.
// Then per net n: gn[2n] = ||dw_n||_2 over the net's weights and gn[2n+1] = 1 if all of them
// are finite, else 0 (adam skips that net's update); the table counts as net 0's. Workgroup j
// (all of one net, as NET_W is a multiple of 64, or of the table) writes its sum of squares
// and whether all were finite to gpart[j]; the last workgroup to finish (an atomic count in
// cnt, which it resets to 0 for the next frame) sums them per net in a fixed order (a tree
// over its threads), so gn does not depend on which one that is.
// LOSS_SUM (the coopmat variant): that last workgroup also does lsum.comp's work, the same
// sums in the same order: E from the nloss (hi, lo) partials -> hist[frame % len], cur.
layout(push_constant) uniform Push { int chunks; int nloss; int len; } push;
SSBO_IN(0, float, part)
SSBO_IN(1, int64_t, tacc)
SSBO_OUT(2, float, dw)
SSBO_OUT(3, float, gn)
layout(std430, set = 1, binding = 4) coherent buffer gpart_buf { vec2 gpart[]; };
layout(std430, set = 1, binding = 5) coherent buffer cnt_buf { uint cnt; };
#ifdef LOSS_SUM
SSBO_IN(6, vec2, Epart)
SSBO_RW(7, float, hist)
SSBO_RW(8, float, cur)
#include "losssum.glsl"
#endif

#define PER_GROUP 64u  // params per workgroup (4 chunk slices of 64 threads)
shared float s_sum[256];
shared float s_ok[256];
shared uint s_bad;
shared bool s_last;

void main() {
  uint t = gl_LocalInvocationIndex, j = gl_WorkGroupID.x;
  uint i = PER_GROUP * j + t % PER_GROUP, slice = t / PER_GROUP;
  if (t == 0u) s_bad = 0u;
  float s = 0.0;
  if (i < uint(NW) && weight_used(int(i % uint(NET_W))))  // (unused weights: dw 0, unread)
    for (uint k = slice; k < uint(push.chunks); k += 4u) s += part[k * uint(NW) + i];
  s_sum[t] = s;
  barrier();
  float g = 0.0;
  if (slice == 0u && i < uint(NP)) {
    if (i >= uint(NW)) {
      g = tacc[TABLE] != 0 ? uintBitsToFloat(0x7fc00000u)
                           : float(tacc[i - uint(NW)]) * (1.0 / T_FIX);
    } else {
      g = ((s_sum[t] + s_sum[t + 64u]) + s_sum[t + 128u]) + s_sum[t + 192u];
#ifndef PART_SCALED  // (train_cm divided its partials by its dynamic loss scale already)
      g /= params.lscale;
#endif
    }
    dw[i] = g;
    if (!finite(g)) atomicOr(s_bad, 1u);
  }
  barrier();
  s_sum[t] = g * g;
  barrier();
  for (uint h = 128u; h > 0u; h >>= 1) {
    if (t < h) s_sum[t] += s_sum[t + h];
    barrier();
  }
  if (t == 0u) {
    gpart[j] = vec2(s_sum[0], s_bad == 0u ? 1.0 : 0.0);
    memoryBarrierBuffer();  // gpart[j] is visible before the count says so
    s_last = atomicAdd(cnt, 1u) == gl_NumWorkGroups.x - 1u;
  }
  barrier();
  if (!s_last) return;
  memoryBarrierBuffer();
  uint per_net = uint(NET_W) / PER_GROUP, groups = gl_NumWorkGroups.x;
  for (uint n = 0u; n < uint(NETS); n++) {  // (uniform: a tree per net over 256 threads)
    float q = 0.0, ok = 1.0;
    for (uint k = n * per_net + t; k < (n + 1u) * per_net; k += 256u) {
      q += gpart[k].x;
      ok = min(ok, gpart[k].y);
    }
    for (uint k = uint(NW) / PER_GROUP + t; n == 0u && k < groups; k += 256u) {  // the table
      q += gpart[k].x;
      ok = min(ok, gpart[k].y);
    }
    barrier();  // the previous net's tree is read
    s_sum[t] = q;
    s_ok[t] = ok;
    barrier();
    for (uint h = 128u; h > 0u; h >>= 1) {
      if (t < h) {
        s_sum[t] += s_sum[t + h];
        s_ok[t] = min(s_ok[t], s_ok[t + h]);
      }
      barrier();
    }
    if (t == 0u) {
      gn[2u * n] = sqrt(s_sum[0]);
      gn[2u * n + 1u] = s_ok[0] != 0.0 && !isinf(s_sum[0]) ? 1.0 : 0.0;
    }
  }
#ifdef LOSS_SUM
  loss_sum(t, push.nloss, push.len);
#endif
  if (t == 0u) cnt = 0u;
}
