#version 460
#extension GL_GOOGLE_include_directive : enable
#ifndef WARPS
#define WARPS 8u  // T = 128 pixels: 2 x 128 x 72 + 64 x 72 halves = 45 KiB of shared memory
#endif
#define CM_EMU_WARPS WARPS
#include "mlp_coopmat.glsl"
#include "vkgraph.glsl"
#include "kpn.glsl"
// The fused MLP backward with cooperative matrices: for a tile of T = 16 WARPS pixels it
// recomputes the forward (nothing is stored between fwd and the backward), back-propagates
// and adds the tile's weight gradient to accumulators that stay in registers for all the
// tiles of the workgroup; each workgroup writes its sum once:
//   h_0 = f, h_{l+1} = leaky(W_l h_l)                       (l = 0..5; K is not needed)
//   g_7 := s dK, g_l = leaky'(h_l) * (W_l^T g_{l+1})       (l = 6..1, W_6: rows 0..15)
//   dW_l += G_{l+1}^T H_l over the tile's pixels              (l = 6..0)
// s = `scale` is the loss scale of bck_cm (with its saturation at +-65504); the partials are
// divided by it: part[wg * 28672 + 4096 l + 64 o + c] (rows 16..63 of W_6 stay zero), and
// reduce.comp sums the workgroups.
//
// Work split. Forward and backward products: warp w owns the tile's pixel rows 16w..16w+15
// (as fwd_cm and bck_cm, 16 x 64 per layer). Weight gradient: the 16 output tiles (o, c) of
// W_l are dealt round-robin over the warps, tile t = w + WARPS j (j < 16 / WARPS) at
// (o, c) = (t mod 4, t div 4); W_6's four tiles (o = 0) go to warps 0..3. Its K loop runs
// over all T pixels of the tile, so shared memory holds two T x 64 f16 tiles: gs = g_{l+1}
// and hs = h_l. The other activations h_1..h_5 of the warp's rows wait in a per-warp
// scratch buffer (read back once, so it stays in L2); h_0 is recomputed from the image.
// The weights of the layer at hand are staged in shared memory by the whole workgroup (ws),
// so the products' weight fragments load from there. Accumulators: 6 (16 / WARPS) + 1 fragments per warp (13 at WARPS = 8), indexed by
// constants only (a layer's are swapped into `cur` by a switch) so they stay in registers.
#define T (16u * WARPS)
#define NJ (16u / WARPS)
#define HS 72u

layout(push_constant) uniform Push { uint N; uint tiles; float scale; float inv_scale; } push;
IMG_IN(0, detail)
SSBO_IN(1, uvec4, w)  // f16, 8 per uvec4
SSBO_IN(2, float, dK)
layout(std430, set = 1, binding = 3) coherent buffer scr_buf { float16_t scr[]; };
SSBO_OUT(4, float, part)

shared float16_t hs[T * HS];
shared float16_t gs[T * HS];
shared float16_t ws[64u * HS];  // W_l, staged by the workgroup per layer

uint warp, lane, row0, p0;

// scratch slot of h_l (l = 1..5) for this warp's 16 rows: 16 x 64 halves, row-major
uint scr_off(uint l) { return ((gl_WorkGroupID.x * WARPS + warp) * 5u + l - 1u) * 1024u; }

// h_0 of this warp's rows into hs
DEFINE_KPN_FEATURES(gather, detail, 0)
void features() {  // lane: half lane % 2 of row lane / 2
  uint r = lane / 2u, p = p0 + r, c0 = 32u * (lane % 2u);
  float f[32];
  if (p < push.N) {
    gather(p, lane % 2u, f);
  } else {
    [[unroll]] for (uint j = 0u; j < 32u; j++) f[j] = 0.0;
  }
  [[unroll]] for (uint j = 0u; j < 32u; j++) hs[(row0 + r) * HS + c0 + j] = float16_t(f[j]);
}

// this warp's rows of hs: h_l -> h_{l+1} (l = 0..5), and h_{l+1} to scratch (l + 1 <= 5)
void forward_layer(uint l) {
  barrier();  // every warp is done with the previous W
  CM_STAGE64(ws, HS, w, 512u * l, 64u);
  barrier();
  CM_A a[4];
  CM_UNROLL for (uint k = 0u; k < 4u; k++) CM_LOAD_ROW(a[k], hs, row0 * HS + 16u * k, HS);
  CM_SYNC();
  for (uint nt = 0u; nt < 4u; nt++) {
    CM_ACC z;
    CM_ZERO(z);
    CM_UNROLL for (uint k = 0u; k < 4u; k++) {
      CM_B b;
      CM_LOAD_COL(b, ws, 16u * (HS * nt + k), HS);
      CM_MMA(z, a[k], b);
    }
    CM_LEAKY(z, LEAKY_SLOPE);
    CM_ACC16 h;
    CM_TO_F16(h, z);
    CM_STORE_ROW(h, hs, row0 * HS + 16u * nt, HS);
    if (l < 5u) CM_STORE_ROW(h, scr, scr_off(l + 1u) + 16u * nt, 64u);
  }
  CM_SYNC();
}

// dW_l += G_{l+1}^T H_l over the tile (gs, hs: all rows), this warp's tiles of layer l < 6,
// summed into `cur` (the caller swaps the layer's accumulators in and out)
void dw_hidden(inout CM_ACC cur[NJ]) {
  for (uint q = 0u; q < WARPS; q++) {
    CM_A g;
    CM_LOAD_COL(g, gs, 16u * q * HS + 16u * (warp % 4u), HS);
    CM_UNROLL for (uint j = 0u; j < NJ; j++) {
      CM_B h;
      CM_LOAD_ROW(h, hs, 16u * q * HS + 16u * ((warp + WARPS * j) / 4u), HS);
      CM_MMA(cur[j], g, h);
    }
  }
}

// one backward step through W_l for this warp's rows: gs = g_{l+1} (kt column tiles: 1 for
// dK, else 4), hs = h_l on entry; gs = g_l and hs = h_{l-1} on exit. The barrier in the
// middle lets every warp finish its weight-gradient reads of gs and hs first.
void back_step(uint l, uint kt) {
  CM_A a[4];
  CM_UNROLL for (uint k = 0u; k < 4u; k++)
    if (k < kt) CM_LOAD_ROW(a[k], gs, row0 * HS + 16u * k, HS);
  CM_ACC16 m[4];
  CM_UNROLL for (uint nt = 0u; nt < 4u; nt++) CM_LOAD_ROW(m[nt], hs, row0 * HS + 16u * nt, HS);
  CM_STAGE64(ws, HS, w, 512u * l, 16u * kt);  // the last reads of ws were before a barrier
  barrier();
  CM_UNROLL for (uint nt = 0u; nt < 4u; nt++) {
    CM_ACC z;
    CM_ZERO(z);
    CM_UNROLL for (uint k = 0u; k < 4u; k++) {
      if (k < kt) {
        CM_B b;
        CM_LOAD_ROW(b, ws, 16u * (HS * k + nt), HS);
        CM_MMA(z, a[k], b);
      }
    }
    CM_ACC16 g;
    CM_CLAMP(z, CM_F16_MAX);
      CM_TO_F16(g, z);
    CM_LEAKY_GRAD(g, m[nt], LEAKY_SLOPE);
    CM_STORE_ROW(g, gs, row0 * HS + 16u * nt, HS);
  }
  if (l > 1u) {
    memoryBarrierBuffer();
    CM_UNROLL for (uint k = 0u; k < 4u; k++) {
      CM_A x;
      CM_LOAD_ROW(x, scr, scr_off(l - 1u) + 16u * k, 64u);
      CM_STORE_ROW(x, hs, row0 * HS + 16u * k, HS);
    }
  } else {
    features();
  }
  barrier();
}

// the accumulators of layer l <-> cur (constant indices, so they stay in registers)
#define DW_CASE_IN(L) case L: CM_UNROLL for (uint j = 0u; j < NJ; j++) cur[j] = dwacc[L * NJ + j]; break;
#define DW_CASE_OUT(L) case L: CM_UNROLL for (uint j = 0u; j < NJ; j++) dwacc[L * NJ + j] = cur[j]; break;

void main() {
  warp = cm_warp();
  lane = cm_lane();
  row0 = 16u * warp;
  CM_ACC dwacc[6u * NJ + 1u];
  CM_UNROLL for (uint i = 0u; i < 6u * NJ + 1u; i++) CM_ZERO(dwacc[i]);
  uint ntiles = (push.N + T - 1u) / T;
  uint t0 = gl_WorkGroupID.x * push.tiles, t1 = min(ntiles, t0 + push.tiles);
  for (uint t = t0; t < t1; t++) {
    p0 = t * T + row0;
    barrier();  // the previous tile's dW_0 has read hs and gs
    features();
    CM_SYNC();
    for (uint l = 0u; l < 6u; l++) forward_layer(l);
    memoryBarrierBuffer();  // scratch: written above, read back by the same warp below
    // g_7 = scaled dK into columns 0..15 of this warp's rows of gs (16 x 16)
    for (uint e = lane; e < 256u; e += CM_WARP) {
      uint r = e / 16u, o = e % 16u, p = p0 + r;
      float v = p < push.N ? dK[p * 16u + o] * push.scale : 0.0;
      gs[(row0 + r) * HS + o] = float16_t(cm_clamp(v, CM_F16_MAX));
    }
    barrier();
    for (uint l = 6u; ; l--) {  // gs = g_{l+1}, hs = h_l
      if (l == 6u) {
        if (warp < 4u) {  // dW_6 (rows 0..15): dK^T h_6, this warp's 16 columns
          for (uint q = 0u; q < WARPS; q++) {
            CM_A g;
            CM_LOAD_COL(g, gs, 16u * q * HS, HS);
            CM_B h;
            CM_LOAD_ROW(h, hs, 16u * q * HS + 16u * warp, HS);
            CM_MMA(dwacc[6u * NJ], g, h);
          }
        }
      } else {
        CM_ACC cur[NJ];
        switch (l) { DW_CASE_IN(0u) DW_CASE_IN(1u) DW_CASE_IN(2u) DW_CASE_IN(3u) DW_CASE_IN(4u) DW_CASE_IN(5u) }
        dw_hidden(cur);
        switch (l) { DW_CASE_OUT(0u) DW_CASE_OUT(1u) DW_CASE_OUT(2u) DW_CASE_OUT(3u) DW_CASE_OUT(4u) DW_CASE_OUT(5u) }
      }
      if (l == 0u) break;
      back_step(l, l == 6u ? 1u : 4u);
    }
  }
  uint out0 = gl_WorkGroupID.x * 28672u;
  CM_UNROLL for (uint l = 0u; l < 6u; l++)
    CM_UNROLL for (uint j = 0u; j < NJ; j++) {
      uint t = warp + WARPS * j;
      CM_SCALE(dwacc[l * NJ + j], push.inv_scale);
      CM_STORE_ROW(dwacc[l * NJ + j], part, out0 + 4096u * l + 1024u * (t % 4u) + 16u * (t / 4u), 64u);
    }
  if (warp < 4u) {
    CM_SCALE(dwacc[6u * NJ], push.inv_scale);
    CM_STORE_ROW(dwacc[6u * NJ], part, out0 + 24576u + 16u * warp, 64u);
  }
}
