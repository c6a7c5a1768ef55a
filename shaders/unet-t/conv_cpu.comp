#version 460
#extension GL_GOOGLE_include_directive : enable
#extension GL_EXT_control_flow_attributes : enable
#extension GL_KHR_shader_subgroup_basic : enable
#include "vkgraph.glsl"
#include "unet.glsl"
// One layer's forward for CPU drivers (the "cpu" kernels; conv.comp's products, fp32): no
// shared memory and no barriers. An invocation is a SIMD lane on llvmpipe, and a load whose
// address differs per lane is a loop over the lanes, so each input value is loaded once and
// used for CB output channels: an invocation sums CB channels (from CB times workgroup y) of
// PX pixels (SG apart: a subgroup covers SG PX consecutive pixels), the weights' addresses
// alike on every lane.
//   Y[co, p] = b[co] + sum over ci, tap of W[co][ci][tap] X[ci, source(p, tap)]
SSBO_IN(0, float, w)
SSBO_IN(1, float, inA)
SSBO_IN(2, float, inB)
SSBO_OUT(3, float, outp)
SSBO_IN(4, float, noiseab)
#ifndef PX
#define PX 8
#endif
#ifndef CB
#define CB 16
#endif
#define SG 8

void main() {
  int ni = push.wi * push.hi, no = push.wo * push.ho, T = tile_at(noiseab[2]);
  int lane = int(gl_SubgroupInvocationID);
  int base = (int(gl_GlobalInvocationID.x) - lane) * PX + lane;
  ivec2 p[PX];
  ivec4 box[PX];
  [[unroll]] for (int k = 0; k < PX; k++) {
    int ip = min(base + SG * k, no - 1);
    p[k] = ivec2(ip % push.wo, ip / push.wo);
    box[k] = box_of(p[k], T);
  }
  int co0 = int(gl_WorkGroupID.y) * CB, nc = min(CB, COUT - co0);
  float acc[PX][CB];
  for (int c = 0; c < CB; c++) {
    float b = 0.0;
    if (c < nc) b = w[bidx(co0 + c)];
    [[unroll]] for (int k = 0; k < PX; k++) acc[k][c] = b;
  }
  for (int t = 0; t < KK; t++) {
    int iq[PX];
    bool ok[PX];
    [[unroll]] for (int k = 0; k < PX; k++) {
      ivec2 q;
      ok[k] = source(p[k], t, box[k], q);
      iq[k] = q.x + q.y * push.wi;
    }
    for (int ci = 0; ci < CIN; ci++) {
      float x[PX];
      [[unroll]] for (int k = 0; k < PX; k++) {
        x[k] = 0.0;
        if (ok[k]) x[k] = INPUT_AT(ci, iq[k]);
      }
      for (int c = 0; c < nc; c++) {
        float wv = w[widx(co0 + c, ci, t)];
        [[unroll]] for (int k = 0; k < PX; k++) acc[k][c] += wv * x[k];
      }
    }
  }
  [[unroll]] for (int k = 0; k < PX; k++) {
    int ip = base + SG * k;
    if (ip >= no) continue;
    for (int c = 0; c < nc; c++)
#if RELU
      outp[(co0 + c) * no + ip] = max(acc[k][c], 0.0);
#else
      outp[(co0 + c) * no + ip] = acc[k][c];
#endif
  }
}
