// Cooperative-matrix building blocks for MLP kernels (VK_KHR_cooperative_matrix): 16x16
// tiles, f16 operands, f32 accumulation, one warp of 32 invocations per tile operation.
// Include it first, right after #version: it enables the extensions it needs.
//
// Fragments (CM_A, CM_B: f16 operands; CM_ACC: f32 accumulator; CM_ACC16: f16 accumulator,
// used to store activations and to mask gradients) are declared like any variable; every
// operation is a macro, because a cooperative-matrix load or store needs the buffer itself:
//   CM_LOAD_ROW(m, buf, off, stride)   m(r, c) = buf[off + r*stride + c]   (row-major)
//   CM_LOAD_COL(m, buf, off, stride)   m(r, c) = buf[off + c*stride + r]   (column-major)
//   CM_STORE_ROW(m, buf, off, stride)  the inverse of CM_LOAD_ROW
//   CM_ZERO(m)  CM_MMA(c, a, b): c += a b  CM_TO_F16(d, c): d = f16(c) (CM_ACC -> CM_ACC16)
//   CM_LENGTH(m), CM_AT(m, i): this invocation's elements of m, for element-wise maths
//   (CM_ELEMS(m): the same elements as an array expression, for CM_PACK8 / CM_UNPACK8)
//   CM_UNROLL: before loops that index arrays of fragments (they must stay in registers)
// Offsets and strides are in buffer elements; keep them multiples of 8 halves (16 bytes).
//
// Rules (vkdt's cooperative-matrix kernel breaks the first):
// * element-wise maths that combines two fragments uses ONE fragment type for both: which
//   invocation holds which element is implementation-defined per type, so the leaky-ReLU
//   mask of a gradient comes from h loaded as the same type (CM_ACC16, same layout), never
//   from an operand fragment. Element-wise maths on one fragment alone (an activation, a
//   scale) is position-free and safe on any type.
// * a fragment changes use (accumulator -> operand) only through memory: store, sync, load.
// * a warp is a subgroup of 32 invocations (cm_warp(), cm_lane()): the host selects these
//   kernels only where subgroups are 32 wide; the emulation takes 32 consecutive invocations.
// * CM_SYNC() orders one warp's shared-memory writes before its later reads (a warp's
//   invocations do not run in lockstep); put one between the loads of a tile and stores
//   that overwrite it in place. Control flow around CM_* and CM_SYNC is uniform in the
//   whole workgroup (the emulation below turns CM_SYNC into a workgroup barrier).
//
// CM_EMULATE: plain GLSL for devices without the extension (the CPU driver in tests): lane l
// of a warp holds elements 8l..8l+7 of the row-major tile (for every type), products go
// through shared memory. A kernel's indexing, padding, layouts and warp syncs can so be
// checked against the portable kernels anywhere. Rounding matches (f16 storage, f32
// accumulation); the order of the f32 sums differs. Every CM_MMA must be reached by the
// whole workgroup there (it uses workgroup barriers). The emulation's loops are unrolled:
// llvmpipe (Mesa 22) silently cuts loops short when a dispatch runs very many iterations.
#ifndef MLP_COOPMAT_GLSL
#define MLP_COOPMAT_GLSL

#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_control_flow_attributes : enable
#ifndef CM_EMULATE
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#endif
// Wide shared-memory copies: a kernel that defines CM_WANT_BLOCKS before this include, run
// where the host defines CM_SHARED_BLOCKS (VK_KHR_workgroup_memory_explicit_layout with
// 16-bit access), gets CM_BLOCKS and then declares every shared array twice, in two blocks
// that alias: f16 arrays (name) for the fragments, and uvec4 arrays (name8) over the same
// bytes for CM_PUT8 / CM_GET8, one 16-byte access instead of eight 2-byte ones.
#if defined(CM_WANT_BLOCKS) && defined(CM_SHARED_BLOCKS) && !defined(CM_EMULATE)
#define CM_BLOCKS
#extension GL_EXT_shared_memory_block : require
#endif

#ifndef LEAKY_SLOPE
#define LEAKY_SLOPE 0.001  // as mlp.glsl
#endif

#define CM_WARP 32u
#define CM_F16_MAX 65504.0
#ifndef CM_EMULATE  // the device's subgroups (32 wide: checked by the host)
uint cm_warp() { return gl_SubgroupID; }
uint cm_lane() { return gl_SubgroupInvocationID; }
#else
uint cm_warp() { return gl_LocalInvocationIndex / CM_WARP; }
uint cm_lane() { return gl_LocalInvocationIndex % CM_WARP; }
#endif

#ifndef CM_EMULATE

#define CM_A coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define CM_B coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define CM_ACC coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define CM_ACC16 coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>

#define CM_LOAD_ROW(m, buf, off, stride) \
  coopMatLoad(m, buf, uint(off), uint(stride), gl_CooperativeMatrixLayoutRowMajor)
#define CM_LOAD_COL(m, buf, off, stride) \
  coopMatLoad(m, buf, uint(off), uint(stride), gl_CooperativeMatrixLayoutColumnMajor)
#define CM_STORE_ROW(m, buf, off, stride) \
  coopMatStore(m, buf, uint(off), uint(stride), gl_CooperativeMatrixLayoutRowMajor)
#define CM_ZERO(m) m = CM_ACC(0.0)
#define CM_MMA(c, a, b) c = coopMatMulAdd(a, b, c)
#define CM_TO_F16(d, c) d = CM_ACC16(c)
#define CM_LENGTH(m) (m).length()
#define CM_ELEMS(m) (m)
#define CM_AT(m, i) (m)[i]
#define CM_SYNC() { subgroupMemoryBarrierShared(); subgroupBarrier(); }
#define CM_UNROLL [[unroll]]

#else  // CM_EMULATE

// invocation (warp lane) l holds elements 8l .. 8l+7 of the row-major 16 x 16 tile
struct CmH { float16_t v[8]; };
struct CmF { float v[8]; };
#define CM_A CmH
#define CM_B CmH
#define CM_ACC CmF
#define CM_ACC16 CmH
#ifndef CM_EMU_WARPS
#define CM_EMU_WARPS 8u  // warps per workgroup at most
#endif
shared float16_t cm_emu[CM_EMU_WARPS * 512u];  // per warp: the A and B tiles of a product

#define CM_EMU_ROW(i_) ((8u * cm_lane() + (i_)) >> 4u)
#define CM_EMU_COL(i_) ((8u * cm_lane() + (i_)) & 15u)
#define CM_LOAD_ROW(m, buf, off, stride) \
  [[unroll]] for (uint i_ = 0u; i_ < 8u; i_++) (m).v[i_] = buf[uint(off) + CM_EMU_ROW(i_) * uint(stride) + CM_EMU_COL(i_)]
#define CM_LOAD_COL(m, buf, off, stride) \
  [[unroll]] for (uint i_ = 0u; i_ < 8u; i_++) (m).v[i_] = buf[uint(off) + CM_EMU_COL(i_) * uint(stride) + CM_EMU_ROW(i_)]
#define CM_STORE_ROW(m, buf, off, stride) \
  [[unroll]] for (uint i_ = 0u; i_ < 8u; i_++) buf[uint(off) + CM_EMU_ROW(i_) * uint(stride) + CM_EMU_COL(i_)] = (m).v[i_]
#define CM_ZERO(m) [[unroll]] for (uint i_ = 0u; i_ < 8u; i_++) (m).v[i_] = 0.0
#define CM_TO_F16(d, c) [[unroll]] for (uint i_ = 0u; i_ < 8u; i_++) (d).v[i_] = float16_t((c).v[i_])
#define CM_LENGTH(m) 8
#define CM_ELEMS(m) (m).v
#define CM_AT(m, i) (m).v[i]
#define CM_SYNC() barrier()
#define CM_UNROLL [[dont_unroll]]  // kernel loops stay loops: the CPU driver compiles fast

// the product exchanges the operands through shared memory: workgroup barriers, so every
// CM_MMA must be reached by the whole workgroup
void cm_mma_emulated(inout CmF c, CmH a, CmH b) {
  uint base = cm_warp() * 512u;
  barrier();  // the previous product has read cm_emu
  [[unroll]] for (uint i = 0u; i < 8u; i++) {
    cm_emu[base + 8u * cm_lane() + i] = a.v[i];
    cm_emu[base + 256u + 8u * cm_lane() + i] = b.v[i];
  }
  barrier();
  [[unroll]] for (uint i = 0u; i < 8u; i++) {
    uint r = CM_EMU_ROW(i), n = CM_EMU_COL(i);
    float s = c.v[i];
    [[unroll]] for (uint k = 0u; k < 16u; k++)
      s += float(cm_emu[base + r * 16u + k]) * float(cm_emu[base + 256u + k * 16u + n]);
    c.v[i] = s;
  }
}
#define CM_MMA(c, a, b) cm_mma_emulated(c, a, b)
#endif

// 8 halves of a shared float16_t array from index i <-> one uvec4, for wide per-invocation
// copies between shared memory and f16 buffers declared as uvec4 arrays (CM_PACK8 packs 8
// elements of a float array too, rounded to f16). (Global data whose buffer depends on a
// run-time layer index moves this way, in plain code: the H100 driver's compiler crashes on
// cooperative-matrix loads and stores inside such a switch.)
#define CM_PACK8(sh, i)                                                                \
  uvec4(packFloat2x16(f16vec2(sh[(i)], sh[(i) + 1u])),                                 \
        packFloat2x16(f16vec2(sh[(i) + 2u], sh[(i) + 3u])),                            \
        packFloat2x16(f16vec2(sh[(i) + 4u], sh[(i) + 5u])),                            \
        packFloat2x16(f16vec2(sh[(i) + 6u], sh[(i) + 7u])))
#define CM_UNPACK8(sh, i, v)                                                           \
  {                                                                                    \
    uvec4 u_ = (v);                                                                    \
    f16vec2 a_ = unpackFloat2x16(u_.x), b_ = unpackFloat2x16(u_.y);                    \
    f16vec2 c_ = unpackFloat2x16(u_.z), d_ = unpackFloat2x16(u_.w);                    \
    sh[(i)] = a_.x; sh[(i) + 1u] = a_.y; sh[(i) + 2u] = b_.x; sh[(i) + 3u] = b_.y;     \
    sh[(i) + 4u] = c_.x; sh[(i) + 5u] = c_.y; sh[(i) + 6u] = d_.x; sh[(i) + 7u] = d_.y; \
  }

// halves 8 i8 .. 8 i8 + 7 of shared f16 array sh <-> one uvec4 (i8 counts groups of 8)
#ifdef CM_BLOCKS
#define CM_PUT8(sh, i8, v) sh##8[i8] = (v)
#define CM_GET8(sh, i8) sh##8[i8]
#else
#define CM_PUT8(sh, i8, v) CM_UNPACK8(sh, 8u * (i8), v)
#define CM_GET8(sh, i8) CM_PACK8(sh, 8u * (i8))
#endif

// Packed operands: a B fragment kept in memory as each invocation's own elements (which
// element an invocation holds is the implementation's business, so only a fragment of the
// same type packs them: CM_PACK_B in one kernel, CM_UNPACK_B in another, on one device).
// Fragment f takes CM_PACKED uvec4 slots per invocation, slot j of lane l at
// (CM_PACKED f + j) 32 + l: a warp reads a fragment with one coalesced 16-byte load per
// invocation per 8 elements, from any buffer (the weights straight from global memory, no
// staging in shared memory and no workgroup barrier for it). Up to 16 elements an
// invocation (8 where a warp's 32 invocations share a 16 x 16 tile without copies).
#define CM_PACKED 2u
#define CM_PACK_B(m, buf, f)                                                             \
  CM_UNROLL for (uint j_ = 0u; j_ < uint(CM_LENGTH(m)) / 8u; j_++)                       \
    buf[(CM_PACKED * uint(f) + j_) * CM_WARP + cm_lane()] = CM_PACK8(CM_ELEMS(m), 8u * j_)
#define CM_UNPACK_B(m, buf, f)                                                           \
  CM_UNROLL for (uint j_ = 0u; j_ < uint(CM_LENGTH(m)) / 8u; j_++)                       \
    CM_UNPACK8(CM_ELEMS(m), 8u * j_, buf[(CM_PACKED * uint(f) + j_) * CM_WARP + cm_lane()])

// rows 0 .. nrows-1, columns 0 .. 8 cols8 - 1 of a row-major f16 matrix with rows of rs8
// uvec4, at uvec4 offset off8 of buffer buf -> shared array sh from index dst (row stride ss
// halves; both multiples of 8), by all invocations of the workgroup (wide loads; fragments
// then load from shared memory). The caller puts barriers around it.
#define CM_STAGE(sh, dst, ss, buf, off8, nrows, cols8, rs8)                                \
  for (uint e_ = gl_LocalInvocationIndex; e_ < (nrows) * (cols8); e_ += gl_WorkGroupSize.x) \
    CM_PUT8(sh, (dst) / 8u + (e_ / (cols8)) * ((ss) / 8u) + e_ % (cols8),                   \
            buf[(off8) + (e_ / (cols8)) * (rs8) + e_ % (cols8)])
// all 64 columns of a 64-wide matrix
#define CM_STAGE64(sh, ss, buf, off8, nrows) CM_STAGE(sh, 0u, ss, buf, off8, nrows, 8u, 8u)

// leaky ReLU on an accumulator, element by element (position-free)
#define CM_LEAKY(c, slope) \
  CM_UNROLL for (int i_ = 0; i_ < CM_LENGTH(c); i_++) CM_AT(c, i_) = CM_AT(c, i_) > 0.0 ? CM_AT(c, i_) : (slope) * CM_AT(c, i_)

// g *= leaky'(h), with g and h both CM_ACC16 loaded/converted with the same layout: the
// derivative from the activation's output h (sign of h = sign of z)
#define CM_LEAKY_GRAD(g, h, slope) \
  CM_UNROLL for (int i_ = 0; i_ < CM_LENGTH(g); i_++) \
    CM_AT(g, i_) = CM_AT(h, i_) > float16_t(0.0) ? CM_AT(g, i_) : float16_t(slope) * CM_AT(g, i_)

// saturate to +-lim, keeping NaN (a non-finite gradient must still skip the update)
float cm_clamp(float x, float lim) { return isnan(x) ? x : clamp(x, -lim, lim); }
// an f32 accumulator clamped before it becomes f16 (lim 65504: saturate, never inf)
#define CM_CLAMP(c, lim) \
  CM_UNROLL for (int i_ = 0; i_ < CM_LENGTH(c); i_++) CM_AT(c, i_) = cm_clamp(CM_AT(c, i_), lim)

#define CM_SCALE(c, s) CM_UNROLL for (int i_ = 0; i_ < CM_LENGTH(c); i_++) CM_AT(c, i_) *= (s)

#endif
