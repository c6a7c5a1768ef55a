#version 460
// MLP forward with KHR cooperative matrices (shaders/include/mlp_coopmat.glsl), the same
// maths as mlp_coopvec.slang: 64 inputs -> NHIDDEN x 64 leaky ReLU -> 16 outputs, f16
// weights and activations (f32 accumulation). A warp takes 16 RT samples (RT row tiles);
// its activations stay in shared memory between layers; weights are read as B fragments
// (W_l^T: the row-major (out x in) matrix loaded column-major). Defines: N (a multiple of
// 64 RT), NHIDDEN, SLOPE, RT (default 4).
#extension GL_GOOGLE_include_directive : require
#include "mlp_coopmat.glsl"
#define WARPS 4u
#ifndef RT
#define RT 4u
#endif
#define ROWS (16u * RT)  // samples per warp
layout(local_size_x = 128) in;
layout(set = 1, binding = 0) readonly buffer Xb { float16_t X[]; };
layout(set = 1, binding = 1) readonly buffer Wb { float16_t W[]; };
layout(set = 1, binding = 2) writeonly buffer Yb { float16_t Y[]; };
shared float16_t act[WARPS * ROWS * 64u];

void main() {
  uint warp = cm_warp(), lane = cm_lane();
  uint s0 = (gl_WorkGroupID.x * WARPS + warp) * ROWS;
  uint base = warp * ROWS * 64u;
  for (uint e = lane; e < ROWS * 64u; e += CM_WARP) act[base + e] = X[s0 * 64u + e];
  CM_SYNC();
  for (uint l = 0u; l < NHIDDEN; l++) {
    for (uint rt = 0u; rt < RT; rt++) {
      CM_ACC acc[4];
      CM_UNROLL for (uint nt = 0u; nt < 4u; nt++) CM_ZERO(acc[nt]);
      CM_UNROLL for (uint kt = 0u; kt < 4u; kt++) {
        CM_A a;
        CM_LOAD_ROW(a, act, base + rt * 1024u + kt * 16u, 64u);
        CM_UNROLL for (uint nt = 0u; nt < 4u; nt++) {
          CM_B b;
          CM_LOAD_COL(b, W, l * 4096u + nt * 16u * 64u + kt * 16u, 64u);
          CM_MMA(acc[nt], a, b);
        }
      }
      CM_SYNC();  // row tile rt read before it is overwritten
      CM_UNROLL for (uint nt = 0u; nt < 4u; nt++) {
        CM_LEAKY(acc[nt], SLOPE);
        CM_ACC16 h;
        CM_TO_F16(h, acc[nt]);
        CM_STORE_ROW(h, act, base + rt * 1024u + nt * 16u, 64u);
      }
      CM_SYNC();
    }
  }
  for (uint rt = 0u; rt < RT; rt++) {
    CM_ACC acc;
    CM_ZERO(acc);
    CM_UNROLL for (uint kt = 0u; kt < 4u; kt++) {
      CM_A a;
      CM_B b;
      CM_LOAD_ROW(a, act, base + rt * 1024u + kt * 16u, 64u);
      CM_LOAD_COL(b, W, NHIDDEN * 4096u + kt * 16u, 64u);
      CM_MMA(acc, a, b);
    }
    CM_ACC16 y;
    CM_TO_F16(y, acc);
    CM_STORE_ROW(y, Y, (s0 + rt * 16u) * 16u, 16u);
  }
}
