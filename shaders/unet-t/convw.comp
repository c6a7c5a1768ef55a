#version 460
#extension GL_GOOGLE_include_directive : enable
#ifdef PRECISE
#extension GL_ARB_gpu_shader_fp64 : require
#endif
#include "vkgraph.glsl"
#include "unet.glsl"
// One layer's weight gradient in CHUNKS partial sums (wsum.comp adds them up), as a matrix
// product over the pixels: with columns col = ci KK + tap (and col = CIN KK, the bias, whose
// input is 1),
//   dW[co][col] = sum_p dY[co, p] X[ci, source(p, tap)],   db[co] = sum_p dY[co, p]
// (dY = grad_out, grad.glsl). Workgroup (x, y, z) computes output channels TM x .. TM x +
// TM - 1 and columns TN y .. TN y + TN - 1 over chunk z of the output pixels (CHUNKS equal
// runs of the pixel index), TK pixels a step (unet.glsl's blocks; the step's pixel
// coordinates and boxes found once, in shared memory); no atomics, so runs are
// bit-reproducible. Out: part[z LW + (index - WOFF)], LW the layer's weights and bias
// (float64 with PRECISE).
SSBO_IN(0, real, inA)
SSBO_IN(1, real, inB)
SSBO_IN(2, real, gA)
SSBO_IN(3, real, gB)
SSBO_IN(4, real, outp)
SSBO_OUT(5, real, part)
SSBO_IN(6, float, noiseab)
#include "grad.glsl"
#define NCOL (CIN * KK + 1)
shared real sg[TK * TM];
shared real sx[TK * TN];
shared ivec2 spix[TK];
shared ivec4 sbox[TK];

void main() {
  int lid = int(gl_LocalInvocationIndex);
  int ni = push.wi * push.hi, no = push.wo * push.ho, T = tile_at(noiseab[2]);
  int co0 = int(gl_WorkGroupID.x) * TM, col0 = int(gl_WorkGroupID.y) * TN;
  int run = (no + CHUNKS - 1) / CHUNKS, z = int(gl_WorkGroupID.z);
  int start = z * run, end = min(no, start + run);
  BLOCK_AT(lid)
  real acc[ACC];
  for (int v = 0; v < ACC; v++) acc[v] = real(0);
  for (int p0 = start; p0 < end; p0 += TK) {
    for (int k = lid; k < TK; k += THREADS) {
      int ip = p0 + k;
      spix[k] = ivec2(ip % push.wo, ip / push.wo);
#if KIND == 0
      sbox[k] = box_of(spix[k], T);
#endif
    }
    barrier();
    for (int e = lid; e < TK * TM; e += THREADS) {
      int ip = p0 + e / TM, co = co0 + e % TM;
      sg[e] = (co < COUT && ip < end) ? grad_out(co, ip, no) : real(0);
    }
    for (int i = 0; i < TK * TN / THREADS; i++) {
      int e = lid + i * THREADS, k = e / TN, col = col0 + (lid + (i % NP) * THREADS) % TN;
      real x = real(0);
      if (p0 + k < end && col < NCOL) {
        ivec2 q;
        if (col == NCOL - 1) {
          x = real(1);
        } else if (source(spix[k], col % KK, sbox[k], q)) {
          int ci = col / KK, iq = q.x + q.y * push.wi;
          x = INPUT_AT(ci, iq);
        }
      }
      sx[e] = x;
    }
    barrier();
    BLOCK_STEP(sg, sx)
    barrier();
  }
  int o = z * (COUT * CIN * KK + COUT) - WOFF;
  for (int i = 0; i < RM; i++) {
    int co = co0 + tm + i;
    if (co >= COUT) continue;
    for (int j = 0; j < RN; j++) {
      int col = col0 + tn + j;
      if (col >= NCOL) continue;
      if (col == NCOL - 1) part[o + bidx(co)] = acc[i * RN + j];
      else part[o + widx(co, col / KK, col % KK)] = acc[i * RN + j];
    }
  }
}
