#version 460
#extension GL_GOOGLE_include_directive : enable
#include "mlp_coopmat.glsl"
#include "vkgraph.glsl"
#include "unet.glsl"
#include "cm.glsl"
// One layer's input gradient (convb.comp's) on cooperative matrices:
//   dX[ci, q] = sum_{tap, co} W[co][ci][tap] dY[co, target(q, tap)]
// (dY = grad_out, grad.glsl, times GSCALE in f16: cm.glsl); channels below CINA go to dA,
// the rest to dB. Workgroup (x, y) computes input channels CM_TM y .. CM_TM y + CM_TM - 1 of
// the CM_TN input pixels from CM_TN x, as conv_cm.comp does its output pixels (the next
// step's values read while the warps multiply), over steps of 16 output channels at one tap.
#ifndef CM_FN
#define CM_FN 2
#endif
#define CM_TN (16 * CM_FN * CM_WARPS)
#define CM_NP (CM_TN / CM_THREADS)
#define CM_NW (CM_TM * 16 / CM_THREADS)  // the weights a thread stages a step
#define CG ((COUT + 15) / 16)
SSBO_IN(0, float, w)
SSBO_IN(1, float, gA)
SSBO_IN(2, float, gB)
SSBO_IN(3, float, outp)
SSBO_OUT(4, float, dA)
SSBO_OUT(5, float, dB)
SSBO_IN(6, float, noiseab)
#include "grad.glsl"
shared float16_t sw[CM_TM * 16];  // W[c0 + c][ci0 + r][tap] at 16 r + c
shared float16_t sg[16 * CM_TN];  // GSCALE dY[c0 + c, target(q0 + j, tap)] at CM_TN c + j

int lid, ni, no, q0, ci0;
ivec2 sq[CM_NP];
ivec4 sb[CM_NP];

// step t's weights (wr[i]: sw[lid + i CM_THREADS]) and scaled gradients (gr[16 s + c]:
// sg[CM_TN c + lid + s CM_THREADS]) of this thread
void fetch(int t, out float wr[CM_NW], out float gr[16 * CM_NP]) {
  int tap = t / CG, c0 = (t % CG) * 16;
  for (int i = 0; i < CM_NW; i++) {
    int e = lid + i * CM_THREADS, ci = ci0 + e / 16, co = c0 + e % 16;
    wr[i] = co < COUT && ci < CIN ? w[widx(co, ci, tap)] : 0.0;
  }
  for (int s = 0; s < CM_NP; s++) {
    ivec2 p;
    bool ok = q0 + lid + s * CM_THREADS < ni && target(sq[s], tap, sb[s], p);
    int ip = p.x + p.y * push.wo;
    for (int c = 0; c < 16; c++) {
      int co = c0 + c;
      gr[16 * s + c] = ok && co < COUT ? GSCALE * grad_out(co, ip, no) : 0.0;
    }
  }
}

void main() {
  lid = int(gl_LocalInvocationIndex);
  ni = push.wi * push.hi;
  no = push.wo * push.ho;
  int T = tile_at(noiseab[2]);
  q0 = int(gl_WorkGroupID.x) * CM_TN;
  ci0 = int(gl_WorkGroupID.y) * CM_TM;
  uint v = cm_warp();
  for (int s = 0; s < CM_NP; s++) {
    int iq = q0 + lid + s * CM_THREADS;
    sq[s] = ivec2(iq % push.wi, iq / push.wi);
#if KIND == 0
    sb[s] = box_of(sq[s], T);
#endif
  }
  CM_ACC acc[CM_FM * CM_FN];
  CM_UNROLL for (int f = 0; f < CM_FM * CM_FN; f++) CM_ZERO(acc[f]);
  float wr[CM_NW], gr[16 * CM_NP];
  fetch(0, wr, gr);
  for (int t = 0; t < KK * CG; t++) {
    for (int i = 0; i < CM_NW; i++) sw[lid + i * CM_THREADS] = cm_half(wr[i]);
    for (int s = 0; s < CM_NP; s++)
      for (int c = 0; c < 16; c++)
        sg[c * CM_TN + lid + s * CM_THREADS] = cm_half(gr[16 * s + c]);
    barrier();
    if (t + 1 < KK * CG) fetch(t + 1, wr, gr);
    CM_A a[CM_FM];
    CM_B b[CM_FN];
    CM_UNROLL for (int i = 0; i < CM_FM; i++) CM_LOAD_ROW(a[i], sw, 256 * i, 16);
    CM_UNROLL for (int j = 0; j < CM_FN; j++) CM_LOAD_ROW(b[j], sg, 16 * (CM_FN * v + j), CM_TN);
    CM_UNROLL for (int i = 0; i < CM_FM; i++)
      CM_UNROLL for (int j = 0; j < CM_FN; j++) CM_MMA(acc[i * CM_FN + j], a[i], b[j]);
    barrier();
  }
  CM_UNROLL for (int i = 0; i < CM_FM; i++)
    CM_UNROLL for (int j = 0; j < CM_FN; j++) {
      CM_SCRATCH(acc[i * CM_FN + j])
      for (int e = 0; e < 8; e++) {
        int ci = ci0 + 16 * i + CM_ROW(e), iq = q0 + 16 * (CM_FN * int(v) + j) + CM_COL(e);
        float d = cm_poison(CM_VALUE(e) / GSCALE);
        if (ci < CINA && iq < ni) dA[ci * ni + iq] = d;
        else if (ci < CIN && iq < ni) dB[(ci - CINA) * ni + iq] = d;
      }
      CM_SYNC();
    }
}
