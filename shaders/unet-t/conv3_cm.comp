#version 460
#extension GL_GOOGLE_include_directive : enable
#include "mlp_coopmat.glsl"
#include "vkgraph.glsl"
#include "unet.glsl"
#include "cm.glsl"
// A 3x3 layer's forward (conv_cm.comp's sums, KIND 0) from a staged window instead of a
// gather a tap, where every block lies inside one tile (the image one tile, T = 0, as in
// unet's inference; or cnngenin's tiles a multiple of the blocks at the layer's scale: the
// host checks, forward.py's window_fits):
//   Y[co, p] = b[co] + sum_{ci, tap} W[co][ci][tap] X[ci, p + offset(tap)],   relu'd if RELU
// Workgroup (x, y, z) computes rows (output channels) CM_TM z .. CM_TM z + CM_TM - 1 of a
// block of WROWS rows by 32 output pixels at (32 x, WROWS y); warp v its rows CM_WR v ..
// CM_WR (v + 1) - 1, two fragments of 16 pixels a row. A step stages 16 input channels of
// the block's window (its pixels and a border of one: WROWS + 2 rows of 34, zero outside the
// block's tile) and those channels' weights of the 9 taps, as f16 in shared memory; each tap's
// product then reads the window shifted by its offset, so that an input value is read from
// global memory once a step instead of once a tap.
SSBO_IN(0, float, w)
SSBO_IN(1, float, inA)
SSBO_IN(2, float, inB)
SSBO_OUT(3, float, outp)
SSBO_IN(4, float, noiseab)

#ifndef CM_WR
#define CM_WR 2
#endif
#define WROWS (CM_WARPS * CM_WR)  // the block's rows of pixels
#define CG ((CIN + 15) / 16)       // steps: 16 input channels each
#define FN (2 * CM_WR)             // a warp's fragments of 16 pixels
#define NW ((9 * CM_TM * 16 + CM_THREADS - 1) / CM_THREADS)  // weights a thread stages
shared float16_t sw[9 * CM_TM * 16];  // the weights: [tap][row][channel]

int ni;  // INPUT_AT's input pixels
ivec2 o;  // the block's first pixel
ivec4 box;  // the block's tile (box_of), outside which the window reads zero
int lid, row0;
#include "window.glsl"

// step g's values of this thread (window_read's, and weight k: sw[lid + k CM_THREADS]),
// read all at once
void fetch(int g, out float xv[NX], out float wv[NW]) {
  int c0 = 16 * g;
  window_read(o, box, c0, xv);
  [[unroll]] for (int k = 0; k < NW; k++) {
    int i = lid + k * CM_THREADS;
    int c = c0 + i % 16, co = row0 + (i / 16) % CM_TM, tap = i / (16 * CM_TM);
    wv[k] = i < 9 * CM_TM * 16 && co < COUT && c < CIN ? w[widx(co, c, tap)] : 0.0;
  }
}

void main() {
  lid = int(gl_LocalInvocationIndex);
  ni = push.wi * push.hi;
  int no = push.wo * push.ho;
  o = ivec2(gl_WorkGroupID.xy) * ivec2(32, WROWS);
  row0 = int(gl_WorkGroupID.z) * CM_TM;
  box = box_of(o, tile_at(noiseab[2]));
  int v = int(cm_warp());
  CM_ACC acc[CM_FM * FN];
  CM_UNROLL for (int f = 0; f < CM_FM * FN; f++) CM_ZERO(acc[f]);
  float xv[NX], wv[NW];
  fetch(0, xv, wv);
  for (int g = 0; g < CG; g++) {
    barrier();  // the last step's products have read sx and sw
    window_store(xv);
    [[unroll]] for (int k = 0; k < NW; k++) {
      int i = lid + k * CM_THREADS;
      if (i < 9 * CM_TM * 16) sw[i] = cm_half(wv[k]);
    }
    barrier();
    if (g + 1 < CG) fetch(g + 1, xv, wv);  // read while the products run
    CM_UNROLL for (int tap = 0; tap < 9; tap++) {
      CM_A a[CM_FM];
      CM_UNROLL for (int i = 0; i < CM_FM; i++)
        CM_LOAD_ROW(a[i], sw, (tap * CM_TM + 16 * i) * 16, 16);
      CM_UNROLL for (int j = 0; j < FN; j++) {
        // fragment j: block row CM_WR v + j / 2, pixels 16 (j % 2) ..
        CM_B b;
        CM_LOAD_COL(b, sx, window_at(CM_WR * v + j / 2, j % 2, tap), 16);
        CM_UNROLL for (int i = 0; i < CM_FM; i++) CM_MMA(acc[i * FN + j], a[i], b);
      }
    }
  }
  CM_UNROLL for (int i = 0; i < CM_FM; i++)
    CM_UNROLL for (int j = 0; j < FN; j++) {
      CM_SCRATCH(acc[i * FN + j])
      for (int e = 0; e < 8; e++) {
        ivec2 p = o + ivec2(16 * (j % 2) + CM_COL(e), CM_WR * v + j / 2);
        int co = row0 + 16 * i + CM_ROW(e);
        if (co < COUT && p.x < push.wo && p.y < push.ho) {
          outp[co * no + p.x + p.y * push.wo] = cm_output(CM_VALUE(e) + w[bidx(co)]);
        }
      }
      CM_SYNC();
    }
}
