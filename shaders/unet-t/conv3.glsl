// The staged-window 3x3 product of conv3_cm.comp (a layer's forward) and convb3_cm.comp (its
// input gradient): rows ROWS (the forward's output channels; the backward's input channels)
// of blocks of WROWS rows by 32 pixels, summed over the 9 taps and WIN_CH window channels
// (window.glsl's: the forward's input channels, X; the backward's output channels, dY):
//   S[row, p] = sum_{c, tap} W_AT(row, c, tap) window(c, p + offset(tap)),
// written by PUT(row, pixel index, S). The includer defines the bindings, ROWS, W_AT, PUT
// (and WIN_CH, WIN_AT where the window is not the layer's input).
// Workgroup (x, y, z) computes rows CM_TM z .. CM_TM z + CM_TM - 1 of the block at (32 x,
// WROWS y); warp v its rows CM_WR v .. CM_WR (v + 1) - 1, two fragments of 16 pixels a row. A
// step stages 16 window channels of the block's window (its pixels and a border of one:
// WROWS + 2 rows of 34, zero outside the block's tile) and those channels' weights of the 9
// taps, as f16 in shared memory; each tap's product then reads the window shifted by its
// offset, so that a value is read from global memory once a step instead of once a tap.
#ifndef CM_WR
#define CM_WR 2
#endif
#define WROWS (CM_WARPS * CM_WR)  // the block's rows of pixels
#define CG ((WIN_CH + 15) / 16)    // steps: 16 window channels each
#define FN (2 * CM_WR)             // a warp's fragments of 16 pixels
#define NW ((9 * CM_TM * 16 + CM_THREADS - 1) / CM_THREADS)  // weights a thread stages
shared float16_t sw[9 * CM_TM * 16];  // the weights: [tap][row][window channel]

int ni, no;  // the input's and the output's pixels (conv3: equal)
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
    int c = c0 + i % 16, r = row0 + (i / 16) % CM_TM, tap = i / (16 * CM_TM);
    wv[k] = i < 9 * CM_TM * 16 && r < ROWS && c < WIN_CH ? W_AT(r, c, tap) : 0.0;
  }
}

void main() {
  lid = int(gl_LocalInvocationIndex);
  ni = push.wi * push.hi;
  no = push.wo * push.ho;
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
        int r = row0 + 16 * i + CM_ROW(e);
        if (r < ROWS && p.x < push.wo && p.y < push.ho) PUT(r, p.x + p.y * push.wo, CM_VALUE(e));
      }
      CM_SYNC();
    }
}
