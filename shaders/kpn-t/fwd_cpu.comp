#version 460
#extension GL_GOOGLE_include_directive : enable
#extension GL_EXT_control_flow_attributes : enable
#extension GL_KHR_shader_subgroup_ballot : enable
#extension GL_KHR_shader_subgroup_shuffle : enable
#include "vkgraph.glsl"
#include "kpn.glsl"
// Features + MLP forward for CPU drivers (the "cpu" variant; fwd.comp's maths, fp32, the same
// order of sums): one pixel per invocation, PX pixels per invocation (SG apart, so a subgroup
// covers SG * PX consecutive pixels), the whole MLP in registers, no shared memory, no
// barriers. On llvmpipe an invocation is a SIMD lane and every load or store whose address
// differs per lane is a loop over the lanes, so loads are made few and wide: lane i loads
// the vec4 W_l[o][4i..4i+3] (one load brings 32 weights of row o), and a subgroupShuffle
// from a constant lane hands each weight to every lane (cpu.glsl says why not
// subgroupBroadcast), where it is used for PX pixels.
//   h_0 = f (64 features), h_{l+1} = leaky(W_l h_l) (l = 0..5), K = W_6[0:N_OUT] h_6.
// TRAIN stores h_0..h_6 in A as fwd does (slot s at s*N*64 + 64p + c), for bck and mulw.
// Needs a subgroup of SG = 8 invocations and workgroups of whole subgroups.
layout(push_constant) uniform Push { int N; } push;
#ifdef KPN_CTX  // arch 1 and 2: the context planes (and match features) of kpn.glsl
CTX_INPUTS
DEFINE_CTX_FEATURE(ctx_feature, ctxf, 0, ctxc, CTXC_B)
#else
IMG_IN(0, detail)
#endif
#include "cpu.glsl"  // PX, SG, ROW, VEC4_IN
VEC4_IN(1, w4)  // W_l[o][4q..4q+3] = V4(w4, 1024 l + 16 o + q)
SSBO_OUT(2, float, K)
#ifdef TRAIN
SSBO_OUT(3, vec4, A4)  // h_s[p][4q..4q+3] = A4[16 (s N + p) + q]
#endif
#define MLP_WIDTH 64
#include "mlp.glsl"

float h[PX][64];   // this layer's input, per pixel
float z[PX][64];   // its output

// acc[k] += W_l[o][c] h[k][c] for c = c0 + 4 L + comp, the weight coming from lane L
#define MAC(comp, L, c)                                                 \
  {                                                                     \
    float wv = FROM_LANE(comp, L);                              \
    [[unroll]] for (int k = 0; k < PX; k++) acc[k] += wv * h[k][c];     \
  }

void store(int s, int base, int N) {
#ifdef TRAIN
  [[unroll]] for (int k = 0; k < PX; k++) {
    int p = base + SG * k;
    if (p < N)
      [[unroll]] for (int q = 0; q < 16; q++)
        A4[16 * (s * N + p) + q] =
            vec4(h[k][4 * q], h[k][4 * q + 1], h[k][4 * q + 2], h[k][4 * q + 3]);
  }
#endif
}

void main() {
  int N = push.N;
  int lane = int(gl_SubgroupInvocationID);
  int base = (int(gl_GlobalInvocationID.x) - lane) * PX + lane;
  ivec2 size = node.roi[0].xy;
  // every lane stays active (the broadcasts read all lanes): pixels past N compute a copy
  // of pixel N-1 and store nothing
  [[unroll]] for (int k = 0; k < PX; k++) {
    int p = min(base + SG * k, N - 1);
#ifdef KPN_CTX
    [[unroll]] for (int c = 0; c < 64; c++) h[k][c] = ctx_feature(ivec2(p % size.x, p / size.x), c);
#else
    [[unroll]] for (int c = 0; c < 64; c++) h[k][c] = KPN_FEATURE(detail, 0, size, p, c);
#endif
  }
  store(0, base, N);
  for (int l = 0; l < 7; l++) {
    int nout = l < 6 ? 64 : N_OUT;
    for (int o = 0; o < nout; o++) {
      float acc[PX];
      [[unroll]] for (int k = 0; k < PX; k++) acc[k] = 0.0;
      vec4 v0 = V4(w4, 1024 * l + 16 * o + lane);
      vec4 v1 = V4(w4, 1024 * l + 16 * o + 8 + lane);
      ROW(v0, 0)
      ROW(v1, 32)
      [[unroll]] for (int k = 0; k < PX; k++) z[k][o] = acc[k];
    }
    if (l < 6) {
      [[unroll]] for (int k = 0; k < PX; k++)
        [[unroll]] for (int c = 0; c < 64; c++) h[k][c] = mlp_activate(z[k][c], ACT_LEAKY);
      store(l + 1, base, N);
    }
  }
  [[unroll]] for (int k = 0; k < PX; k++) {
    int p = base + SG * k;
    if (p < N)
      [[unroll]] for (int o = 0; o < N_OUT; o++) K[p * N_OUT + o] = z[k][o];
  }
}
