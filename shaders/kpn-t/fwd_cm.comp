#version 460
#extension GL_GOOGLE_include_directive : enable
#ifndef FWD_WARPS
#define FWD_WARPS 2u
#endif
#define CM_EMU_WARPS FWD_WARPS
#define CM_WANT_BLOCKS
#include "mlp_coopmat.glsl"
#include "vkgraph.glsl"
#include "kpn.glsl"
// fwd.comp's function with cooperative matrices (f16 operands and activations, f32 sums):
//   h_0 = f (64 features), h_{l+1} = leaky(W_l h_l) (l = 0..5), K = W_6[0:N_OUT] h_6.
// A workgroup of FWD_WARPS warps takes FWD_TILE pixels, 16 FWD_ROWS per warp. A warp keeps
// its pixels' activations in its own rows of shared memory (row = pixel, 64 columns + pad)
// and never waits for the others. Per layer and 16 pixels: Z (16 x 64) = H (16 x 64) W_l^T
// with H the A operand (from shared memory) and B[k][n] = W_l[n][k], read as packed
// fragments (wpack.comp) straight from global memory (where every warp of an SM reads the
// same 56 KiB, so they stay in cache), four at a time (one per output tile) for each of
// the warp's row blocks.
// Buffers hold npad pixels (a multiple of FWD_TILE, module.py): rows p >= N get zero
// features, hence zero activations and K, and are never read as pixels.
// TRAIN stores h_0..h_6 (f16) for bck_cm/mulw_cm, slot s in its own buffer As at 64p + c
// (one buffer per slot keeps every index below 2^32 at 4096^2), copied from shared memory by
// plain code (see CM_PACK8).
#ifndef FWD_ROWS
#define FWD_ROWS 4u
#endif
#define FWD_TILE (16u * FWD_ROWS * FWD_WARPS)
#define HS 72u  // shared row stride in halves: 64 + 8 against bank conflicts

#ifdef KPN_CTX  // arch 1 and 2: the context planes (and match features) of kpn.glsl
CTX_INPUTS
#else
SSBO_IN(0, float16_t, feat)  // diff's feature plane
#endif
SSBO_IN(1, uvec4, wp)  // packed B fragments (wpack.comp)
SSBO_OUT(2, float, K)
#ifdef TRAIN  // f16 activations, written 8 at a time
SSBO_OUT(3, float16_t, A0)
SSBO_OUT(4, uvec4, A1)
SSBO_OUT(5, uvec4, A2)
SSBO_OUT(6, uvec4, A3)
SSBO_OUT(7, uvec4, A4)
SSBO_OUT(8, uvec4, A5)
SSBO_OUT(9, uvec4, A6)
#endif

#ifdef ASCALE_B  // training: adam's stats, [2] the activation scale (kpn.glsl)
SSBO_IN(ASCALE_B, float, stats)
#endif
#ifdef LSC_B  // the per-layer scales (wscale.comp)
SSBO_IN(LSC_B, float, lsc)
#endif

#ifdef CM_BLOCKS
shared F16 { float16_t hs[FWD_TILE * HS]; };
shared U128 { uvec4 hs8[FWD_TILE * HS / 8u]; };
#else
shared float16_t hs[FWD_TILE * HS];
#endif
#ifdef KPN_CTX
DEFINE_CTX_FEATURE(ctx_feature, ctxf, 0, ctxc, CTXC_B)
DEFINE_CTX_FEATURES(features, ctx_feature, 0, 32)
#else
DEFINE_KPN_FEATURES(features, feat, 0, 4)
#endif

#ifdef TRAIN
// h_s of this warp's rows (in hs) -> buffer As (plain per-invocation copies)
void store_slot(uint s, uint row0, uint p0) {
  for (uint e = cm_lane(); e < FWD_ROWS * 16u * 8u; e += CM_WARP) {
    uint r = e / 8u, q = e % 8u, i = (p0 + r) * 8u + q;
    uvec4 v = CM_GET8(hs, (row0 + r) * (HS / 8u) + q);
    switch (s) {
      case 1u: A1[i] = v; break;
      case 2u: A2[i] = v; break;
      case 3u: A3[i] = v; break;
      case 4u: A4[i] = v; break;
      case 5u: A5[i] = v; break;
      default: A6[i] = v; break;
    }
  }
}
#endif

void main() {
  ivec2 size = node.roi[0].xy;
  uint N = uint(size.x * size.y);
  uint warp = cm_warp(), lane = cm_lane();
  uint row0 = warp * FWD_ROWS * 16u;  // this warp's first row in hs
  uint p0 = gl_WorkGroupID.x * FWD_TILE + row0;  // and its first pixel
  float s = ACTIVATION_SCALE(), c6 = s;  // h_l carries s f_0 .. f_{l-1}: K is divided by c6
  for (uint l = 0u; l < 6u; l++) c6 *= LAYER_SCALE(l);

  for (uint rb = 0u; rb < FWD_ROWS; rb++) {  // lane: half lane % 2 of row 16 rb + lane / 2
    uint r = 16u * rb + lane / 2u, p = p0 + r, c0 = 32u * (lane % 2u);
    float f[32];
    if (p < N) {
      features(p, lane % 2u, f);
      [[unroll]] for (uint j = 0u; j < 32u; j++) f[j] *= s;
    } else {
      [[unroll]] for (uint j = 0u; j < 32u; j++) f[j] = 0.0;
    }
    [[unroll]] for (uint j = 0u; j < 4u; j++)
      CM_PUT8(hs, (row0 + r) * (HS / 8u) + c0 / 8u + j, CM_PACK8(f, 8u * j));
#ifdef TRAIN
    [[unroll]] for (uint j = 0u; j < 32u; j++) A0[p * 64u + c0 + j] = float16_t(f[j]);
#endif
  }
  CM_SYNC();

  for (uint l = 0u; l < 7u; l++) {
    CM_A a[FWD_ROWS][4];
    CM_UNROLL for (uint r = 0u; r < FWD_ROWS; r++)
      CM_UNROLL for (uint k = 0u; k < 4u; k++)
        CM_LOAD_ROW(a[r][k], hs, (row0 + 16u * r) * HS + 16u * k, HS);
    CM_SYNC();  // every lane holds its operands before the rows are overwritten
    // the four output tiles' products interleaved, k outermost: four independent chains of
    // four products each instead of one chain at a time (fwd_cm 0.371 -> 0.299 ms at 1024² on
    // the H100, 43 -> 93 registers)
    if (l < 6u) {
      CM_UNROLL for (uint r = 0u; r < FWD_ROWS; r++) {
        CM_ACC z[4];
        CM_UNROLL for (uint nt = 0u; nt < 4u; nt++) CM_ZERO(z[nt]);
        CM_UNROLL for (uint k = 0u; k < 4u; k++) {
          CM_B b[4];
          CM_UNROLL for (uint nt = 0u; nt < 4u; nt++) CM_UNPACK_B(b[nt], wp, 16u * l + 4u * nt + k);
          CM_UNROLL for (uint nt = 0u; nt < 4u; nt++) CM_MMA(z[nt], a[r][k], b[nt]);
        }
        CM_UNROLL for (uint nt = 0u; nt < 4u; nt++) {
          CM_SCALE(z[nt], LAYER_SCALE(l));
          CM_LEAKY(z[nt], LEAKY_SLOPE);
          CM_ACC16 h;
          CM_TO_F16(h, z[nt]);
          CM_STORE_ROW(h, hs, (row0 + 16u * r) * HS + 16u * nt, HS);
        }
      }
    } else {  // K = W_6[0:N_OUT] h_6, N_OUT / 16 output tiles
      CM_UNROLL for (uint nt = 0u; nt < uint(N_OUT) / 16u; nt++) {
        CM_B b[4];
        CM_UNROLL for (uint k = 0u; k < 4u; k++) CM_UNPACK_B(b[k], wp, 96u + 4u * nt + k);
        CM_UNROLL for (uint r = 0u; r < FWD_ROWS; r++) {
          CM_ACC z;
          CM_ZERO(z);
          CM_UNROLL for (uint k = 0u; k < 4u; k++) CM_MMA(z, a[r][k], b[k]);
          CM_SCALE(z, 1.0 / c6);
          CM_STORE_ROW(z, K, (p0 + 16u * r) * uint(N_OUT) + 16u * nt, uint(N_OUT));
        }
      }
    }
    CM_SYNC();
#ifdef TRAIN
    if (l < 6u) store_slot(l + 1u, row0, p0);
#endif
  }
}
