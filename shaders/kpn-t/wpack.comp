#version 460
#extension GL_GOOGLE_include_directive : enable
#define CM_EMU_WARPS 1u
#include "mlp_coopmat.glsl"
#include "vkgraph.glsl"
// The MLP's f16 weights (the .lut layout: W_l at 4096 l, 64 x 64 row-major; W_6's rows 16..63
// unused) as packed B fragments (mlp_coopmat.glsl), so that the matrix kernels load them
// straight from this buffer (fwd_cm). One warp a fragment f = 16 l + 4 a + b, the forward's
//   B[k][n] = W_l[16 a + n][16 b + k]       (a: output tile, b: input tile)
// Tiny (112 fragments, 112 KiB): it runs once a frame, after the weights change (~4 us on
// the H100). (bck_fused reading its weights this way instead of from shared memory, the
// forward's or the backward's products or both: 2.01-2.05 ms against 1.77 at 1024².)
layout(local_size_x = 32) in;
SSBO_IN(0, float16_t, w)
SSBO_OUT(1, uvec4, wp)

void main() {
  uint f = gl_WorkGroupID.x, l = f / 16u, a = (f / 4u) % 4u, b = f % 4u;
  CM_B m;
  CM_LOAD_COL(m, w, 4096u * l + 16u * (64u * a + b), 64u);
  CM_PACK_B(m, wp, f);
}
