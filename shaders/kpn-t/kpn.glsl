// Shared by the kpn-t kernels (and kpn, which runs the same kernels): the 15-tap star, the
// luminance of the features, the 2x upsampler U. Maths: modules/kpn-t/README.md.
#ifndef KPN_GLSL
#define KPN_GLSL

#define N_TAPS 15
// K's values a pixel: 15 taps and the band gain; with KPN_CTX (arch 1) a second 15 taps and
// gain for the chroma axes; with KPN_NL (arch 2, which also defines KPN_CTX) 27 taps and a
// gain per group, 56 values used of 64 (nl.glsl)
#if defined(KPN_NL)
#define N_OUT 64
#elif defined(KPN_CTX)
#define N_OUT 32
#else
#define N_OUT 16
#endif
#define TAP_LIMIT 10.0
#define TAP_FALLBACK 0.001
#define S_FLOOR 0.001
#define SIGMA_FLOOR 1e-6  // noise std floor of the noise-normalised features

const ivec2 taps[N_TAPS] = ivec2[](
  ivec2(0, -2),
  ivec2(-2, -1), ivec2(-1, -1), ivec2(0, -1), ivec2(1, -1), ivec2(2, -1),
  ivec2(-1, 0), ivec2(0, 0), ivec2(1, 0),
  ivec2(-2, 1), ivec2(-1, 1), ivec2(0, 1), ivec2(1, 1), ivec2(2, 1),
  ivec2(0, 2));

float sigmoid(float x) { return 1.0 / (1.0 + exp(-x)); }

// the softmax of pixel i's taps K_0..14 (buffer Kb, N_OUT floats a pixel) without its
// division: e[k] = exp(K_k - max K) and S += sum e[k] (softmax_k = e[k] / S)
#define SOFTMAX_EXP(Kb, i, e, S)                                              \
  {                                                                           \
    float mx_ = -1e30;                                                        \
    for (int k_ = 0; k_ < N_TAPS; k_++) mx_ = max(mx_, Kb[(i) * N_OUT + k_]); \
    for (int k_ = 0; k_ < N_TAPS; k_++) {                                     \
      e[k_] = exp(Kb[(i) * N_OUT + k_] - mx_);                                \
      S += e[k_];                                                             \
    }                                                                         \
  }

// kv[0..N_OUT-1] = K's values of pixel i, read as vec4s from a vec4 view K4 of K (16-byte
// reads; one float at a time, a warp's reads strided by 64 bytes, was far slower)
#define LOAD_K(K4, i, kv)                              \
  for (int q_ = 0; q_ < N_OUT / 4; q_++) {             \
    vec4 v_ = K4[N_OUT / 4 * (i) + q_];                \
    kv[4 * q_] = v_.x;                                 \
    kv[4 * q_ + 1] = v_.y;                             \
    kv[4 * q_ + 2] = v_.z;                             \
    kv[4 * q_ + 3] = v_.w;                             \
  }

const vec3 luma2020 = vec3(0.2627, 0.6780, 0.0593);

// MLP input feature c of pixel p (row-major in an image `buf` of size `size`, connector
// `conn`): the luminance of |D| at offset (c div 8 - 4, c mod 8 - 4), mirrored borders. diff
// stores that luminance in D's alpha.
// KPN_BIAS (the noise-normalised variant, feat 1): feature 0 (offset (-4, -4)) is a constant 1
// instead, the network's only bias (without one, leaky ReLU makes K(s f) = s K(f) for s > 0:
// low-contrast regions could only get small logits, hence flat kernels and a band gain near
// 1/2).
#define KPN_FEATURE_AT(buf, conn, size, p, c)                                            \
  buf[texel(conn, ivec2(int(p) % (size).x, int(p) / (size).x) +                          \
                  ivec2(int(c) / 8 - 4, int(c) % 8 - 4))].a
#ifdef KPN_BIAS
#define KPN_FEATURE(buf, conn, size, p, c) ((c) == 0 ? 1.0 : KPN_FEATURE_AT(buf, conn, size, p, c))
#else
#define KPN_FEATURE(buf, conn, size, p, c) KPN_FEATURE_AT(buf, conn, size, p, c)
#endif

// fname(p, h, f): features 8 NX h .. 8 NX (h + 1) - 1 of pixel p at once (f[j] = feature
// 8 NX h + j: x offset NX h + j div 8 - 4, y offset j mod 8 - 4), with NX + 8 mirrored
// coordinates instead of 2 per feature, read from connector conn's feature plane `buf` (one
// f16 a pixel: diff's FEATURE_PLANE output). The cooperative-matrix kernels split a pixel's
// 64 features over 8 / NX invocations.
#define DEFINE_KPN_FEATURES(fname, buf, conn, NX)                                        \
  void fname(uint p, uint h, out float f[8 * NX]) {                                      \
    ivec2 n = node.roi[conn].xy;                                                          \
    int y = int(p) / n.x, x = int(p) - y * n.x;                                           \
    int row[8], col[NX];                                                                  \
    [[unroll]] for (int d = 0; d < 8; d++) row[d] = n.x * mirror(y + d - 4, n.y);         \
    [[unroll]] for (int d = 0; d < NX; d++) col[d] = mirror(x + NX * int(h) + d - 4, n.x); \
    [[unroll]] for (int j = 0; j < 8 * NX; j++) f[j] = float(buf[row[j % 8] + col[j / 8]]); \
    KPN_BIAS_FIRST(h, f)                                                                  \
  }
#ifdef KPN_BIAS
#define KPN_BIAS_FIRST(h, f) if ((h) == 0u) f[0] = 1.0;
#else
#define KPN_BIAS_FIRST(h, f)
#endif

// KPN_CTX (arch 1): the features come from context planes Q_i (rgba images, diff's `ctx`:
// .x = s_i, the signed luma SNR sign(y) log2(1 + |y| / sigma_i), y = Y(D_i); .y = c_i, the
// chroma SNR log2(1 + |C D_i| / sigma_i)) of the level (conn fc) and the next coarser one (cc):
//   c = 0: 1;  1..49: s_i on the 7x7 window around p (j = c - 1: dx = j mod 7 - 3,
//   dy = j div 7 - 3);  50..58: s_{i+1} on the 3x3 window around the parent p div 2
//   (j = c - 50: dx = j mod 3 - 1, dy = j div 3 - 1);  59..63: c_i on the 5-point star.
// KPN_NL (arch 2): the window is the disc of the 37 positions with |dx| + |dy| < 5 (1..37,
// dy-major), then the parent's 3x3 (38..46), the chroma star (47..51) and the NL_TAPS match
// features of the pixel (52..63: match.comp's nldist, which the kernel binds at NLD_B).
// Mirrored borders, each level at its own size. CTX_INPUTS declares the planes' (and the
// match features') bindings.
const ivec2 chroma_star[5] = ivec2[](ivec2(0, -1), ivec2(-1, 0), ivec2(0, 0), ivec2(1, 0),
                                     ivec2(0, 1));
#ifdef KPN_NL
const ivec2 disc37[37] = ivec2[](
  ivec2(-1, -3), ivec2(0, -3), ivec2(1, -3),
  ivec2(-2, -2), ivec2(-1, -2), ivec2(0, -2), ivec2(1, -2), ivec2(2, -2),
  ivec2(-3, -1), ivec2(-2, -1), ivec2(-1, -1), ivec2(0, -1), ivec2(1, -1), ivec2(2, -1), ivec2(3, -1),
  ivec2(-3, 0), ivec2(-2, 0), ivec2(-1, 0), ivec2(0, 0), ivec2(1, 0), ivec2(2, 0), ivec2(3, 0),
  ivec2(-3, 1), ivec2(-2, 1), ivec2(-1, 1), ivec2(0, 1), ivec2(1, 1), ivec2(2, 1), ivec2(3, 1),
  ivec2(-2, 2), ivec2(-1, 2), ivec2(0, 2), ivec2(1, 2), ivec2(2, 2),
  ivec2(-1, 3), ivec2(0, 3), ivec2(1, 3));
#define CTX_WIN 37
#define CTX_WINDOW(j) disc37[j]
#define CTX_INPUTS IMG_IN(0, ctxf) IMG_IN(CTXC_B, ctxc) SSBO_IN(NLD_B, float, nldist)
#define NL_FEATURE(fc, p, j) nldist[NL_TAPS * ((p).x + (p).y * node.roi[fc].x) + (j)]
#else
#define CTX_WIN 49
#define CTX_WINDOW(j) ivec2((j) % 7 - 3, (j) / 7 - 3)
#define CTX_INPUTS IMG_IN(0, ctxf) IMG_IN(CTXC_B, ctxc)
#define NL_FEATURE(fc, p, j) 0.0
#endif
#define DEFINE_CTX_FEATURE(fname, fine, fc, coarse, cc)                               \
  float fname(ivec2 p, int c) {                                                       \
    if (c == 0) return 1.0;                                                           \
    if (c <= CTX_WIN) return fine[texel(fc, p + CTX_WINDOW(c - 1))].x;                \
    c -= CTX_WIN + 1;                                                                 \
    if (c < 9) return coarse[texel(cc, (p >> 1) + ivec2(c % 3 - 1, c / 3 - 1))].x;    \
    if (c < 14) return fine[texel(fc, p + chroma_star[c - 9])].y;                     \
    return NL_FEATURE(fc, p, c - 14);                                                 \
  }
// fname(p, h, f): features NF h .. NF (h + 1) - 1 of pixel p (row-major at the size of
// connector fc) through the feature function ffeat, as DEFINE_KPN_FEATURES's functions
#define DEFINE_CTX_FEATURES(fname, ffeat, fc, NF)                                 \
  void fname(uint p, uint h, out float f[NF]) {                                  \
    int w = node.roi[fc].x;                                                      \
    ivec2 q = ivec2(int(p) % w, int(p) / w);                                     \
    [[unroll]] for (int j = 0; j < NF; j++) f[j] = ffeat(q, NF * int(h) + j);    \
  }

#ifdef KPN_CTX
// the softmax of group g's taps (g = 0 luma: K_0..14, g = 1 chroma: K_16..30) of a pixel's
// K values kv
void group_softmax(float kv[N_OUT], int g, out float s[N_TAPS]) {
  float mx = -1e30, S = 0.0;
  for (int k = 0; k < N_TAPS; k++) mx = max(mx, kv[16 * g + k]);
  for (int k = 0; k < N_TAPS; k++) {
    s[k] = exp(kv[16 * g + k] - mx);
    S += s[k];
  }
  for (int k = 0; k < N_TAPS; k++) s[k] /= S;
}
#endif

// fname(i, g, wk): the float64 softmax weights of group g's n taps of pixel i times the group's
// gain (the PRECISE filters of arch 1 and 2: K's group g starts at i N_OUT + gstride g, its
// gain follows its n logits; reads fwd's float64 copy Kd, through f64.glsl's mlp_exp64)
#define DEFINE_GROUP_WEIGHTS64(fname, n, gstride)                      \
  void fname(int i, int g, out double wk[n]) {                         \
    int o = i * N_OUT + (gstride) * g;                                 \
    double mx = -1e300lf, S = 0.0lf;                                   \
    for (int k = 0; k < (n); k++) mx = max(mx, Kd[o + k]);             \
    for (int k = 0; k < (n); k++) {                                    \
      wk[k] = mlp_exp64(Kd[o + k] - mx);                               \
      S += wk[k];                                                      \
    }                                                                  \
    double gain = 1.0lf / (1.0lf + mlp_exp64(-Kd[o + (n)]));           \
    for (int k = 0; k < (n); k++) wk[k] *= gain / S;                   \
  }

// P, the orthonormal opponent basis of KPN_CTX's filter: rows (1, 1, 1) / sqrt 3 (luma),
// (1, 0, -1) / sqrt 2, (1, -2, 1) / sqrt 6 (chroma); white noise stays white with the same
// std in it. GLSL takes the columns: opp * d = P d, d * opp = P^T d (= P^-1 d).
const mat3 opp = mat3(0.57735027, 0.70710678, 0.40824829,
                      0.57735027, 0.0, -0.81649658,
                      0.57735027, -0.70710678, 0.40824829);

// arch 2's nonlocal taps (match.comp finds them, apply_nl.comp filters with them): the
// NL_TAPS offsets within the (2 NL_RADIUS + 1)^2 window, centre left out, whose
// (2 NL_PATCH + 1)^2 luma patches match best; stored as indices in row-major order
#define NL_RADIUS 5
#define NL_PATCH 2
#define NL_TAPS 12

// the offset of window index k (0..119): row-major, the centre (index 60) skipped
ivec2 nl_offset(uint k) {
  int side = 2 * NL_RADIUS + 1, centre = NL_RADIUS * side + NL_RADIUS;
  int j = int(k) + (int(k) >= centre ? 1 : 0);
  return ivec2(j % side - NL_RADIUS, j / side - NL_RADIUS);
}

// the activation scale s of the fused training kernels (fwd_cm, bck_fused): adam's stats[2]
// (kpn-t/adam.comp) where the kernel binds adam's stats as `stats` (ASCALE_B), else 1. The
// features are multiplied by s and K and dE/dW divided by it: exact for a power of two, as
// the MLP is positively homogeneous (K(s f) = s K(f)), and f16 then holds the activations.
#ifdef ASCALE_B
#define ACTIVATION_SCALE() (stats[2] > 0.0 ? stats[2] : 1.0)
#else
#define ACTIVATION_SCALE() 1.0
#endif

// the per-layer scales f_l of the fused kernels (wscale.comp) where the kernel binds them as
// `lsc` (LSC_B), else 1: layer l's output (l < 6) and the gradient through W_l are multiplied
// by f_l; K and dE/dW divided by the products (fwd_cm.comp, bck_fused.comp)
#ifdef LSC_B
#define LAYER_SCALE(l) lsc[l]
#else
#define LAYER_SCALE(l) 1.0
#endif

// a tap weight the plain filter may use: non-finite or |K| >= 10 is replaced (zero gradient)
bool tap_ok(float k) { return !isnan(k) && !isinf(k) && abs(k) < TAP_LIMIT; }

// U(C)(p), fine pixel p of a coarse image C with size n (separable):
// 2k -> C[k], 2k+1 -> (C[k] + C[k+1]) / 2, C[n] := C[n-1]. Averaging the four texels
// {k, k1} x {k, k1} gives exactly that, since k1 == k for even coordinates.
#define DEFINE_UPSAMPLE(fname, buf, c)                                   \
  vec4 fname(ivec2 p) {                                                  \
    ivec2 n = node.roi[c].xy;                                            \
    ivec2 k = min(p >> 1, n - 1);                                        \
    ivec2 k1 = min(k + (p & 1), n - 1);                                  \
    return 0.25 * (buf[k.x + k.y * n.x] + buf[k1.x + k.y * n.x] +        \
                   buf[k.x + k1.y * n.x] + buf[k1.x + k1.y * n.x]);      \
  }

#endif
