#version 460
#extension GL_GOOGLE_include_directive : enable
#include "mlp_coopmat.glsl"
#include "vkgraph.glsl"
#include "unet.glsl"
#include "cm.glsl"
// One layer's forward (conv.comp's) on cooperative matrices:
//   Y[co, p] = b[co] + sum_{tap, ci} W[co][ci][tap] X[ci, source(p, tap)],   relu'd if RELU
// Workgroup (x, y) computes output channels CM_TM y .. CM_TM y + CM_TM - 1 of the CM_TN
// output pixels from CM_TN x (warp v: pixels 16 CM_FN v .. 16 CM_FN (v + 1) - 1); a step
// (cm.glsl) stages W's CM_TM x 16 block and X's 16 x CM_TN block as f16 in shared memory,
// a thread the same CM_NP pixels every step, whose sources it finds once a step. A thread
// reads the next step's values from global memory while the warps multiply this step's.
#ifndef CM_FN
#define CM_FN 2
#endif
#define CM_TN (16 * CM_FN * CM_WARPS)
#define CM_NP (CM_TN / CM_THREADS)
#define CM_NW (CM_TM * 16 / CM_THREADS)  // the weights a thread stages a step
#define CG ((CIN + 15) / 16)
SSBO_IN(0, float, w)
SSBO_IN(1, float, inA)
SSBO_IN(2, float, inB)
SSBO_OUT(3, float, outp)
SSBO_IN(4, float, noiseab)
shared float16_t sw[CM_TM * 16];  // W[co0 + r][c0 + c][tap] at 16 r + c
shared float16_t sx[16 * CM_TN];  // X[c0 + c, source(p0 + j, tap)] at CM_TN c + j

int lid, ni, no, p0, co0;
ivec2 sp[CM_NP];
ivec4 sb[CM_NP];

// step t's weights (wr[i]: sw[lid + i CM_THREADS]) and inputs (xr[16 s + c]: sx[CM_TN c +
// lid + s CM_THREADS]) of this thread
void fetch(int t, out float wr[CM_NW], out float xr[16 * CM_NP]) {
  int tap = t / CG, c0 = (t % CG) * 16;
  for (int i = 0; i < CM_NW; i++) {
    int e = lid + i * CM_THREADS, co = co0 + e / 16, ci = c0 + e % 16;
    wr[i] = co < COUT && ci < CIN ? w[widx(co, ci, tap)] : 0.0;
  }
  for (int s = 0; s < CM_NP; s++) {
    ivec2 q;
    bool ok = p0 + lid + s * CM_THREADS < no && source(sp[s], tap, sb[s], q);
    int iq = q.x + q.y * push.wi;
    for (int c = 0; c < 16; c++) {
      int ci = c0 + c;
      float x = 0.0;
      if (ok && ci < CIN) x = ci < CINA ? inA[ci * ni + iq] : inB[(ci - CINA) * ni + iq];
      xr[16 * s + c] = x;
    }
  }
}

void main() {
  lid = int(gl_LocalInvocationIndex);
  ni = push.wi * push.hi;
  no = push.wo * push.ho;
  int T = tile_at(noiseab[2]);
  p0 = int(gl_WorkGroupID.x) * CM_TN;
  co0 = int(gl_WorkGroupID.y) * CM_TM;
  uint v = cm_warp();
  for (int s = 0; s < CM_NP; s++) {
    int ip = p0 + lid + s * CM_THREADS;
    sp[s] = ivec2(ip % push.wo, ip / push.wo);
#if KIND == 0
    sb[s] = box_of(sp[s], T);
#endif
  }
  CM_ACC acc[CM_FM * CM_FN];
  CM_UNROLL for (int f = 0; f < CM_FM * CM_FN; f++) CM_ZERO(acc[f]);
  float wr[CM_NW], xr[16 * CM_NP];
  fetch(0, wr, xr);
  for (int t = 0; t < KK * CG; t++) {
    for (int i = 0; i < CM_NW; i++) sw[lid + i * CM_THREADS] = cm_half(wr[i]);
    for (int s = 0; s < CM_NP; s++)
      for (int c = 0; c < 16; c++)
        sx[c * CM_TN + lid + s * CM_THREADS] = cm_half(xr[16 * s + c]);
    barrier();
    if (t + 1 < KK * CG) fetch(t + 1, wr, xr);
    CM_A a[CM_FM];
    CM_B b[CM_FN];
    CM_UNROLL for (int i = 0; i < CM_FM; i++) CM_LOAD_ROW(a[i], sw, 256 * i, 16);
    CM_UNROLL for (int j = 0; j < CM_FN; j++) CM_LOAD_ROW(b[j], sx, 16 * (CM_FN * v + j), CM_TN);
    CM_UNROLL for (int i = 0; i < CM_FM; i++)
      CM_UNROLL for (int j = 0; j < CM_FN; j++) CM_MMA(acc[i * CM_FN + j], a[i], b[j]);
    barrier();
  }
  CM_UNROLL for (int i = 0; i < CM_FM; i++)
    CM_UNROLL for (int j = 0; j < CM_FN; j++) {
      CM_SCRATCH(acc[i * CM_FN + j])
      for (int e = 0; e < 8; e++) {
        int co = co0 + 16 * i + CM_ROW(e), ip = p0 + 16 * (CM_FN * int(v) + j) + CM_COL(e);
        if (co < COUT && ip < no) {
          float y = cm_poison(CM_VALUE(e) + w[bidx(co)]);
          outp[co * no + ip] = RELU != 0 ? cm_relu(y) : y;
        }
      }
      CM_SYNC();
    }
}
