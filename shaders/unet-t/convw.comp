#version 460
#extension GL_GOOGLE_include_directive : enable
#ifdef PRECISE
#extension GL_ARB_gpu_shader_fp64 : require
#endif
#include "vkgraph.glsl"
#include "unet.glsl"
// One layer's weight gradient in CHUNKS partial sums (wsum.comp adds them up): workgroup
// (x, y, z) sums, over chunk z of the output pixels (CHUNKS equal runs of the pixel index),
// for output channels c0 .. c0 + CBW - 1 (c0 = CBW x, CBW divides COUT) and input channel
// ci = y (y = CIN: the bias)
//   dW[co][ci][tap] = sum_p dY[co, p] X[ci, source(p, tap)],   db[co] = sum_p dY[co, p]
// (dY = grad_out, grad.glsl; 64 threads stride over the chunk, then a tree in shared memory:
// no atomics, so runs are bit-reproducible) into part[z LW + (index - WOFF)], LW the layer's
// weights and bias (float64 with PRECISE).
SSBO_IN(0, real, inA)
SSBO_IN(1, real, inB)
SSBO_IN(2, real, gA)
SSBO_IN(3, real, gB)
SSBO_IN(4, real, outp)
SSBO_OUT(5, real, part)
SSBO_IN(6, float, noiseab)
#include "grad.glsl"
#define NV (CBW * KK)
shared real red[NV * 64];

void main() {
  int lid = int(gl_LocalInvocationIndex);
  int c0 = int(gl_WorkGroupID.x) * CBW, ci = int(gl_WorkGroupID.y);
  int ni = push.wi * push.hi, no = push.wo * push.ho, T = tile_at(noiseab[2]);
  real acc[NV];
  for (int v = 0; v < NV; v++) acc[v] = real(0);
  int run = (no + CHUNKS - 1) / CHUNKS, z = int(gl_WorkGroupID.z);
  int end = min(no, (z + 1) * run);
  for (int ip = z * run + lid; ip < end; ip += 64) {
    ivec2 p = ivec2(ip % push.wo, ip / push.wo);
    real g[CBW];
    for (int j = 0; j < CBW; j++) g[j] = grad_out(c0 + j, ip, no);
    if (ci == CIN) {
      for (int j = 0; j < CBW; j++) acc[j * KK] += g[j];
      continue;
    }
    for (int t = 0; t < KK; t++) {
      ivec2 q;
      if (!source(p, t, T, q)) continue;
      int iq = q.x + q.y * push.wi;
      real x = ci < CINA ? inA[ci * ni + iq] : inB[(ci - CINA) * ni + iq];
      for (int j = 0; j < CBW; j++) acc[j * KK + t] += g[j] * x;
    }
  }
  for (int v = 0; v < NV; v++) red[v * 64 + lid] = acc[v];
  barrier();
  for (int s = 32; s > 0; s >>= 1) {
    if (lid < s)
      for (int v = 0; v < NV; v++) red[v * 64 + lid] += red[v * 64 + lid + s];
    barrier();
  }
  if (lid != 0) return;
  int o = z * (COUT * CIN * KK + COUT) - WOFF;
  for (int j = 0; j < CBW; j++) {
    if (ci == CIN) {
      part[o + bidx(c0 + j)] = red[j * KK * 64];
    } else {
      for (int t = 0; t < KK; t++) part[o + widx(c0 + j, ci, t)] = red[(j * KK + t) * 64];
    }
  }
}
