#version 460
#extension GL_GOOGLE_include_directive : enable
#include "mlp_coopmat.glsl"
#include "vkgraph.glsl"
#include "layout.gen"  // KPN_NW etc.: the weight layout (modules/kpn-t/forward.py)
#include "kpn.glsl"
// mulw.comp's function with cooperative matrices: the weight gradient is a matrix product
// over pixels, with the pixel as the reduction dimension K:
//   dW_l (64 x 64) = G_{l+1}^T (64 x P) H_l (P x 64)   over the pixels P of one chunk
// G_{l+1} = g_{l+1} (bck_cm's G slot, l < 6) or the scaled dK16 (l = 6, 16 rows of W_6), H_l =
// fwd_cm's h_l, staged MW_P pixels at a time in shared memory by plain copies (see
// CM_PACK8). The A operand G^T is a column-major load of the pixel-major G, B = H a
// row-major one. Workgroup (chunk, layer) of 4 warps: warp w owns output rows 16w..16w+15
// (layer 6: the 16 rows, columns 16w..16w+15) and sums 16 pixels per step in f32.
// Partials: part[chunk * NW + 4096 l + 64 o + c], divided by the loss scale (see
// bck_cm); rows 16..63 of W_6 are never written (zero). reduce.comp sums the chunks.
// Padding rows (p >= N, up to npad) hold zeros in G and dK16 and add nothing. The chunk is
// a multiple of MW_P, npad of 256.
layout(push_constant) uniform Push { uint npad; uint chunk; float inv_scale; } push;
SSBO_IN(0, uvec4, A0)  // f16, 8 per uvec4
SSBO_IN(1, uvec4, A1)
SSBO_IN(2, uvec4, A2)
SSBO_IN(3, uvec4, A3)
SSBO_IN(4, uvec4, A4)
SSBO_IN(5, uvec4, A5)
SSBO_IN(6, uvec4, A6)
SSBO_IN(7, uvec4, G1)
SSBO_IN(8, uvec4, G2)
SSBO_IN(9, uvec4, G3)
SSBO_IN(10, uvec4, G4)
SSBO_IN(11, uvec4, G5)
SSBO_IN(12, uvec4, G6)
SSBO_IN(13, uvec4, dK16)
SSBO_OUT(14, float, part)

#define MW_P 64u  // pixels staged per step (the chunk is a multiple of it)
#define HS 72u
shared float16_t gt[MW_P * HS];  // G_{l+1} of the step's pixels (row = pixel)
shared float16_t ht[MW_P * HS];  // H_l

// stage pixels p .. p + MW_P - 1 of G_{l+1} and H_l (plain copies, see CM_PACK8)
void stage(uint l, uint p) {
  for (uint e = gl_LocalInvocationIndex; e < MW_P * 8u; e += gl_WorkGroupSize.x) {
    uint r = e / 8u, q = e % 8u, i = (p + r) * 8u + q, o = r * HS + 8u * q;
    uvec4 g, h;
    switch (l) {
      case 0u: g = G1[i]; h = A0[i]; break;
      case 1u: g = G2[i]; h = A1[i]; break;
      case 2u: g = G3[i]; h = A2[i]; break;
      case 3u: g = G4[i]; h = A3[i]; break;
      case 4u: g = G5[i]; h = A4[i]; break;
      case 5u: g = G6[i]; h = A5[i]; break;
      default: g = q < 2u ? dK16[(p + r) * 2u + q] : uvec4(0u); h = A6[i]; break;
    }
    CM_UNPACK8(gt, o, g)
    CM_UNPACK8(ht, o, h)
  }
}

void main() {
  uint l = gl_WorkGroupID.y, chunk = gl_WorkGroupID.x, warp = cm_warp();
  uint pbeg = chunk * push.chunk, pend = min(push.npad, pbeg + push.chunk);
  // layer 6: the 16 rows of W_6, this warp's 16 columns; else this warp's 16 rows
  uint ot = l == 6u ? 0u : warp, cts = l == 6u ? 1u : 4u, ct0 = l == 6u ? warp : 0u;
  CM_ACC acc[4];
  CM_UNROLL for (uint ct = 0u; ct < 4u; ct++) CM_ZERO(acc[ct]);
  for (uint p = pbeg; p < pend; p += MW_P) {
    barrier();  // the previous step's tiles are read
    stage(l, p);
    barrier();
    for (uint k = 0u; k < MW_P / 16u; k++) {
      CM_A g;
      CM_LOAD_COL(g, gt, 16u * k * HS + 16u * ot, HS);
      CM_UNROLL for (uint ct = 0u; ct < 4u; ct++) {
        if (ct < cts) {
          CM_B h;
          CM_LOAD_ROW(h, ht, 16u * k * HS + 16u * (ct0 + ct), HS);
          CM_MMA(acc[ct], g, h);
        }
      }
    }
  }
  uint out0 = chunk * KPN_NW + 4096u * l + 1024u * ot;
  CM_UNROLL for (uint ct = 0u; ct < 4u; ct++) {
    if (ct < cts) {
      CM_SCALE(acc[ct], push.inv_scale);
      CM_STORE_ROW(acc[ct], part, out0 + 16u * (ct0 + ct), 64u);
    }
  }
}
