#version 460
#extension GL_GOOGLE_include_directive : enable
#include "mlp_coopmat.glsl"
#include "vkgraph.glsl"
#include "kpn.glsl"
// bck.comp's function with cooperative matrices, on fwd_cm's stored f16 activations:
//   g_6 = leaky'(h_6) * (W_6[0:16]^T dK),  g_l = leaky'(h_l) * (W_l^T g_{l+1})  (l = 5..1)
// Per 16 pixels, as rows: dH (16 x 64) = G_{l+1} (16 x 64, or 16 x 16 for dK) W_l, with
// B[k][n] = W_l[k][n] a row-major load of the weights. The mask leaky'(h_l) multiplies
// element by element with h_l loaded as the same f16 accumulator type as the product.
// Loss scale: dK is multiplied by `scale` (module.py: the level's pixel count / 16; dE/dK of
// the mean loss is ~1/N_0 per pixel, too small for f16) before it becomes f16; g_l and dK16
// keep the scale, mulw_cm divides it out of the f32 weight gradient. Values past f16's range
// saturate at +-65504 (NaN stays NaN, so a non-finite gradient still skips the update).
// Outputs: G_l (g_l, f16, at 64p + c) for l = 1..6 and dK16 (scaled f16 dK, at 16p + o);
// pixel rows p >= N (padding) get exact zeros. Activations come in and gradients go out
// through shared memory by plain copies (see CM_PACK8).
#define BCK_WARPS 2u
#ifndef BCK_ROWS
#define BCK_ROWS 4u
#endif
#define BCK_TILE (16u * BCK_ROWS * BCK_WARPS)
#define HS 72u

layout(push_constant) uniform Push { uint N; float scale; } push;
SSBO_IN(0, float16_t, w)
SSBO_IN(1, float, dK)
SSBO_IN(2, uvec4, A1)  // f16 activations and gradients, 8 per uvec4
SSBO_IN(3, uvec4, A2)
SSBO_IN(4, uvec4, A3)
SSBO_IN(5, uvec4, A4)
SSBO_IN(6, uvec4, A5)
SSBO_IN(7, uvec4, A6)
SSBO_OUT(8, uvec4, G1)
SSBO_OUT(9, uvec4, G2)
SSBO_OUT(10, uvec4, G3)
SSBO_OUT(11, uvec4, G4)
SSBO_OUT(12, uvec4, G5)
SSBO_OUT(13, uvec4, G6)
SSBO_OUT(14, float16_t, dK16)

shared float16_t gs[BCK_TILE * HS];  // g_{l+1}, then g_l, of each warp's rows
shared float16_t hm[BCK_TILE * HS];  // h_l of each warp's rows (the mask)

uint row0, p0;

// h_l of this warp's rows -> hm; g_l of this warp's rows (in gs) -> G_l. Plain copies, 8
// halves at a time (see CM_PACK8).
void load_h(uint l) {
  for (uint e = cm_lane(); e < BCK_ROWS * 16u * 8u; e += CM_WARP) {
    uint r = e / 8u, q = e % 8u, i = (p0 + r) * 8u + q;
    uvec4 v;
    switch (l) {
      case 1u: v = A1[i]; break;
      case 2u: v = A2[i]; break;
      case 3u: v = A3[i]; break;
      case 4u: v = A4[i]; break;
      case 5u: v = A5[i]; break;
      default: v = A6[i]; break;
    }
    CM_UNPACK8(hm, (row0 + r) * HS + 8u * q, v)
  }
}

void store_g(uint l) {
  for (uint e = cm_lane(); e < BCK_ROWS * 16u * 8u; e += CM_WARP) {
    uint r = e / 8u, q = e % 8u, i = (p0 + r) * 8u + q;
    uvec4 v = CM_PACK8(gs, (row0 + r) * HS + 8u * q);
    switch (l) {
      case 1u: G1[i] = v; break;
      case 2u: G2[i] = v; break;
      case 3u: G3[i] = v; break;
      case 4u: G4[i] = v; break;
      case 5u: G5[i] = v; break;
      default: G6[i] = v; break;
    }
  }
}

// g_l for this warp's rows: gs holds g_{l+1} (kt column tiles of 16: 1 for dK, else 4); on
// return it holds g_l, and G_l has it too
void back_layer(uint l, uint kt) {
  load_h(l);
  CM_A a[BCK_ROWS][4];
  CM_UNROLL for (uint r = 0u; r < BCK_ROWS; r++)
    CM_UNROLL for (uint k = 0u; k < 4u; k++)
      if (k < kt) CM_LOAD_ROW(a[r][k], gs, (row0 + 16u * r) * HS + 16u * k, HS);
  CM_SYNC();  // operands loaded before gs is overwritten; hm complete
  for (uint nt = 0u; nt < 4u; nt++) {
    CM_B b[4];
    CM_UNROLL for (uint k = 0u; k < 4u; k++)
      if (k < kt) CM_LOAD_ROW(b[k], w, 4096u * l + 1024u * k + 16u * nt, 64u);
    CM_UNROLL for (uint r = 0u; r < BCK_ROWS; r++) {
      // the mask is loaded before the product: loaded after it, NVIDIA's driver 580 crashes
      // in vkCreateComputePipelines (segfault; found by bisecting the kernel on the H100)
      uint off = (row0 + 16u * r) * HS + 16u * nt;
      CM_ACC16 h;
      CM_LOAD_ROW(h, hm, off, HS);
      CM_ACC z;
      CM_ZERO(z);
      CM_UNROLL for (uint k = 0u; k < 4u; k++)
        if (k < kt) CM_MMA(z, a[r][k], b[k]);
      CM_ACC16 g;
      CM_CLAMP(z, CM_F16_MAX);
      CM_TO_F16(g, z);
      CM_LEAKY_GRAD(g, h, LEAKY_SLOPE);
      CM_STORE_ROW(g, gs, off, HS);
    }
  }
  CM_SYNC();
  store_g(l);
}

void main() {
  uint lane = cm_lane();
  row0 = cm_warp() * BCK_ROWS * 16u;
  p0 = gl_WorkGroupID.x * BCK_TILE + row0;
  for (uint e = lane; e < BCK_ROWS * 16u * 16u; e += CM_WARP) {
    uint r = e / 16u, o = e % 16u, p = p0 + r;
    float16_t v = float16_t(cm_clamp(p < push.N ? dK[p * 16u + o] * push.scale : 0.0, CM_F16_MAX));
    gs[(row0 + r) * HS + o] = v;
    dK16[p * 16u + o] = v;
  }
  CM_SYNC();
  for (uint l = 6u; l >= 1u; l--) back_layer(l, l == 6u ? 1u : 4u);
}
