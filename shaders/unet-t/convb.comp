#version 460
#extension GL_GOOGLE_include_directive : enable
#ifdef PRECISE
#extension GL_ARB_gpu_shader_fp64 : require
#endif
#include "vkgraph.glsl"
#include "unet.glsl"
// One layer's input gradient (the adjoint of conv.comp) as a matrix product over rows
// r = co KK + tap:
//   dX[ci, q] = sum_r W[co][ci][tap] dY[co, target(q, tap)]
// with dY = grad_out (grad.glsl); channels below CINA go to dA, the rest to dB. Workgroup
// (x, y) computes input channels TM y .. TM y + TM - 1 of input pixels TN x .. TN x + TN - 1,
// TK rows a step (unet.glsl's blocks); a thread stages the same NP pixels every step.
SSBO_IN(0, float, w)
SSBO_IN(1, real, gA)
SSBO_IN(2, real, gB)
SSBO_IN(3, real, outp)
SSBO_OUT(4, real, dA)
SSBO_OUT(5, real, dB)
SSBO_IN(6, float, noiseab)
#include "grad.glsl"
#define NROW (COUT * KK)
shared real sw[TK * TM];
shared real sg[TK * TN];

void main() {
  int lid = int(gl_LocalInvocationIndex);
  int ni = push.wi * push.hi, no = push.wo * push.ho, T = tile_at(noiseab[2]);
  int q0 = int(gl_WorkGroupID.x) * TN, ci0 = int(gl_WorkGroupID.y) * TM;
  BLOCK_AT(lid)
  ivec2 sq[NP];
  ivec4 sb[NP];
  bool sv[NP];
  for (int s = 0; s < NP; s++) {
    int iq = q0 + (lid + s * THREADS) % TN;
    sv[s] = iq < ni;
    sq[s] = ivec2(iq % push.wi, iq / push.wi);
#if KIND == 0
    sb[s] = box_of(sq[s], T);
#endif
  }
  real acc[ACC];
  for (int v = 0; v < ACC; v++) acc[v] = real(0);
  for (int r0 = 0; r0 < NROW; r0 += TK) {
    for (int e = lid; e < TK * TM; e += THREADS) {
      int row = r0 + e / TM, ci = ci0 + e % TM;
      sw[e] = (ci < CIN && row < NROW) ? real(w[widx(row / KK, ci, row % KK)]) : real(0);
    }
    for (int i = 0; i < TK * TN / THREADS; i++) {
      int e = lid + i * THREADS, s = i % NP, row = r0 + e / TN;
      real g = real(0);
      ivec2 p;
      if (sv[s] && row < NROW && target(sq[s], row % KK, sb[s], p))
        g = grad_out(row / KK, p.x + p.y * push.wo, no);
      sg[e] = g;
    }
    barrier();
    BLOCK_STEP(sw, sg)
    barrier();
  }
  for (int i = 0; i < RM; i++) {
    int ci = ci0 + tm + i;
    if (ci >= CIN) continue;
    for (int j = 0; j < RN; j++) {
      int iq = q0 + tn + j;
      if (iq >= ni) continue;
      if (ci < CINA) dA[ci * ni + iq] = acc[i * RN + j];
      else dB[(ci - CINA) * ni + iq] = acc[i * RN + j];
    }
  }
}
