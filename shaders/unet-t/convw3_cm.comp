#version 460
#extension GL_GOOGLE_include_directive : enable
#include "mlp_coopmat.glsl"
#include "vkgraph.glsl"
#include "unet.glsl"
#include "cm.glsl"
// A 3x3 layer's weight gradient (convw_cm.comp's sums, KIND 0) from staged windows, where
// every block of 32 x BH output pixels lies inside one tile (conv3_cm's condition: the host
// checks, forward.py's window_fits):
//   dW[co][ci][tap] = sum_p dY[co, p] X[ci, p + offset(tap)],   db[co] = sum_p dY[co, p]
// (dY = grad_out, grad.glsl, times GSCALE in f16: cm.glsl). Workgroup (x, y, z) sums output
// channels CM_TM x .. CM_TM x + CM_TM - 1 and input channels 16 y .. 16 y + 15 over chunk z
// of the blocks (CHUNKS equal runs of them in raster order); warp v (9 warps) sums tap v. A
// block stages dY of its pixels (CM_TM rows) and X of its window (its pixels and a border of
// one, zero outside the block's tile) for the 16 channels, as f16 in shared memory, the next
// block's values read while the warps multiply; each warp's products read the window from
// its tap's offset. The workgroups of y = 0 sum db too. No atomics: runs are
// bit-reproducible. Out: part[z LW + (index - WOFF)], LW the layer's weights and bias.
SSBO_IN(0, float, inA)
SSBO_IN(1, float, inB)
SSBO_IN(2, float, gA)
SSBO_IN(3, float, gB)
SSBO_IN(4, float, outp)
SSBO_OUT(5, float, part)
SSBO_IN(6, float, noiseab)
#include "grad.glsl"

#ifndef BH
#define BH 8
#endif
#define WROWS BH
#define PB (32 * BH)             // a block's pixels
#define SGS (PB + 8)             // sg's row stride (halves): rows 16 bytes apart in the banks
#define NG ((CM_TM * PB + CM_THREADS - 1) / CM_THREADS)  // gradients a thread stages
shared float16_t sg[CM_TM * SGS];  // GSCALE dY[co0 + r, the block's pixel k] at SGS r + k

int lid, ni, no, nbx, co0, c0, T;
#include "window.glsl"

ivec2 block_at(int b) { return ivec2(b % nbx * 32, b / nbx * BH); }

// block b's values of this thread, read all at once: window_read's, and gradient k: row
// i / PB, block pixel i % PB (i = lid + k CM_THREADS)
void fetch(int b, out float xv[NX], out float gv[NG]) {
  ivec2 o = block_at(b);
  window_read(o, box_of(o, T), c0, xv);
  [[unroll]] for (int k = 0; k < NG; k++) {
    int i = lid + k * CM_THREADS, co = co0 + i / PB;
    ivec2 p = o + ivec2(i % 32, i % PB / 32);
    bool ok = i < CM_TM * PB && co < COUT && p.x < push.wo && p.y < push.ho;
    gv[k] = ok ? GSCALE * grad_out(co, p.x + p.y * push.wo, no) : 0.0;
  }
}

void main() {
  lid = int(gl_LocalInvocationIndex);
  ni = push.wi * push.hi;
  no = push.wo * push.ho;
  T = tile_at(noiseab[2]);
  co0 = int(gl_WorkGroupID.x) * CM_TM;
  c0 = int(gl_WorkGroupID.y) * 16;
  nbx = (push.wo + 31) / 32;
  int nb = nbx * ((push.ho + BH - 1) / BH);
  int run = (nb + CHUNKS - 1) / CHUNKS, z = int(gl_WorkGroupID.z);
  int start = z * run, end = min(nb, start + run);
  int tap = int(cm_warp());  // this warp's
  bool bias = gl_WorkGroupID.y == 0u && lid < CM_TM;
  float db = 0.0;
  CM_ACC acc[CM_FM];
  CM_UNROLL for (int i = 0; i < CM_FM; i++) CM_ZERO(acc[i]);
  float xv[NX], gv[NG];
  if (start < end) fetch(start, xv, gv);
  for (int b = start; b < end; b++) {
    barrier();  // the last block's products have read sg and sx
    window_store(xv);
    [[unroll]] for (int k = 0; k < NG; k++) {
      int i = lid + k * CM_THREADS;
      if (i < CM_TM * PB) sg[(i / PB) * SGS + i % PB] = cm_half(gv[k]);
    }
    barrier();
    if (b + 1 < end) fetch(b + 1, xv, gv);  // read while the products run
    if (bias)
      for (int j = 0; j < PB; j++) db += float(sg[lid * SGS + j]);
    // the block's rows r and fragments of 16 pixels s: dY's 16 rows x 16 pixels times the
    // window's 16 pixels (from the tap's offset) x 16 channels
    CM_UNROLL for (int r = 0; r < BH; r++)
      CM_UNROLL for (int s = 0; s < 2; s++) {
        CM_B x;
        CM_LOAD_ROW(x, sx, window_at(r, s, tap), 16);
        CM_UNROLL for (int i = 0; i < CM_FM; i++) {
          CM_A g;
          CM_LOAD_ROW(g, sg, 16 * i * SGS + 32 * r + 16 * s, SGS);
          CM_MMA(acc[i], g, x);
        }
      }
  }
  int o = int(gl_WorkGroupID.z) * (COUT * CIN * KK + COUT) - WOFF;
  if (bias && co0 + lid < COUT) part[o + bidx(co0 + lid)] = db / GSCALE;
  CM_UNROLL for (int i = 0; i < CM_FM; i++) {
    CM_SCRATCH(acc[i])
    for (int e = 0; e < 8; e++) {
      int co = co0 + 16 * i + CM_ROW(e), ci = c0 + CM_COL(e);
      if (co < COUT && ci < CIN) part[o + widx(co, ci, tap)] = CM_VALUE(e) / GSCALE;
    }
    CM_SYNC();
  }
}
