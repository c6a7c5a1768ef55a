#version 460
#extension GL_GOOGLE_include_directive : enable
#ifndef WARPS
#define WARPS 16u  // T = 128 pixels: 2 x 128 x 72 + 64 x 72 halves = 45 KiB of shared memory
#endif
#define CM_EMU_WARPS WARPS
#define CM_WANT_BLOCKS
#include "mlp_coopmat.glsl"
#include "vkgraph.glsl"
#include "layout.gen"  // KPN_NW etc.: the weight layout (modules/kpn-t/forward.py)
#include "kpn.glsl"
// The fused MLP backward with cooperative matrices: for a tile of T = 8 WARPS pixels it
// recomputes the forward (nothing is stored between fwd and the backward), back-propagates
// and adds the tile's weight gradient to accumulators that stay in registers for all the
// tiles of the workgroup; each workgroup writes its sum once:
//   h_0 = f, h_{l+1} = leaky(W_l h_l)                       (l = 0..5; K is not needed)
//   g_7 := s dK, g_l = leaky'(h_l) * (W_l^T g_{l+1})       (l = 6..1, W_6: rows 0..N_OUT-1)
//   dW_l += G_{l+1}^T H_l over the tile's pixels              (l = 6..0)
// s = `scale` is the loss scale of bck_cm (with its saturation at +-65504); the partials are
// divided by it: part[wg * NW + 4096 l + 64 o + c] (rows N_OUT..63 of W_6 stay zero), and
// reduce.comp sums the workgroups.
//
// Work split. Forward and backward products: the warps pair up on the tile's 16-pixel row
// blocks; warp w computes row block w div 2, output column tiles 2 (w mod 2) and +1 (32 of
// the 64 neurons), and it also owns those columns when h_0 is gathered and h_l is restored.
// Weight gradient: the 16 output tiles (o, c) of W_l are dealt round-robin over the warps,
// tile t = w + WARPS j (j < 16 / WARPS) at (o, c) = (t mod 4, t div 4); W_6's four tiles
// (o = 0) go to warps 0..3. Its K loop runs over all T pixels of the tile, so shared memory
// holds two T x 64 f16 tiles: gs = g_{l+1} and hs = h_l. The activations h_0..h_5 wait in a
// scratch buffer per workgroup and row block (read back once, so it stays in L2), copied in
// 16-byte pieces per invocation (h_0 too: read back instead of gathered again from diff's
// feature plane, bck_fused 2.015 -> 1.914 ms at 1024² on the H100). The weights of the
// layer at hand are staged in shared memory by the whole workgroup (ws), so the weight
// fragments load from there.
// Accumulators: 6 (16 / WARPS) + 1 fragments per warp (7 at WARPS = 16), indexed by
// constants only (a layer's are swapped into `cur` by a switch) so they stay in registers.
// Registers are what limits this kernel (the H100's driver gives it 128 a thread, all an SM
// has for 512 threads: VKGRAPH_PIPELINE_STATS): loading h_{l-1} from scratch ahead of a
// backward step's products, to hide the loads' latency, spilled 48 bytes a thread to local
// memory and measured 4% slower than loading it after them; h_0's scratch slot (in place of
// the second gather) took it to 128 registers and a 16-byte spill, which loading the
// leaky-ReLU mask h_l right where it is used (not ahead of the barrier) took away again
// (126 registers; 1.907 -> 1.896 ms). (Spreading W_6's four tiles over all warps by row
// blocks, the partial sums folded at the end, measured the same as warps 0..3 alone: not
// kept.)
// The sums kept in `part` between tiles instead (a fragment loaded, its 8 products, stored,
// each tile) take it to 72 registers but 2.17 ms against 1.80: 100 KiB each way a tile.
// Barriers: two per layer and direction; the operands of a product are loaded before the
// barrier that precedes any overwrite of them (the other warp of the row block reads the
// same rows).
#define T (8u * WARPS)
#define RB (WARPS / 2u)
#define NJ (16u / WARPS)
#define HS 72u
#define OT (uint(N_OUT) / 16u)  // output tiles of W_6 (rows 0..N_OUT-1)
#define NJ6 ((4u * OT + WARPS - 1u) / WARPS)  // W_6's tiles a warp
#define G7 (uint(N_OUT) / 4u)  // g_7 values a lane

layout(push_constant) uniform Push { uint N; uint tiles; float scale; float inv_scale; } push;
#ifdef KPN_CTX  // arch 1 and 2: the context planes (and match features) of kpn.glsl
CTX_INPUTS
#else
SSBO_IN(0, float16_t, feat)  // diff's feature plane
#endif
SSBO_IN(1, uvec4, w)  // f16, 8 per uvec4
SSBO_IN(2, float, dK)
layout(std430, set = 1, binding = 3) buffer scr_buf { uvec4 scr[]; };  // f16, 8 per uvec4
SSBO_OUT(4, float, part)
#ifdef ASCALE_B  // adam's stats, [2] the activation scale s (kpn.glsl)
SSBO_IN(ASCALE_B, float, stats)
#endif
#ifdef LSC_B  // the per-layer scales f_l (wscale.comp)
SSBO_IN(LSC_B, float, lsc)
#endif

#ifdef CM_BLOCKS
shared F16 { float16_t hs[T * HS]; float16_t gs[T * HS]; float16_t ws[64u * HS]; };
shared U128 { uvec4 hs8[T * HS / 8u]; uvec4 gs8[T * HS / 8u]; uvec4 ws8[64u * HS / 8u]; };
#else
shared float16_t hs[T * HS];
shared float16_t gs[T * HS];
shared float16_t ws[64u * HS];  // W_l, staged by the workgroup per layer
#endif

uint warp, lane, half_, row0, p0;

// scratch slot of h_l (l = 0..5) for this warp's row block: 16 x 64 halves, row-major, as
// uvec4 (8 halves): the warp's 16 rows x 32 columns are 64 uvec4, two per lane (SCR_E)
uint scr_off(uint l) { return ((gl_WorkGroupID.x * RB + warp / 2u) * 6u + l) * 128u; }
#define SCR_E(l, i, e, s)                                                  \
  uint e = lane + CM_WARP * (i);                                            \
  uint s = (row0 + e / 4u) * (HS / 8u) + 4u * half_ + e % 4u;               \
  e = scr_off(l) + 8u * (e / 4u) + 4u * half_ + e % 4u
// h_l (l = 0..5) of this warp's rows and columns: hs -> scratch. Each lane reads back
// (back_step) exactly what it wrote, so no other invocation's write is involved.
void scr_store(uint l) {
  [[unroll]] for (uint i = 0u; i < 2u; i++) {
    SCR_E(l, i, e, s);
    scr[e] = CM_GET8(hs, s);
  }
}

// h_0 of this warp's row block and columns: lane -> pixel lane / 2, 16 features; and g_7,
// the scaled dK of rows 8 half_ .. 8 half_ + 7 of the block, 4 values a lane. Loaded ahead
// of the tile's first barrier (so the loads overlap the wait), stored to hs and gs after it
// (bck_fused 1.818 -> 1.772 ms at 1024² on the H100, 127 registers, no spill).
#ifdef KPN_CTX
DEFINE_CTX_FEATURE(ctx_feature, ctxf, 0, ctxc, CTXC_B)
DEFINE_CTX_FEATURES(gather, ctx_feature, 0, 16)
#else
DEFINE_KPN_FEATURES(gather, feat, 0, 2)
#endif
void tile_loads(out float f[16], out float g[G7]) {
  float s = ACTIVATION_SCALE();  // h_0 = s f (kpn.glsl); g_l does not change, dW carries s
  uint r = lane / 2u, p = p0 + r, q = 2u * half_ + lane % 2u;
  if (p < push.N) {
    gather(p, q, f);
    [[unroll]] for (uint j = 0u; j < 16u; j++) f[j] *= s;
  } else {
    [[unroll]] for (uint j = 0u; j < 16u; j++) f[j] = 0.0;
  }
  [[unroll]] for (uint i = 0u; i < G7; i++) {
    uint e = lane + CM_WARP * i, o = e % uint(N_OUT);
    p = p0 + 8u * half_ + e / uint(N_OUT);
    g[i] = cm_clamp(p < push.N ? dK[p * uint(N_OUT) + o] * push.scale : 0.0, CM_F16_MAX);
  }
}
void tile_stores(float f[16], float g[G7]) {
  uint r = lane / 2u, q = 2u * half_ + lane % 2u;
  [[unroll]] for (uint j = 0u; j < 2u; j++)
    CM_PUT8(hs, (row0 + r) * (HS / 8u) + 2u * q + j, CM_PACK8(f, 8u * j));
  [[unroll]] for (uint i = 0u; i < G7; i++) {  // g_7 into columns 0..N_OUT-1 of gs
    uint e = lane + CM_WARP * i;
    gs[(row0 + 8u * half_ + e / uint(N_OUT)) * HS + e % uint(N_OUT)] = float16_t(g[i]);
  }
}

// hs: h_l -> h_{l+1} (l = 0..5) in this warp's rows and columns; h_l to scratch first. The
// warp wrote its columns of h_l itself, so its scratch copy needs a warp sync only and goes
// ahead of the barrier, where it overlaps the wait (bck_fused 1.868 -> 1.805 ms at 1024² on
// the H100; after the barrier's A loads and staging instead: 1.858).
void forward_layer(uint l) {
  CM_SYNC();
  scr_store(l);
  barrier();  // h_l complete; every warp is done with the previous W
  CM_A a[4];
  CM_UNROLL for (uint k = 0u; k < 4u; k++) CM_LOAD_ROW(a[k], hs, row0 * HS + 16u * k, HS);
  CM_STAGE64(ws, HS, w, 512u * l, 64u);
  barrier();  // W_l staged; both warps of the row block hold their operands
  CM_UNROLL for (uint i = 0u; i < 2u; i++) {
    uint nt = 2u * half_ + i;
    CM_ACC z;
    CM_ZERO(z);
    CM_UNROLL for (uint k = 0u; k < 4u; k++) {
      CM_B b;
      CM_LOAD_COL(b, ws, 16u * (HS * nt + k), HS);
      CM_MMA(z, a[k], b);
    }
    CM_SCALE(z, LAYER_SCALE(l));
    CM_LEAKY(z, LEAKY_SLOPE);
    CM_ACC16 h;
    CM_TO_F16(h, z);
    CM_STORE_ROW(h, hs, row0 * HS + 16u * nt, HS);
  }
}

// dW_l += G_{l+1}^T H_l over the tile (gs, hs: all rows), this warp's tiles of layer l < 6,
// summed into `cur` (the caller swaps the layer's accumulators in and out)
void dw_hidden(inout CM_ACC cur[NJ]) {
  for (uint q = 0u; q < RB; q++) {
    CM_A g;
    CM_LOAD_COL(g, gs, 16u * q * HS + 16u * (warp % 4u), HS);
    CM_UNROLL for (uint j = 0u; j < NJ; j++) {
      CM_B h;
      CM_LOAD_ROW(h, hs, 16u * q * HS + 16u * ((warp + WARPS * j) / 4u), HS);
      CM_MMA(cur[j], g, h);
    }
  }
}

// one backward step through W_l for this warp's rows and columns: gs = g_{l+1} (kt column
// tiles: 1 for dK, else 4), hs = h_l on entry; gs = g_l and hs = h_{l-1} on exit. The first
// barrier lets every warp finish its weight-gradient reads of gs and hs, the second makes
// g_l and h_{l-1} whole. The mask h_l is loaded after the first: only this warp writes its
// columns of hs before the second (h_{l-1}, after a warp sync). h_{l-1} is read from
// scratch after the products (see Registers).
void back_step(uint l, uint kt) {
  CM_A a[4];
  CM_UNROLL for (uint k = 0u; k < 4u; k++)
    if (k < kt) CM_LOAD_ROW(a[k], gs, row0 * HS + 16u * k, HS);
  CM_STAGE64(ws, HS, w, 512u * l, 16u * kt);  // the last reads of ws were before a barrier
  barrier();
  CM_UNROLL for (uint i = 0u; i < 2u; i++) {
    uint nt = 2u * half_ + i;
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
    CM_SCALE(z, LAYER_SCALE(l));
    CM_CLAMP(z, CM_F16_MAX);
    CM_TO_F16(g, z);
    CM_ACC16 m;
    CM_LOAD_ROW(m, hs, row0 * HS + 16u * nt, HS);
    CM_LEAKY_GRAD(g, m, LEAKY_SLOPE);
    CM_STORE_ROW(g, gs, row0 * HS + 16u * nt, HS);
  }
  CM_SYNC();  // this warp's mask loads are done before its restore overwrites them
  [[unroll]] for (uint i = 0u; i < 2u; i++) {
    SCR_E(l - 1u, i, e, s);
    CM_PUT8(hs, s, scr[e]);
  }
  barrier();
}

// the accumulators of layer l <-> cur (constant indices, so they stay in registers)
#define DW_CASE_IN(L) case L: CM_UNROLL for (uint j = 0u; j < NJ; j++) cur[j] = dwacc[L * NJ + j]; break;
#define DW_CASE_OUT(L) case L: CM_UNROLL for (uint j = 0u; j < NJ; j++) dwacc[L * NJ + j] = cur[j]; break;

void main() {
  warp = cm_warp();
  lane = cm_lane();
  half_ = warp % 2u;
  row0 = 16u * (warp / 2u);
  CM_ACC dwacc[6u * NJ + NJ6];
  CM_UNROLL for (uint i = 0u; i < 6u * NJ + NJ6; i++) CM_ZERO(dwacc[i]);
  uint ntiles = (push.N + T - 1u) / T;
  uint t0 = gl_WorkGroupID.x * push.tiles, t1 = min(ntiles, t0 + push.tiles);
  for (uint t = t0; t < t1; t++) {
    p0 = t * T + row0;
    float f[16], g7[G7];
    tile_loads(f, g7);
    barrier();  // the previous tile's dW_0 has read hs and gs
    tile_stores(f, g7);  // h_0, and g_7 (the forward does not touch gs)
    for (uint l = 0u; l < 6u; l++) forward_layer(l);
    barrier();  // h_6 (the last forward layer's stores) and g_7 complete
    for (uint l = 6u; ; l--) {  // gs = g_{l+1}, hs = h_l
      if (l == 6u) {
        // dW_6 (rows 0..N_OUT-1): dK^T h_6, this warp's tiles t = warp + WARPS j < 4 OT
        // at (o, c) = (t div 4, t mod 4)
        CM_UNROLL for (uint j = 0u; j < NJ6; j++) {
          uint t = warp + WARPS * j;
          if (t < 4u * OT) {
            for (uint q = 0u; q < RB; q++) {
              CM_A g;
              CM_LOAD_COL(g, gs, 16u * q * HS + 16u * (t / 4u), HS);
              CM_B h;
              CM_LOAD_ROW(h, hs, 16u * q * HS + 16u * (t % 4u), HS);
              CM_MMA(dwacc[6u * NJ + j], g, h);
            }
          }
        }
      } else {
        CM_ACC cur[NJ];
        switch (l) { DW_CASE_IN(0u) DW_CASE_IN(1u) DW_CASE_IN(2u) DW_CASE_IN(3u) DW_CASE_IN(4u) DW_CASE_IN(5u) }
        dw_hidden(cur);
        switch (l) { DW_CASE_OUT(0u) DW_CASE_OUT(1u) DW_CASE_OUT(2u) DW_CASE_OUT(3u) DW_CASE_OUT(4u) DW_CASE_OUT(5u) }
      }
      if (l == 0u) break;
      back_step(l, l == 6u ? OT : 4u);
    }
  }
  uint out0 = gl_WorkGroupID.x * KPN_NW;
  // dW_l = G'_{l+1}^T H'_l / (scale s f_0 .. f_{l-1} f_{l+1} .. f_6): h'_l = s f_0 .. f_{l-1} h_l
  // and g'_{l+1} = scale f_{l+1} .. f_6 g_{l+1}
  float s = ACTIVATION_SCALE(), prod = s;
  for (uint l = 0u; l < 7u; l++) prod *= LAYER_SCALE(l);
  CM_UNROLL for (uint l = 0u; l < 6u; l++)
    CM_UNROLL for (uint j = 0u; j < NJ; j++) {
      uint t = warp + WARPS * j;
      CM_SCALE(dwacc[l * NJ + j], push.inv_scale * LAYER_SCALE(l) / prod);
      CM_STORE_ROW(dwacc[l * NJ + j], part, out0 + 4096u * l + 1024u * (t % 4u) + 16u * (t / 4u), 64u);
    }
  CM_UNROLL for (uint j = 0u; j < NJ6; j++) {
    uint t = warp + WARPS * j;
    if (t < 4u * OT) {
      CM_SCALE(dwacc[6u * NJ + j], push.inv_scale * LAYER_SCALE(6u) / prod);
      CM_STORE_ROW(dwacc[6u * NJ + j], part, out0 + KPN_LAST + 1024u * (t / 4u) + 16u * (t % 4u), 64u);
    }
  }
}
