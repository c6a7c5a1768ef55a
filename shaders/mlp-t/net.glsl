// The network of one mlp-t tile: target lookup, input encoding, forward pass.
// The including kernel declares connector 0 = the target image (`target`) and the weights
// `w` with MLP_W(i) before including this. Maths: modules/mlp-t/README.md.
#ifndef MLP_NET_GLSL
#define MLP_NET_GLSL

#include "config.glsl"
#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif
#ifdef NET_HELPERS_ONLY  // the coopmat kernel: sampling, targets and encoding only
#include "mlp.glsl"
#else
#ifdef PRECISE
#extension GL_ARB_gpu_shader_fp64 : require
#define MLP_BATCH 16  // float64 activations need the shared memory
#else
#define MLP_BATCH 32
#endif
#include "mlp.glsl"
#ifdef PRECISE
#include "mlp_f64.glsl"
#endif
#if ENC >= 3
#define ENC_TABLE(i) MLP_W(uint(NW) + (i))
#include "encoding.glsl"
#endif

shared POS net_uv[MLP_BATCH];  // the rows' input coordinates
#endif  // NET_HELPERS_ONLY

// tile of net n: (x0, y0, width, height) in target pixels
ivec4 tile_rect(int n) {
  ivec2 size = node.roi[0].xy;
  ivec2 t = ivec2(n % TILES_X, n / TILES_X);
  ivec2 p0 = t * size / ivec2(TILES_X, TILES_Y);
  ivec2 p1 = (t + 1) * size / ivec2(TILES_X, TILES_Y);
  return ivec4(p0, p1 - p0);
}

// where the target is read for network input uv (RTXNS SimpleTraining's transforms)
vec2 xform(vec2 uv) {
#if XFORM == 1
  return uv.yx;
#elif XFORM == 2
  return uv * 0.5 + 0.25;
#else
  return uv;
#endif
}

vec4 target_at(ivec4 rect, ivec2 p) {
  p = clamp(p, ivec2(0), rect.zw - 1);
  return target[(rect.y + p.y) * node.roi[0].x + rect.x + p.x];
}

// position of texel j of a tile at offset o inside the texel (o = 1/2: its centre); DIMS 3:
// texel (x, y) of the stack is voxel (x, y mod hs, y / hs) of hs = height / SLICES rows
POS texel_pos(ivec4 rect, int j, POS o) {
  int x = j % rect.z, y = j / rect.z;
#if DIMS == 3
  int hs = rect.w / SLICES;
  return (vec3(x, y % hs, y / hs) + o) / vec3(rect.z, hs, SLICES);
#else
  return (vec2(x, y) + o) / vec2(rect.zw);
#endif
}

// training sample i of net n in frame f (batch samples a frame): uniform in [0, 1)^DIMS from
// the rng seeded by (seed, f, n, i); JITTER: texel (i k + rot_f) mod texels at that random
// offset inside it (k = max(1, texels / batch), rot_f a random rotation per frame). train and
// train_cm draw their samples here, so both variants see the same ones (with rng.glsl).
#ifdef VKGRAPH_RNG_GLSL
POS sample_pos(int n, int i, uint f, int batch) {
  uint s = rng_state(uint(params.seed), f, uint(n), uint(i));
  POS uv;
  for (int d = 0; d < DIMS; d++) uv[d] = mrand(s);
#ifdef JITTER
  ivec4 rect = tile_rect(n);
  uint texels = uint(rect.z * rect.w);
  uint rot = rng_state(uint(params.seed), f, uint(n), 0x6a697474u) % texels;
  uint stride = max(1u, texels / uint(batch));
  uv = texel_pos(rect, int((uint(i) % texels * stride + rot) % texels), uv);
#endif
  return uv;
}
#endif

#if DIMS == 3
// the training target at uvw in [0, 1)^3: the nearest voxel of the slice stack
vec4 fetch_target(int n, vec3 uvw) {
  ivec4 rect = tile_rect(n);
  int hs = rect.w / SLICES;
  ivec3 q = min(ivec3(floor(uvw * vec3(rect.z, hs, SLICES))), ivec3(rect.z, hs, SLICES) - 1);
  return target_at(rect, ivec2(q.x, q.y + hs * q.z));
}
#else
// the training target of net n at input uv in [0, 1)^2 (tile-local)
vec4 fetch_target(int n, vec2 uv) {
  ivec4 rect = tile_rect(n);
  vec2 q = xform(uv) * vec2(rect.zw);  // tile pixels, texel centres at k + 1/2
#if FILTER == 1
  vec2 f = q - 0.5;
  ivec2 p = ivec2(floor(f));
  vec2 a = f - vec2(p);
  return mix(mix(target_at(rect, p), target_at(rect, p + ivec2(1, 0)), a.x),
             mix(target_at(rect, p + ivec2(0, 1)), target_at(rect, p + ivec2(1, 1)), a.x), a.y);
#else
  return target_at(rect, ivec2(floor(q)));
#endif
}
#endif

// encoded input c of coordinates uv, c = (d * OCTAVES + k) * 2 + s for dimension d, octave k,
// s = 0 sine, 1 cosine
float encode(POS uv, int c) {
#if ENC == 0
  return uv[c];
#else
  int s = c & 1, k = (c >> 1) % OCTAVES, d = (c >> 1) / OCTAVES;
#if ENC == 1
  float a = M_PI * exp2(float(k)) * uv[d];  // sin/cos(pi 2^k x) as RTXNS and tcnn
  return s == 0 ? sin(a) : cos(a);
#else
  // Dr.Jit's TriEncode: t = 2^k x + shift k, cos_tri(t) = 1 - 4 |t - round(t)|,
  // sin_tri(t) = cos_tri(t - 1/4); period 1
  float t = exp2(float(k)) * uv[d] + params.shift * float(k) - (s == 0 ? 0.25 : 0.0);
  return 1.0 - 4.0 * abs(t - floor(t + 0.5));
#endif
#endif
}

#ifndef NET_HELPERS_ONLY
// h_0: thread c fills input neuron c of every row from net_uv (PRECISE: into mlp_dact; the
// fixed encodings do not depend on the weights, so their fp32 rounding adds no noise to the
// check; table encodings interpolate the trained table in float64)
void net_inputs() {
  int c = int(gl_LocalInvocationIndex);
  for (int r = 0; r < MLP_BATCH; r++) {
#if ENC >= 3
    T_ACC x = c < N_IN ? t_encode(net_uv[r], c) : T_ACC(0.0);
#else
    float x = c < N_IN ? encode(net_uv[r], c) : 0.0;
#endif
#ifdef MLP_BIAS
    if (c == MLP_WIDTH - 1) x = 1.0;
#endif
#ifdef PRECISE
    mlp_dact[r][c] = double(x);
#else
    mlp_act[r][c] = float(x);
#endif
  }
  barrier();
}

// matrix l of the net at woff: hidden layers use ACT, the last one OUT_ACT
void net_layer(uint woff, int l) {
  bool last = l == MLP_LAYERS - 1;
#ifdef PRECISE
  mlp_forward_layer_f64(woff, l, last ? N_OUT : HIDDEN, last ? OUT_ACT : ACT);
#else
  mlp_forward_layer(woff, l, last ? N_OUT : HIDDEN, last ? OUT_ACT : ACT);
#endif
}

// activation c of row r after the last layer run (fp32 either way)
#ifdef PRECISE
#define NET_ACT(r, c) float(mlp_dact[r][c])
#else
#define NET_ACT(r, c) mlp_act[r][c]
#endif
#endif  // NET_HELPERS_ONLY

#endif
