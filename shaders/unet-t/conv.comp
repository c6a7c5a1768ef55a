#version 460
#extension GL_GOOGLE_include_directive : enable
#ifdef PRECISE
#extension GL_ARB_gpu_shader_fp64 : require
#endif
#include "vkgraph.glsl"
#include "unet.glsl"
// One layer's forward (unet.glsl names the layer) as a matrix product over columns
// col = ci KK + tap:
//   Y[co, p] = b[co] + sum_col W[co][col] X[ci, source(p, tap)],   relu'd if RELU
// with X = (A's CINA channels, then B's). Workgroup (x, y) computes output channels
// TM y .. TM y + TM - 1 of output pixels TN x .. TN x + TN - 1 (the pixel index), TK columns a
// step (unet.glsl's blocks); a thread stages the same NP pixels every step, whose
// coordinates and boxes it finds once.
SSBO_IN(0, float, w)
SSBO_IN(1, real, inA)
SSBO_IN(2, real, inB)
SSBO_OUT(3, real, outp)
SSBO_IN(4, float, noiseab)
#define NCOL (CIN * KK)
shared real sw[TK * TM];
shared real sx[TK * TN];

void main() {
  int lid = int(gl_LocalInvocationIndex);
  int ni = push.wi * push.hi, no = push.wo * push.ho, T = tile_at(noiseab[2]);
  int p0 = int(gl_WorkGroupID.x) * TN, co0 = int(gl_WorkGroupID.y) * TM;
  BLOCK_AT(lid)
  ivec2 sp[NP];
  ivec4 sb[NP];
  bool sv[NP];
  for (int s = 0; s < NP; s++) {
    int ip = p0 + (lid + s * THREADS) % TN;
    sv[s] = ip < no;
    sp[s] = ivec2(ip % push.wo, ip / push.wo);
#if KIND == 0
    sb[s] = box_of(sp[s], T);
#endif
  }
  real acc[ACC];
  for (int i = 0; i < RM; i++) {
    real b = co0 + tm + i < COUT ? real(w[bidx(co0 + tm + i)]) : real(0);
    for (int j = 0; j < RN; j++) acc[i * RN + j] = b;
  }
  for (int c0 = 0; c0 < NCOL; c0 += TK) {
    for (int e = lid; e < TK * TM; e += THREADS) {
      int k = e / TM, co = co0 + e % TM, col = c0 + k;
      sw[e] = (co < COUT && col < NCOL) ? real(w[WOFF + co * NCOL + col]) : real(0);
    }
    for (int i = 0; i < TK * TN / THREADS; i++) {
      int e = lid + i * THREADS, s = i % NP, col = c0 + e / TN;
      real x = real(0);
      ivec2 q;
      if (sv[s] && col < NCOL && source(sp[s], col % KK, sb[s], q)) {
        int ci = col / KK, iq = q.x + q.y * push.wi;
        x = INPUT_AT(ci, iq);
      }
      sx[e] = x;
    }
    barrier();
    BLOCK_STEP(sw, sx)
    barrier();
  }
  for (int i = 0; i < RM; i++) {
    int co = co0 + tm + i;
    if (co >= COUT) continue;
    for (int j = 0; j < RN; j++) {
      int ip = p0 + tn + j;
      if (ip >= no) continue;
#if RELU
      outp[co * no + ip] = max(acc[i * RN + j], real(0));
#else
      outp[co * no + ip] = acc[i * RN + j];
#endif
    }
  }
}
