#version 460
#extension GL_GOOGLE_include_directive : enable
#include "mlp_coopmat.glsl"
#include "vkgraph.glsl"
#include "unet.glsl"
#include "cm.glsl"
// One layer's weight gradient (convw.comp's) on cooperative matrices, in CHUNKS partial
// sums (wsum.comp adds them up), as a product over the pixels:
//   dW[co][ci][tap] = sum_p dY[co, p] X[ci, source(p, tap)],   db[co] = sum_p dY[co, p]
// (dY = grad_out, grad.glsl, times GSCALE in f16: cm.glsl). The columns are fragments of 16
// input channels at one tap, f = tap CG + g: channels 16 g .. 16 g + 15. Workgroup (x, y, z)
// computes output channels CM_TM x .. CM_TM x + CM_TM - 1, fragments CM_WF y .. CM_WF y +
// CM_WF - 1 (warp v: CM_FW of them) over chunk z of the output pixels (CHUNKS equal runs of
// the pixel index), CM_KP pixels a step; the workgroups of y = 0 sum db too. A thread stages
// one pixel of a step (lid % CM_KP) for every CM_THREADS / CM_KP-th fragment: it finds the
// pixel's source once a fragment, for the fragment's 16 channels, and reads the next step's
// values while the warps multiply this step's. No atomics: runs are bit-reproducible. Out:
// part[z LW + (index - WOFF)], LW the layer's weights and bias.
#ifndef CM_FW
#define CM_FW 2
#endif
#ifndef CM_KP
#define CM_KP 32
#endif
#define CM_WF (CM_FW * CM_WARPS)
#define KPP (CM_KP + 8)  // the staged rows' stride (halves): 16-byte aligned fragments
#define CM_FSTEP (CM_THREADS / CM_KP)  // the threads that stage one pixel
#define CG ((CIN + 15) / 16)
SSBO_IN(0, float, inA)
SSBO_IN(1, float, inB)
SSBO_IN(2, float, gA)
SSBO_IN(3, float, gB)
SSBO_IN(4, float, outp)
SSBO_OUT(5, float, part)
SSBO_IN(6, float, noiseab)
#include "grad.glsl"
shared float16_t sg[CM_TM * KPP];       // GSCALE dY[co0 + r, p0 + k] at KPP r + k
// column n (of fragment n / 16, channel n % 16 of it): X[ci, source(p0 + k, tap)] at KPP n + k
shared float16_t sx[CM_WF * 16 * KPP];

#define CM_NA (CM_TM / CM_FSTEP)  // the gradients a thread stages a step
#define CM_NB (CM_WF / CM_FSTEP)  // the fragments a thread stages a step

int lid, ni, no, T, co0, f0, end, k;

// the step from pixel p0's gradients (ga[i]: sg[(lid / CM_KP + i CM_FSTEP) KPP + k]) and
// inputs (xb[16 i + c]: sx[(16 (lid / CM_KP + i CM_FSTEP) + c) KPP + k]) of this thread
void fetch(int p0, out float ga[CM_NA], out float xb[16 * CM_NB]) {
  int ip = p0 + k;
  for (int i = 0; i < CM_NA; i++) {
    int co = co0 + lid / CM_KP + i * CM_FSTEP;
    ga[i] = co < COUT && ip < end ? GSCALE * grad_out(co, ip, no) : 0.0;
  }
  ivec2 px = ivec2(ip % push.wo, ip / push.wo);
  ivec4 box;
#if KIND == 0
  box = box_of(px, T);
#endif
  for (int i = 0; i < CM_NB; i++) {
    int f = f0 + lid / CM_KP + i * CM_FSTEP, c0 = (f % CG) * 16;
    ivec2 q;
    bool ok = ip < end && f < KK * CG && source(px, f / CG, box, q);
    int iq = q.x + q.y * push.wi;
    CM_GATHER16(xb, 16 * i, ok, c0, iq)
  }
}

void main() {
  lid = int(gl_LocalInvocationIndex);
  ni = push.wi * push.hi;
  no = push.wo * push.ho;
  T = tile_at(noiseab[2]);
  co0 = int(gl_WorkGroupID.x) * CM_TM;
  f0 = int(gl_WorkGroupID.y) * CM_WF;
  int run = (no + CHUNKS - 1) / CHUNKS, z = int(gl_WorkGroupID.z);
  int start = z * run;
  end = min(no, start + run);
  k = lid % CM_KP;  // this thread's pixel of every step
  uint v = cm_warp();
  bool bias = gl_WorkGroupID.y == 0u && lid < CM_TM;
  float db = 0.0;
  CM_ACC acc[CM_FM * CM_FW];
  CM_UNROLL for (int f = 0; f < CM_FM * CM_FW; f++) CM_ZERO(acc[f]);
  float ga[CM_NA], xb[16 * CM_NB];
  fetch(start, ga, xb);
  for (int p0 = start; p0 < end; p0 += CM_KP) {
    for (int i = 0; i < CM_NA; i++) sg[(lid / CM_KP + i * CM_FSTEP) * KPP + k] = cm_half(ga[i]);
    for (int i = 0; i < CM_NB; i++)
      for (int c = 0; c < 16; c++)
        sx[(16 * (lid / CM_KP + i * CM_FSTEP) + c) * KPP + k] = cm_half(xb[16 * i + c]);
    barrier();
    if (p0 + CM_KP < end) fetch(p0 + CM_KP, ga, xb);
    if (bias)
      for (int j = 0; j < CM_KP; j++) db += float(sg[lid * KPP + j]);
    CM_UNROLL for (int s = 0; s < CM_KP / 16; s++) {
      CM_A a[CM_FM];
      CM_B b[CM_FW];
      CM_UNROLL for (int i = 0; i < CM_FM; i++) CM_LOAD_ROW(a[i], sg, 16 * (i * KPP + s), KPP);
      CM_UNROLL for (int j = 0; j < CM_FW; j++)
        CM_LOAD_COL(b[j], sx, 16 * ((CM_FW * int(v) + j) * KPP + s), KPP);
      CM_UNROLL for (int i = 0; i < CM_FM; i++)
        CM_UNROLL for (int j = 0; j < CM_FW; j++) CM_MMA(acc[i * CM_FW + j], a[i], b[j]);
    }
    barrier();
  }
  int o = z * (COUT * CIN * KK + COUT) - WOFF;
  if (bias && co0 + lid < COUT) part[o + bidx(co0 + lid)] = db / GSCALE;
  CM_UNROLL for (int i = 0; i < CM_FM; i++)
    CM_UNROLL for (int j = 0; j < CM_FW; j++) {
      CM_SCRATCH(acc[i * CM_FW + j])
      int f = f0 + CM_FW * int(v) + j;
      for (int e = 0; e < 8; e++) {
        int co = co0 + 16 * i + CM_ROW(e), ci = (f % CG) * 16 + CM_COL(e);
        if (co < COUT && ci < CIN && f < KK * CG)
          part[o + widx(co, ci, f / CG)] = CM_VALUE(e) / GSCALE;
      }
      CM_SYNC();
    }
}
