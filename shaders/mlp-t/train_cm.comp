#version 460
#extension GL_GOOGLE_include_directive : enable
#ifndef WARPS
#define WARPS 8u  // 16-sample row blocks per chunk (one per warp): T = 16 WARPS samples
#endif
#define CM_EMU_WARPS WARPS
#define LEAKY_SLOPE 0.01  // as config.glsl (mlp_coopmat.glsl would default to 0.001)
#define CM_WANT_BLOCKS
#include "mlp_coopmat.glsl"
#if ENC >= 3
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_shader_atomic_int64 : require
#endif
#include "vkgraph.glsl"
#include "rng.glsl"
#include "params.gen"  // the params block, generated from modules/mlp-t/params
// One fused training step of mlp-t on cooperative matrices (16x16 tiles, f16 operands, f32
// sums): one dispatch does the sampling, the encoding, the forward, the loss, the backward
// and the weight gradient; norm/adam/reduce stay the portable kernels. Workgroup (x, n)
// trains net n on the chunks x, x + G, x + 2G, ... (G = gl_NumWorkGroups.x) of T = 16 WARPS
// samples each; warp w owns rows 16 w .. 16 w + 15 of a chunk (sample i = chunk T + 16 w + r,
// the same rng draws, positions and targets as train.comp). With W = MLP_WIDTH, NT = W / 16:
//   h_0 = enc(uv) (N_IN columns, zero padded to K0 tiles; MLP_BIAS: column W-1 is 1), f16
//   z_{l+1} = h_l W_l^T (f32 accumulators), h_{l+1} = act(z_{l+1}) as f16, l < L-1
//   y = out_act(z_L) in f32 (only output tile 0: N_OUT <= 4)
//   g_L = s dl/dy * out_act'(y) per sample (columns < N_OUT of valid samples, else 0)
//   g_l = act'(h_l) * (g_{l+1} W_l)   (columns >= HIDDEN: 0), as f16
//   dW_l += g_{l+1}^T h_l, summed over all the workgroup's chunks in f32 fragments
// s = stats[2], the dynamic loss scale (adam grows and halves it), carried per sample: the
// mean's 1/(B K) is applied to the f32 partials, so the f16 range of g does not depend on the
// batch. An f16 overflow (s too large) becomes inf -> a non-finite dw -> adam skips the step
// and halves s; nothing saturates silently (|y| > 65504 does the same). Out: part[x NW +
// n NET_W + ...] = dW / (s B K) (reduce sums the G partials without dividing) and
// Epart[n G + x] = the loss sum / (B K).
// Table encodings (ENC 3, 4): h_0 interpolates the fp32 table (after the weights in adam's
// w), and the backward goes on through layer 0: d_0 = g_1 W_0 (s dl/dh_0, f16, columns <
// N_IN), scattered as train.comp does (dE/dT_e += w_k d_0 / (s B K), 64-bit fixed point
// T_FIX, integer atomics into tacc; a non-finite d_0 counts in tacc[TABLE], so the step is
// skipped and the scale halved). reduce turns tacc into the table's dw.
//
// Work split. Forward, loss and backward: each warp its own 16 rows (CM_SYNC orders a warp's
// in-place shared-memory rewrites). Layer 0 only multiplies the K0 = ceil(N_IN / 16) column
// tiles that hold inputs (all NT with MLP_BIAS), the last layer only its first row tile.
// Weight gradient: the NTILES output tiles of all layers (K0 x NT for layer 0, NT x NT per
// hidden matrix, NT for the last) are dealt round-robin over the warps, tile t = w + WARPS j;
// each warp keeps its NACC accumulators in registers over every chunk and writes them once.
// Its K loop runs over the chunk's WARPS row blocks, so layer l's step needs g_{l+1} and h_l
// of all rows in shared memory: two workgroup barriers per layer and chunk (before the
// products, before the in-place rewrite). h_0 .. h_{L-1} of the warp's rows wait in registers
// (CM_ACC16) between forward and backward; act'(h_l) of the backward is applied in registers
// (g converted to CM_ACC16 has the same element layout). The encoding and the loss run per
// lane: lanes r and r + 16 hold row r.
// Weights: staged from the f16 copy adam writes (w16) into shared memory with wide loads,
// once per chunk for all warps: the forward's copies in the g and backward-weight areas
// (free during the forward), as many layers at a time as fit (one barrier per group), the
// backward's W_l in its own area between the two barriers of layer l. (Measured on the H100,
// fit-image at batch 2^18: fragments loaded straight from w16 through L1 made train_cm 0.65
// ms, staged 0.24. A weight-gradient loop interleaving a warp's tiles of one layer measured
// 0.37, staging fetched into registers ahead 0.52: not kept; bench/README.md.)
// Shared memory (halves, HS = W + 8 row stride, >= 40 so that a row holds y as two f16 tiles,
// hi + lo): hs, gs T x HS each, ws W x HS, plus 32 WARPS floats (the loss sums). W = 64,
// WARPS 8: 2 x 18 + 9 + 1 KiB = 46 KiB. Registers: L NT f16 fragments (h) + NACC f32 (dW).
layout(push_constant) uniform Push { int batch; int chunks; } push;
IMG_IN(0, target)
SSBO_IN(1, uvec4, w16)  // the f16 weights adam writes, 8 halves an element
SSBO_IN(2, float, stats)
SSBO_OUT(3, float, part)
SSBO_OUT(4, vec2, Epart)
#define NET_HELPERS_ONLY
#define MLP_W(i) 0.0
#include "net.glsl"
#if ENC >= 3
SSBO_IN(5, float, w32)      // adam's fp32 params: the table from float NW
SSBO_RW(6, int64_t, tacc)   // the table gradient (fixed point), then the non-finite count
#define ENC_TABLE(i) w32[uint(NW) + (i)]  // (a name encoding.glsl does not use)
#include "encoding.glsl"
#endif
#include "loss.glsl"

#define NT (MLP_WIDTH / 16)
#ifdef MLP_BIAS
#define K0 NT  // column tiles of h_0: the bias column is the last one
#else
#define K0 ((N_IN + 15) / 16)
#endif
#define T (16u * WARPS)
#if MLP_WIDTH < 32  // a row also holds y as two 16-column tiles
#define HS 40u
#else
#define HS uint(MLP_WIDTH + 8)
#endif
#define GS (T * HS)                       // g tiles in sm (hs at 0)
#define WS (2u * T * HS)                  // the backward's weight tiles
#define FW_CAP ((T + uint(MLP_WIDTH)) * HS)  // the forward's weights: from GS to the end
#if MLP_LAYERS == 1
#define NTILES K0
#else
#define NTILES (K0 * NT + (MLP_LAYERS - 2) * NT * NT + NT)
#endif
#define NACC ((NTILES + int(WARPS) - 1) / int(WARPS))

// |x| > 65504 -> inf before a conversion to f16, so an overflow can never saturate silently
// (whatever the device's conversion does out of range); NaN stays NaN
float to_f16_range(float x) { return abs(x) > CM_F16_MAX ? x * uintBitsToFloat(0x7f800000u) : x; }
#define CM_INF_OVERFLOW(c) \
  CM_UNROLL for (int i_ = 0; i_ < CM_LENGTH(c); i_++) CM_AT(c, i_) = to_f16_range(CM_AT(c, i_))

#define SM_HALVES (2u * T * HS + uint(MLP_WIDTH) * HS)
#ifdef CM_BLOCKS
shared F16 { float16_t sm[SM_HALVES]; float esh[32u * WARPS]; };
shared U128 { uvec4 sm8[SM_HALVES / 8u]; };
#else
shared float16_t sm[SM_HALVES];
shared float esh[32u * WARPS];  // the invocations' loss sums
#endif

uint warp, lane, row0;

// column tiles of layer l's input, row tiles of its output (the last matrix: N_OUT <= 4 rows)
int kin(int l) { return l == 0 ? K0 : NT; }
int kout(int l) { return l == MLP_LAYERS - 1 ? 1 : NT; }
// the forward's copy of W_l: 16 kout rows x 16 kin columns, row stride fw_stride, at
// GS + fw_off(l). Layers are staged in groups that fit FW_CAP, greedily from layer 0; a layer
// at offset 0 starts a group.
uint fw_stride(int l) { return 16u * uint(kin(l)) + 8u; }
uint fw_size(int l) { return 16u * uint(kout(l)) * fw_stride(l); }
uint fw_off(int l) {
  uint off = 0u;
  for (int e = 0; e < l; e++) {
    off += fw_size(e);
    if (off + fw_size(e + 1) > FW_CAP) off = 0u;
  }
  return off;
}

// rows 0 .. rows-1, columns 0 .. 8 cols8 - 1 of W_l (row-major [out][in], net at w16 element
// woff8) -> sm at dst, row stride ss; by the whole workgroup (the caller adds the barriers)
void stage(uint woff8, int l, uint rows, uint cols8, uint dst, uint ss) {
  CM_STAGE(sm, dst, ss, w16, woff8 + uint(l * MLP_WIDTH * MLP_WIDTH / 8), rows, cols8,
           uint(MLP_WIDTH / 8));
}

// weight-gradient tile t -> layer tl (MLP_LAYERS: none), row tile o, column tile c
void tile_of(int t, out int tl, out int o, out int c) {
  tl = MLP_LAYERS;
  o = 0;
  c = 0;
  for (int l = 0; l < MLP_LAYERS; l++) {
    int nl = kout(l) * kin(l);
    if (t >= 0 && t < nl) {
      tl = l;
      o = t / kin(l);
      c = t % kin(l);
    }
    t -= nl;
  }
}

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
    sm[(row0 + r) * HS + c] = float16_t(v);
  }
  CM_SYNC();
#endif
}

#if ENC >= 3
// d_0 = g_1 W_0 for the warp's rows (gs: g_1 in kt column tiles, ws: W_0's 16 K0 columns),
// then the lane's columns of row r scattered into tacc with weight 1 / sbk (= s B K): dE/dT
void table_grad(POS uv, float sbk, int kt) {
  CM_A a[NT];
  CM_UNROLL for (int k = 0; k < NT; k++)
    if (k < kt) CM_LOAD_ROW(a[k], sm, GS + row0 * HS + 16u * uint(k), HS);
  CM_SYNC();
  CM_UNROLL for (int nt = 0; nt < K0; nt++) {
    CM_ACC z;
    CM_ZERO(z);
    CM_UNROLL for (int k = 0; k < NT; k++) {
      if (k < kt) {
        CM_B b;  // B(k, n) = W_0[k][n]
        CM_LOAD_ROW(b, sm, WS + 16u * (uint(k) * HS + uint(nt)), HS);
        CM_MMA(z, a[k], b);
      }
    }
    CM_INF_OVERFLOW(z);
    CM_ACC16 d;
    CM_TO_F16(d, z);
    CM_STORE_ROW(d, sm, GS + row0 * HS + 16u * uint(nt), HS);
  }
  CM_SYNC();
  uint r = lane & 15u, hf = lane >> 4u;
  uint idx[T_CORNERS];
  float wk[T_CORNERS];
  for (uint j = 0u; j < 8u * uint(K0); j++) {
    uint c = 8u * uint(K0) * hf + j;
    if (c >= uint(N_IN)) break;
    if (j == 0u || c % uint(T_FEAT) == 0u) t_cell(int(c) / T_FEAT, uv, idx, wk);
    float g = float(sm[GS + (row0 + r) * HS + c]) / sbk;
    if (g != 0.0) {  // (rows past the batch: g = 0)
      T_SCATTER(tacc, idx, wk, c % uint(T_FEAT), g)
    }
  }
}
#endif

void main() {
  warp = cm_warp();
  lane = cm_lane();
  row0 = 16u * warp;
  uint r = lane & 15u, hf = lane >> 4u;  // the lane's row of the warp's block, its half
  int n = int(gl_WorkGroupID.y);
  uint woff = uint(n) * uint(NET_W), woff8 = woff / 8u;
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
    barrier();  // the previous chunk's backward has read sm
    // samples: lanes r and r + 16 both draw row r (as train.comp); lane r keeps its target
    // (N_OUT <= 4: the loss runs on lanes < 16)
    POS uv = sample_pos(n, i0 + int(r), params.resample != 0 ? uint(global.frame) : 0u, push.batch);
    vec4 tgt = hf == 0u ? fetch_target(n, uv) : vec4(0.0);
    // h_0: the lane encodes columns 8 K0 hf .. 8 K0 (hf + 1) - 1 of its row (layer 0 reads
    // the first 16 K0 columns only)
#if ENC >= 3
    uint idx[T_CORNERS];
    float wk[T_CORNERS];
#endif
    for (uint j = 0u; j < 8u * uint(K0); j++) {
      uint c = 8u * uint(K0) * hf + j;
#if ENC >= 3  // the cell once per level: its T_FEAT features are consecutive columns
      float v = 0.0;
      if (c < uint(N_IN)) {
        if (j == 0u || c % uint(T_FEAT) == 0u) t_cell(int(c) / T_FEAT, uv, idx, wk);
        v = t_interp(idx, wk, int(c) % T_FEAT);
      }
#else
      // (the index stays in range even where the value is not taken: with `enc none`, uv[c]
      // out of range let the H100's compiler corrupt h_0, measured: E off by 15%)
      float v = c < uint(N_IN) ? encode(uv, min(int(c), N_IN - 1)) : 0.0;
#endif
#ifdef MLP_BIAS
      if (c == uint(MLP_WIDTH - 1)) v = 1.0;
#endif
      sm[(row0 + r) * HS + c] = float16_t(v);
    }
    // forward: hs rows of this warp h_l -> h_{l+1}; h_l kept in hk
    CM_UNROLL for (int l = 0; l < MLP_LAYERS; l++) {
      uint fo = GS + fw_off(l), fs = fw_stride(l);
      if (fw_off(l) == 0u) {  // stage the group of layers from l
        if (l > 0) barrier();  // every warp is done with the previous group
        for (int e = l; e < MLP_LAYERS && (e == l || fw_off(e) != 0u); e++)
          stage(woff8, e, 16u * uint(kout(e)), 2u * uint(kin(e)), GS + fw_off(e), fw_stride(e));
        barrier();  // (at l = 0 it also orders the encoding's writes)
      }
      CM_A a[NT];
      CM_UNROLL for (int k = 0; k < NT; k++) {
        if (k < kin(l)) {
          CM_LOAD_ROW(a[k], sm, row0 * HS + 16u * uint(k), HS);
          CM_LOAD_ROW(hk[l * NT + k], sm, row0 * HS + 16u * uint(k), HS);
        }
      }
      CM_SYNC();  // the warp's operands are read before its rows are overwritten
      CM_UNROLL for (int nt = 0; nt < kout(l); nt++) {
        CM_ACC z;
        CM_ZERO(z);
        CM_UNROLL for (int k = 0; k < NT; k++) {
          if (k < kin(l)) {
            CM_B b;  // B(k, n) = W_l[n][k]
            CM_LOAD_COL(b, sm, fo + 16u * (uint(nt) * fs + uint(k)), fs);
            CM_MMA(z, a[k], b);
          }
        }
        if (l < MLP_LAYERS - 1) {
          CM_UNROLL for (int i_ = 0; i_ < CM_LENGTH(z); i_++)
            CM_AT(z, i_) = mlp_activate(CM_AT(z, i_), ACT);
          CM_INF_OVERFLOW(z);
          CM_ACC16 h;
          CM_TO_F16(h, z);
          CM_STORE_ROW(h, sm, row0 * HS + 16u * uint(nt), HS);
        } else {  // y = hi + lo, two f16 tiles in columns 0..15 and 16..31 of the warp's rows
          CM_ACC zl = z;
          CM_UNROLL for (int i_ = 0; i_ < CM_LENGTH(z); i_++) {
            float y = mlp_activate(CM_AT(z, i_), OUT_ACT);
            float hi = float(float16_t(to_f16_range(y)));  // |y| > 65504: NaN, step skipped
            CM_AT(z, i_) = hi;
            CM_AT(zl, i_) = y - hi;
          }
          CM_ACC16 yh;  // (one declaration each: glslang 13 drops the use of a second)
          CM_ACC16 yl;
          CM_TO_F16(yh, z);
          CM_TO_F16(yl, zl);
          CM_STORE_ROW(yh, sm, row0 * HS, HS);
          CM_STORE_ROW(yl, sm, row0 * HS + 16u, HS);
        }
      }
      if (l < MLP_LAYERS - 1) fix_padding();
      CM_SYNC();
    }
    // loss and g_L = s dl/dy out_act'(y) (lane r: row r's N_OUT columns)
    vec4 g4 = vec4(0.0);
    if (hf == 0u && i0 + int(r) < push.batch) {
      for (int c = 0; c < N_OUT; c++) {
        uint at = (row0 + r) * HS + uint(c);
        float y = float(sm[at]) + float(sm[at + 16u]), t = tgt[c];
        esum += loss_value(y, t);
        g4[c] = to_f16_range(s * loss_grad(y, t) * mlp_activate_grad(y, OUT_ACT));  // overflow: inf
      }
    }
    barrier();  // every warp is done with the forward's weights: gs and ws are free
    for (uint j = 0u; j < 8u; j++) {  // g_L into gs columns 0..15: the lane's half of row r
      uint c = 8u * hf + j;
      sm[GS + (row0 + r) * HS + c] = float16_t(c < 4u ? g4[c & 3u] : 0.0);
    }
    // backward: gs = g_{l+1} (kout(l) column tiles), hs = h_l (restored from hk)
    CM_UNROLL for (int l = MLP_LAYERS - 1; l >= 0; l--) {
      int kt = kout(l);
      CM_SYNC();  // the warp's reads of its rows are done before h_l overwrites them
      CM_UNROLL for (int k = 0; k < NT; k++)
        if (k < kin(l)) CM_STORE_ROW(hk[l * NT + k], sm, row0 * HS + 16u * uint(k), HS);
      barrier();  // g_{l+1} and h_l of all rows; every warp is done with ws
      // W_l's rows 0 .. 16 kt - 1 for the data gradient (layer 0 has none, but for a table)
      if (l > 0) stage(woff8, l, 16u * uint(kt), uint(MLP_WIDTH / 8), WS, HS);
#if ENC >= 3
      if (l == 0) stage(woff8, 0, 16u * uint(kt), 2u * uint(K0), WS, HS);
#endif
      // dW_l += g_{l+1}^T h_l: this warp's tiles of layer l, K over the chunk's row blocks
      CM_UNROLL for (int j = 0; j < NACC; j++) {
        int tl, o, c;
        tile_of(int(warp) + int(WARPS) * j, tl, o, c);
        bool mine = tl == l;
#ifdef CM_EMULATE  // every emulated product is reached by the whole workgroup
        for (uint q = 0u; q < WARPS; q++) {
          CM_A ga;
          CM_B hb;
          CM_LOAD_COL(ga, sm, GS + 16u * q * HS + 16u * uint(o), HS);
          CM_LOAD_ROW(hb, sm, 16u * q * HS + 16u * uint(c), HS);
          if (mine) CM_MMA(acc[j], ga, hb);
          else CM_MMA(dummy, ga, hb);
        }
#else
        if (mine) {
          for (uint q = 0u; q < WARPS; q++) {
            CM_A ga;
            CM_B hb;
            CM_LOAD_COL(ga, sm, GS + 16u * q * HS + 16u * uint(o), HS);
            CM_LOAD_ROW(hb, sm, 16u * q * HS + 16u * uint(c), HS);
            CM_MMA(acc[j], ga, hb);
          }
        }
#endif
      }
      barrier();  // every warp is done with gs and hs before they are rewritten; ws is staged
#if ENC >= 3
      if (l == 0) {
        table_grad(uv, s * float(push.batch * N_OUT), kt);
        break;
      }
#else
      if (l == 0) break;
#endif
      // g_l = act'(h_l) * (g_{l+1} W_l) for this warp's rows, in place in gs
      CM_A a[NT];
      CM_UNROLL for (int k = 0; k < NT; k++)
        if (k < kt) CM_LOAD_ROW(a[k], sm, GS + row0 * HS + 16u * uint(k), HS);
      CM_SYNC();
      CM_UNROLL for (int nt = 0; nt < NT; nt++) {
        CM_ACC z;
        CM_ZERO(z);
        CM_UNROLL for (int k = 0; k < NT; k++) {
          if (k < kt) {
            CM_B b;  // B(k, n) = W_l[k][n]
            CM_LOAD_ROW(b, sm, WS + 16u * (uint(k) * HS + uint(nt)), HS);
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
        CM_STORE_ROW(g, sm, GS + row0 * HS + 16u * uint(nt), HS);
      }
#if MLP_WIDTH > HIDDEN  // padding columns: g * 0 (an overflow stays NaN, so the step is skipped)
      CM_SYNC();
      for (uint e = lane; e < 16u * NPAD; e += CM_WARP) {
        uint at = GS + (row0 + e / NPAD) * HS + uint(HIDDEN) + e % NPAD;
        sm[at] = float16_t(float(sm[at]) * 0.0);
      }
#endif
    }
  }
  // the partials: dW / (s B K)
  float k = inv_bk / s;
  uint base = gl_WorkGroupID.x * uint(NW) + woff;
  CM_UNROLL for (int j = 0; j < NACC; j++) {
    int tl, o, c;
    tile_of(int(warp) + int(WARPS) * j, tl, o, c);
    if (tl < MLP_LAYERS) {
      CM_SCALE(acc[j], k);
      CM_STORE_ROW(acc[j], part, base + uint(tl * MLP_WIDTH * MLP_WIDTH) + 16u * uint(o * MLP_WIDTH + c), MLP_WIDTH);
    }
  }
  // (weights no tile covers, layer 0's columns >= 16 K0 and the last matrix's rows >= 16, are
  // unused: reduce does not read their partials)
  // the loss partial: the lanes' sums added in a fixed order (a tree)
  uint t = gl_LocalInvocationIndex;
  esh[t] = esum;
  barrier();
  for (uint h = 16u * WARPS; h > 0u; h >>= 1) {
    if (t < h) esh[t] += esh[t + h];
    barrier();
  }
  if (t == 0u)
    Epart[n * int(gl_NumWorkGroups.x) + int(gl_WorkGroupID.x)] = vec2(esh[0] * inv_bk, 0.0);
}
