#version 460
#extension GL_GOOGLE_include_directive : enable
#include "mlp_coopmat.glsl"
#include "vkgraph.glsl"
#include "kpn.glsl"
// mulw.comp's function with cooperative matrices: the weight gradient is a matrix product
// over pixels, with the pixel as the reduction dimension K:
//   dW_l (64 x 64) = G_{l+1}^T (64 x P) H_l (P x 64)   over the pixels P of one chunk
// G_{l+1} = g_{l+1} (bck_cm's G slot, l < 6) or the scaled dK16 (l = 6, 16 rows of W_6), H_l =
// fwd_cm's h_l. The A operand G^T is a column-major load of the pixel-major G, B = H a
// row-major one. Workgroup (chunk, layer) of 4 warps: warp w owns output rows 16w..16w+15
// (layer 6: the 16 rows, columns 16w..16w+15) and sums 16 pixels per step in f32.
// Partials: part[chunk * 28672 + 4096 l + 64 o + c], divided by the loss scale (see
// bck_cm); rows 16..63 of W_6 are never written (zero). reduce.comp sums the chunks.
// Padding rows (p >= N, up to npad) hold zeros in G and dK16 and add nothing.
layout(push_constant) uniform Push { uint npad; uint chunk; float inv_scale; } push;
SSBO_IN(0, float16_t, A0)
SSBO_IN(1, float16_t, A1)
SSBO_IN(2, float16_t, A2)
SSBO_IN(3, float16_t, A3)
SSBO_IN(4, float16_t, A4)
SSBO_IN(5, float16_t, A5)
SSBO_IN(6, float16_t, A6)
SSBO_IN(7, float16_t, G1)
SSBO_IN(8, float16_t, G2)
SSBO_IN(9, float16_t, G3)
SSBO_IN(10, float16_t, G4)
SSBO_IN(11, float16_t, G5)
SSBO_IN(12, float16_t, G6)
SSBO_IN(13, float16_t, dK16)
SSBO_OUT(14, float, part)

// operand loads by layer (uniform switches: one code path for all layers)
#define LOAD_G(m, l, off)                            \
  switch (l) {                                       \
    case 0u: CM_LOAD_COL(m, G1, off, 64u); break;    \
    case 1u: CM_LOAD_COL(m, G2, off, 64u); break;    \
    case 2u: CM_LOAD_COL(m, G3, off, 64u); break;    \
    case 3u: CM_LOAD_COL(m, G4, off, 64u); break;    \
    case 4u: CM_LOAD_COL(m, G5, off, 64u); break;    \
    default: CM_LOAD_COL(m, G6, off, 64u); break;    \
  }
#define LOAD_H(m, l, off)                            \
  switch (l) {                                       \
    case 0u: CM_LOAD_ROW(m, A0, off, 64u); break;    \
    case 1u: CM_LOAD_ROW(m, A1, off, 64u); break;    \
    case 2u: CM_LOAD_ROW(m, A2, off, 64u); break;    \
    case 3u: CM_LOAD_ROW(m, A3, off, 64u); break;    \
    case 4u: CM_LOAD_ROW(m, A4, off, 64u); break;    \
    case 5u: CM_LOAD_ROW(m, A5, off, 64u); break;    \
    default: CM_LOAD_ROW(m, A6, off, 64u); break;    \
  }

void main() {
  uint l = gl_WorkGroupID.y, chunk = gl_WorkGroupID.x, warp = cm_warp();
  uint pbeg = chunk * push.chunk, pend = min(push.npad, pbeg + push.chunk);
  // layer 6: the 16 rows of W_6, this warp's 16 columns; else this warp's 16 rows
  uint ot = l == 6u ? 0u : warp, cts = l == 6u ? 1u : 4u, ct0 = l == 6u ? warp : 0u;
  CM_ACC acc[4];
  CM_UNROLL for (uint ct = 0u; ct < 4u; ct++) CM_ZERO(acc[ct]);
  for (uint p = pbeg; p < pend; p += 16u) {
    CM_A g;
    if (l == 6u) {
      CM_LOAD_COL(g, dK16, p * 16u, 16u);
    } else {
      LOAD_G(g, l, p * 64u + 16u * ot)
    }
    CM_UNROLL for (uint ct = 0u; ct < 4u; ct++) {
      if (ct >= cts) break;
      CM_B h;
      LOAD_H(h, l, p * 64u + 16u * (ct0 + ct))
      CM_MMA(acc[ct], g, h);
    }
  }
  uint out0 = chunk * 28672u + 4096u * l + 1024u * ot;
  CM_UNROLL for (uint ct = 0u; ct < 4u; ct++) {
    if (ct >= cts) break;
    CM_SCALE(acc[ct], push.inv_scale);
    CM_STORE_ROW(acc[ct], part, out0 + 16u * (ct0 + ct), 64u);
  }
}
