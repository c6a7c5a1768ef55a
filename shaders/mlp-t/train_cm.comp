#version 460
#extension GL_GOOGLE_include_directive : enable
#ifndef WARPS
#define WARPS 8u  // 16-sample row blocks per chunk (one per warp): T = 16 WARPS samples
#endif
#define CM_EMU_WARPS WARPS
#define LEAKY_SLOPE 0.01  // as config.glsl (mlp_coopmat.glsl would default to 0.001)
#include "mlp_coopmat.glsl"
#include "vkgraph.glsl"
#include "rng.glsl"
#include "params.gen"  // the params block, generated from modules/mlp-t/params
// One fused training step of mlp-t on cooperative matrices (16x16 tiles, f16 operands, f32
// sums): one dispatch does the sampling, the encoding, the forward, the loss, the backward
// and the weight gradient; norm/adam/reduce stay the portable kernels. Workgroup (x, n)
// trains net n on the chunks x, x + G, x + 2G, ... (G = gl_NumWorkGroups.x) of T = 16 WARPS
// samples each; warp w owns rows 16 w .. 16 w + 15 of a chunk (sample i = chunk T + 16 w + r,
// the same rng draws, positions and targets as train.comp). With W = MLP_WIDTH, NT = W / 16:
//   h_0 = enc(uv) (N_IN columns, zero padded to W; MLP_BIAS: column W-1 is 1), f16
//   z_{l+1} = h_l W_l^T (f32 accumulators), h_{l+1} = act(z_{l+1}) as f16, l < L-1
//   y = out_act(z_L) in f32 (only output tile 0: N_OUT <= 4)
//   g_L = s dl/dy * out_act'(y) per sample (columns < N_OUT of valid samples, else 0)
//   g_l = act'(h_l) * (g_{l+1} W_l)   (columns >= HIDDEN: 0), as f16
//   dW_l += g_{l+1}^T h_l, summed over all the workgroup's chunks in f32 fragments
// s = stats[2], the dynamic loss scale (adam grows and halves it), carried per sample: the
// mean's 1/(B K) is applied to the f32 partials, so the f16 range of g does not depend on the
// batch. An f16 overflow (s too large) becomes inf -> a non-finite dw -> adam skips the step
// and halves s; nothing saturates silently. Out: part[x NW + n NET_W + ...] = dW / (s B K)
// (reduce sums the G partials without dividing) and Epart[n G + x] = the loss sum / (B K).
//
// Work split. Forward, loss and backward: each warp its own 16 rows (no barriers; CM_SYNC
// orders a warp's in-place shared-memory rewrites). Weight gradient: the NTILES output tiles
// of all layers (NT x NT per hidden matrix, 1 x NT for the last: its rows >= 16 are unused)
// are dealt round-robin over the warps, tile t = w + WARPS j; each warp keeps its NACC
// accumulators in registers over every chunk and writes them once. Its K loop runs over the
// chunk's WARPS row blocks, so layer l's step needs g_{l+1} and h_l of all rows in shared
// memory: two workgroup barriers per layer and chunk (before the products, before the
// in-place rewrite). h_0 .. h_{L-1} of the warp's rows wait in registers (CM_ACC16) between
// forward and backward. Element-wise maths that needs a position (the encoding, the loss)
// runs on shared memory, per lane over the warp's rows, and so do the padding columns
// (only those: 16 (W - HIDDEN) elements a warp). act'(h_l) of the backward is applied in
// registers: h_l is in hk as CM_ACC16, g converted to CM_ACC16 has the same element layout.
// (Measured on the H100, fit-image: train_cm 0.684 -> 0.642 ms. Mask fragments for the
// padding columns instead, loaded from shared memory, crash the driver's pipeline compiler.)
// Weights: fragments load straight from the f16 copy w16 that adam writes (8 KiB a 64-wide
// layer, shared by all warps through the L1 cache), so no barrier stages them.
// Shared memory (halves, HS = W + 8 row stride): hs, gs T x HS each, ys T x 16 floats (y, then
// uv and the loss partials), st T vec4 (targets). W = 64, WARPS 8: 2 x 18 KiB + 8 + 2 KiB =
// 46 KiB. Registers: L NT f16 fragments (h) + NACC f32 fragments (dW).
layout(push_constant) uniform Push { int batch; int chunks; } push;
IMG_IN(0, target)
SSBO_IN(1, float16_t, w16)
SSBO_IN(2, float, stats)
SSBO_OUT(3, float, part)
SSBO_OUT(4, vec2, Epart)
#define NET_HELPERS_ONLY
#define MLP_W(i) 0.0
#include "net.glsl"
#include "loss.glsl"

#define NT (MLP_WIDTH / 16)
#define T (16u * WARPS)
#define HS uint(MLP_WIDTH + 8)
#define NTILES ((MLP_LAYERS - 1) * NT * NT + NT)
#define NACC ((NTILES + int(WARPS) - 1) / int(WARPS))

// |x| > 65504 -> inf before a conversion to f16, so an overflow can never saturate silently
// (whatever the device's conversion does out of range); NaN stays NaN
float to_f16_range(float x) { return abs(x) > CM_F16_MAX ? x * uintBitsToFloat(0x7f800000u) : x; }
#define CM_INF_OVERFLOW(c) \
  CM_UNROLL for (int i_ = 0; i_ < CM_LENGTH(c); i_++) CM_AT(c, i_) = to_f16_range(CM_AT(c, i_))


shared float16_t hs[T * HS];
shared float16_t gs[T * HS];
shared float ys[T * 16u];
shared vec4 st[T];

uint warp, lane, row0;

// B operands of layer l from w16: forward B(k, n) = W_l[n][k] (column-major), backward
// B(k, n) = W_l[k][n] (row-major); tile (kt, nt)
#define W_OFF(l, kt, nt) (woff + uint(l) * uint(MLP_WIDTH * MLP_WIDTH) + 16u * (uint(kt) * uint(MLP_WIDTH) + uint(nt)))

// columns of a hidden h that are not neurons: zero, or 1 for the bias input (the warp's rows
// of hs; the encoding writes h_0's padding itself)
// (only columns HIDDEN .. W-1: 16 (W - HIDDEN) elements a warp)
#define NPAD uint(MLP_WIDTH - HIDDEN)
void fix_padding() {
#if MLP_WIDTH > HIDDEN
  CM_SYNC();
  for (uint e = lane; e < 16u * NPAD; e += CM_WARP) {
    uint r = e / NPAD, c = uint(HIDDEN) + e % NPAD;
    float v = 0.0;
#ifdef MLP_BIAS
    if (c == uint(MLP_WIDTH - 1)) v = 1.0;
#endif
    hs[(row0 + r) * HS + c] = float16_t(v);
  }
  CM_SYNC();
#endif
}

void main() {
  warp = cm_warp();
  lane = cm_lane();
  row0 = 16u * warp;
  int n = int(gl_WorkGroupID.y);
  uint woff = uint(n) * uint(NET_W);
  float s = stats[2] > 0.0 ? stats[2] : params.lscale;  // frame 0 runs before adam's first write
  float inv_bk = 1.0 / float(push.batch * N_OUT);
  float esum = 0.0;
  CM_ACC acc[NACC];
  CM_UNROLL for (int j = 0; j < NACC; j++) CM_ZERO(acc[j]);
  CM_ACC16 hk[MLP_LAYERS * NT];  // h_l of the warp's rows, kept for the backward
#ifdef CM_EMULATE
  CM_ACC dummy;
#endif
  for (int ch = int(gl_WorkGroupID.x); ch < push.chunks; ch += int(gl_NumWorkGroups.x)) {
    int i0 = ch * int(T) + int(row0);  // first sample of the warp's rows
    barrier();  // the previous chunk's weight gradient has read hs and gs
    // samples: lane r < 16 draws row r (as train.comp), uv to ys, target to st
    if (lane < 16u) {
      int i = i0 + int(lane);
      uint f = params.resample != 0 ? uint(global.frame) : 0u;
      POS uv = sample_pos(n, i, f, push.batch);
      for (int d = 0; d < DIMS; d++) ys[(row0 + lane) * 16u + uint(d)] = uv[d];
      st[row0 + lane] = fetch_target(n, uv);
    }
    CM_SYNC();
    for (uint e = lane; e < 16u * uint(MLP_WIDTH); e += CM_WARP) {
      uint r = e / uint(MLP_WIDTH), c = e % uint(MLP_WIDTH);
      POS uv;
      for (int d = 0; d < DIMS; d++) uv[d] = ys[(row0 + r) * 16u + uint(d)];
      float v = c < uint(N_IN) ? encode(uv, int(c)) : 0.0;
#ifdef MLP_BIAS
      if (c == uint(MLP_WIDTH - 1)) v = 1.0;
#endif
      hs[(row0 + r) * HS + c] = float16_t(v);
    }
    CM_SYNC();
    // forward: hs rows of this warp h_l -> h_{l+1}; h_l kept in hk
    CM_UNROLL for (int l = 0; l < MLP_LAYERS; l++) {
      CM_A a[NT];
      CM_UNROLL for (int k = 0; k < NT; k++) {
        CM_LOAD_ROW(a[k], hs, row0 * HS + 16u * uint(k), HS);
        CM_LOAD_ROW(hk[l * NT + k], hs, row0 * HS + 16u * uint(k), HS);
      }
      CM_SYNC();  // the warp's operands are read before its rows are overwritten
      if (l < MLP_LAYERS - 1) {
        CM_UNROLL for (int nt = 0; nt < NT; nt++) {
          CM_ACC z;
          CM_ZERO(z);
          CM_UNROLL for (int k = 0; k < NT; k++) {
            CM_B b;
            CM_LOAD_COL(b, w16, W_OFF(l, nt, k), MLP_WIDTH);
            CM_MMA(z, a[k], b);
          }
          CM_UNROLL for (int i_ = 0; i_ < CM_LENGTH(z); i_++)
            CM_AT(z, i_) = mlp_activate(CM_AT(z, i_), ACT);
          CM_INF_OVERFLOW(z);
          CM_ACC16 h;
          CM_TO_F16(h, z);
          CM_STORE_ROW(h, hs, row0 * HS + 16u * uint(nt), HS);
        }
        fix_padding();
        CM_SYNC();
      } else {  // the output tile: y in f32
        CM_ACC z;
        CM_ZERO(z);
        CM_UNROLL for (int k = 0; k < NT; k++) {
          CM_B b;
          CM_LOAD_COL(b, w16, W_OFF(l, 0, k), MLP_WIDTH);
          CM_MMA(z, a[k], b);
        }
        CM_UNROLL for (int i_ = 0; i_ < CM_LENGTH(z); i_++)
          CM_AT(z, i_) = mlp_activate(CM_AT(z, i_), OUT_ACT);
        CM_STORE_ROW(z, ys, row0 * 16u, 16u);
      }
    }
    CM_SYNC();
    // loss and g_L = s dl/dy out_act'(y) into columns 0..15 of gs (the warp's rows)
    for (uint e = lane; e < 256u; e += CM_WARP) {
      uint r = e / 16u, c = e % 16u;
      float g = 0.0;
      if (c < uint(N_OUT) && i0 + int(r) < push.batch) {
        float y = ys[(row0 + r) * 16u + c], t = st[row0 + r][c];
        esum += loss_value(y, t);
        g = s * loss_grad(y, t) * mlp_activate_grad(y, OUT_ACT);
      }
      gs[(row0 + r) * HS + c] = float16_t(to_f16_range(g));  // overflow: inf, step skipped
    }
    // backward: gs = g_{l+1} (kt column tiles), hs = h_l (restored from hk)
    CM_UNROLL for (int l = MLP_LAYERS - 1; l >= 0; l--) {
      int kt = l == MLP_LAYERS - 1 ? 1 : NT;
      CM_SYNC();  // the warp's reads of h_{l+1} (act') are done before h_l overwrites it
      CM_UNROLL for (int k = 0; k < NT; k++)
        CM_STORE_ROW(hk[l * NT + k], hs, row0 * HS + 16u * uint(k), HS);
      barrier();  // g_{l+1} and h_l of all rows
      // dW_l += g_{l+1}^T h_l: this warp's tiles of layer l, K over the chunk's row blocks
      CM_UNROLL for (int j = 0; j < NACC; j++) {
        int t = int(warp) + int(WARPS) * j;
        int tl = t / (NT * NT), o = (t % (NT * NT)) / NT, c = t % NT;
        if (t >= (MLP_LAYERS - 1) * NT * NT) { tl = MLP_LAYERS - 1; o = 0; c = t - (MLP_LAYERS - 1) * NT * NT; }
        bool mine = t < NTILES && tl == l;
#ifdef CM_EMULATE  // every emulated product is reached by the whole workgroup
        o = mine ? o : 0;
        c = mine ? c % NT : 0;
        for (uint q = 0u; q < WARPS; q++) {
          CM_A ga;
          CM_B hb;
          CM_LOAD_COL(ga, gs, 16u * q * HS + 16u * uint(o), HS);
          CM_LOAD_ROW(hb, hs, 16u * q * HS + 16u * uint(c), HS);
          if (mine) CM_MMA(acc[j], ga, hb);
          else CM_MMA(dummy, ga, hb);
        }
#else
        if (mine) {
          for (uint q = 0u; q < WARPS; q++) {
            CM_A ga;
            CM_B hb;
            CM_LOAD_COL(ga, gs, 16u * q * HS + 16u * uint(o), HS);
            CM_LOAD_ROW(hb, hs, 16u * q * HS + 16u * uint(c), HS);
            CM_MMA(acc[j], ga, hb);
          }
        }
#endif
      }
      if (l == 0) break;
      barrier();  // every warp is done with gs and hs before they are rewritten
      // g_l = act'(h_l) * (g_{l+1} W_l) for this warp's rows, in place in gs
      CM_A a[NT];
      CM_UNROLL for (int k = 0; k < NT; k++)
        if (k < kt) CM_LOAD_ROW(a[k], gs, row0 * HS + 16u * uint(k), HS);
      CM_SYNC();
      CM_UNROLL for (int nt = 0; nt < NT; nt++) {
        CM_ACC z;
        CM_ZERO(z);
        CM_UNROLL for (int k = 0; k < NT; k++) {
          if (k < kt) {
            CM_B b;
            CM_LOAD_ROW(b, w16, W_OFF(l, k, nt), MLP_WIDTH);
            CM_MMA(z, a[k], b);
          }
        }
        CM_ACC16 g;
        CM_INF_OVERFLOW(z);
        CM_TO_F16(g, z);
        // act'(h_l) from hk (the same fragment type as g: the same element layout)
        CM_UNROLL for (int i_ = 0; i_ < CM_LENGTH(g); i_++)
          CM_AT(g, i_) = float16_t(to_f16_range(
              float(CM_AT(g, i_)) * mlp_activate_grad(float(CM_AT(hk[l * NT + nt], i_)), ACT)));
        CM_STORE_ROW(g, gs, row0 * HS + 16u * uint(nt), HS);
      }
#if MLP_WIDTH > HIDDEN  // padding columns: g * 0 (an overflow stays NaN, so the step is skipped)
      CM_SYNC();
      for (uint e = lane; e < 16u * NPAD; e += CM_WARP) {
        uint at = (row0 + e / NPAD) * HS + uint(HIDDEN) + e % NPAD;
        gs[at] = float16_t(float(gs[at]) * 0.0);
      }
#endif
    }
  }
  // the partials: dW / (s B K); tiles nobody owns (rows >= 16 of the last matrix) are 0
  float k = inv_bk / s;
  uint base = gl_WorkGroupID.x * uint(NW) + woff;
  CM_UNROLL for (int j = 0; j < NACC; j++) {
    int t = int(warp) + int(WARPS) * j;
    int tl = t / (NT * NT), o = (t % (NT * NT)) / NT, c = t % NT;
    if (t >= (MLP_LAYERS - 1) * NT * NT) { tl = MLP_LAYERS - 1; o = 0; c = t - (MLP_LAYERS - 1) * NT * NT; }
    if (t < NTILES) {
      CM_SCALE(acc[j], k);
      CM_STORE_ROW(acc[j], part, base + uint(tl * MLP_WIDTH * MLP_WIDTH) + 16u * uint(o * MLP_WIDTH + c), MLP_WIDTH);
    }
  }
  uint last = base + uint((MLP_LAYERS - 1) * MLP_WIDTH * MLP_WIDTH);
  for (uint e = gl_LocalInvocationIndex + 16u * uint(MLP_WIDTH); e < uint(MLP_WIDTH * MLP_WIDTH); e += gl_WorkGroupSize.x)
    part[last + e] = 0.0;
  // the loss partial: lane sums in a fixed order
  barrier();
  ys[gl_LocalInvocationIndex] = esum;
  barrier();
  if (gl_LocalInvocationIndex == 0u) {
    float sum = 0.0;
    for (uint i = 0u; i < T * 2u; i++) sum += ys[i];
    Epart[n * int(gl_NumWorkGroups.x) + int(gl_WorkGroupID.x)] = vec2(sum * inv_bk, 0.0);
  }
}
