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
// Loss scale: dK is multiplied by `scale` (the level-0 pixel count: dE/dO carries 1/N_0 of
// the mean, and f16 would lose such small values) before it becomes f16; g_l and dK16 keep
// the scale, mulw_cm divides it out of the f32 weight gradient.
// Outputs: G_l (g_l, f16, at 64p + c) for l = 1..6 and dK16 (scaled f16 dK, at 16p + o);
// pixel rows p >= N (padding) get exact zeros.
#define BCK_WARPS 2u
#ifndef BCK_ROWS
#define BCK_ROWS 4u
#endif
#define BCK_TILE (16u * BCK_ROWS * BCK_WARPS)
#define HS 72u

layout(push_constant) uniform Push { uint N; float scale; } push;
SSBO_IN(0, float16_t, w)
SSBO_IN(1, float, dK)
SSBO_IN(2, float16_t, A1)
SSBO_IN(3, float16_t, A2)
SSBO_IN(4, float16_t, A3)
SSBO_IN(5, float16_t, A4)
SSBO_IN(6, float16_t, A5)
SSBO_IN(7, float16_t, A6)
SSBO_OUT(8, float16_t, G1)
SSBO_OUT(9, float16_t, G2)
SSBO_OUT(10, float16_t, G3)
SSBO_OUT(11, float16_t, G4)
SSBO_OUT(12, float16_t, G5)
SSBO_OUT(13, float16_t, G6)
SSBO_OUT(14, float16_t, dK16)

shared float16_t gs[BCK_TILE * HS];

uint row0, p0;

// h_l (l = 1..6) and g_l stores, by layer (uniform switches: one code path for all layers)
#define LOAD_H(m, l, off)                           \
  switch (l) {                                      \
    case 1u: CM_LOAD_ROW(m, A1, off, 64u); break;   \
    case 2u: CM_LOAD_ROW(m, A2, off, 64u); break;   \
    case 3u: CM_LOAD_ROW(m, A3, off, 64u); break;   \
    case 4u: CM_LOAD_ROW(m, A4, off, 64u); break;   \
    case 5u: CM_LOAD_ROW(m, A5, off, 64u); break;   \
    default: CM_LOAD_ROW(m, A6, off, 64u); break;   \
  }
#define STORE_G(m, l, off)                          \
  switch (l) {                                      \
    case 1u: CM_STORE_ROW(m, G1, off, 64u); break;  \
    case 2u: CM_STORE_ROW(m, G2, off, 64u); break;  \
    case 3u: CM_STORE_ROW(m, G3, off, 64u); break;  \
    case 4u: CM_STORE_ROW(m, G4, off, 64u); break;  \
    case 5u: CM_STORE_ROW(m, G5, off, 64u); break;  \
    default: CM_STORE_ROW(m, G6, off, 64u); break;  \
  }

// g_l for this warp's rows: gs holds g_{l+1} (kt column tiles of 16: 1 for dK, else 4); on
// return it holds g_l
void back_layer(uint l, uint kt) {
  CM_A a[BCK_ROWS][4];
  CM_UNROLL for (uint r = 0u; r < BCK_ROWS; r++)
    CM_UNROLL for (uint k = 0u; k < 4u; k++)
      if (k < kt) CM_LOAD_ROW(a[r][k], gs, (row0 + 16u * r) * HS + 16u * k, HS);
  CM_SYNC();
  for (uint nt = 0u; nt < 4u; nt++) {
    CM_B b[4];
    CM_UNROLL for (uint k = 0u; k < 4u; k++)
      if (k < kt) CM_LOAD_ROW(b[k], w, 4096u * l + 1024u * k + 16u * nt, 64u);
    CM_UNROLL for (uint r = 0u; r < BCK_ROWS; r++) {
      CM_ACC z;
      CM_ZERO(z);
      CM_UNROLL for (uint k = 0u; k < 4u; k++)
        if (k < kt) CM_MMA(z, a[r][k], b[k]);
      CM_ACC16 g, h;
      CM_TO_F16(g, z);
      uint off = (p0 + 16u * r) * 64u + 16u * nt;
      LOAD_H(h, l, off)
      CM_LEAKY_GRAD(g, h, LEAKY_SLOPE);
      CM_STORE_ROW(g, gs, (row0 + 16u * r) * HS + 16u * nt, HS);
      STORE_G(g, l, off)
    }
  }
  CM_SYNC();
}

void main() {
  uint warp = cm_warp(), lane = cm_lane();
  row0 = warp * BCK_ROWS * 16u;
  p0 = gl_WorkGroupID.x * BCK_TILE + row0;
  for (uint e = lane; e < BCK_ROWS * 16u * 16u; e += CM_WARP) {
    uint r = e / 16u, o = e % 16u, p = p0 + r;
    float16_t v = float16_t(p < push.N ? dK[p * 16u + o] * push.scale : 0.0);
    gs[(row0 + r) * HS + o] = v;
    dK16[p * 16u + o] = v;
  }
  CM_SYNC();
  for (uint l = 6u; l >= 1u; l--) back_layer(l, l == 6u ? 1u : 4u);
}
