#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
#include "params.gen"  // the trainable module's params, which the defines below name
#include "optim.glsl"
#include "muon.glsl"
// Muon's matrix-level step (pipeline/trainer.py: optimizer with Weights.muon; reference
// pipeline/optim.py: muon_update): one workgroup of 256 threads per 2-D weight matrix k of
// the table (muon.glsl), run before the optimiser's element kernel of the same frame, which
// reads `o`. Frame f >= 1 applies the gradient of frame f - 1, as adam does: for the block's
// elements g = clipped(dw, ||g_net||, gradclip) (+ MUON_L2 w, the module's coupled term, where
// it defines one), the momentum m' = mu m + g (w, m: the optimiser's, of the last frame) and
// the Nesterov direction U = g + mu m'; then X = U / (||U||_F + 1e-7) on the wide orientation
// (a tall block is transposed), five quintic Newton-Schulz steps X <- a X + (b A + c A^2) X,
// A = X X^T, (a, b, c) = (3.4445, -4.7750, 2.0315), and o = X sqrt(max(1, rows/cols)) at the
// block's params. Frame 0 (the optimiser's init) writes nothing. Shared memory: X and A,
// 64 x 64 floats each (32 KB); a thread keeps at most 16 results in registers.
SSBO_IN(0, float, dw)
SSBO_IN(1, float, gn)
SSBO_IN(2, float, w)
SSBO_IN(3, float, m)
SSBO_OUT(4, float, o)

#define NS_A 3.4445
#define NS_B -4.7750
#define NS_C 2.0315
#define PER_THREAD 16  // 64 x 64 / 256

// the module's clip and momentum (pipeline/trainer.py: newton_schulz sets them to
// params.gradclip and params.momentum; these defaults serve `vkgraph shaders --check` only)
#ifndef MUON_CLIP
#define MUON_CLIP 0.0
#define MUON_MU 0.9
#endif

shared float X[4096];  // r x c, row-major (r <= c)
shared float A[4096];  // r x r; first the Frobenius norm's partial sums

// the param of element (i, j) of X: the block's (i, j), or its (j, i) where transposed
int param_of(int k, bool tall, int i, int j) {
  return muon_offset(k) + (tall ? j * MUON_STRIDE + i : i * MUON_STRIDE + j);
}

// the Nesterov direction of param p: g + mu (mu m + g), g clipped as the element step's
float direction(int k, int p) {
  float g = clipped(dw[p], gn[2 * muon_net(k)], MUON_CLIP);
#ifdef MUON_L2
  g += MUON_L2 * w[p];
#endif
  float mi = MUON_MU * m[p] + g;
  return g + MUON_MU * mi;
}

// ||X||_F over its n entries (every thread of the workgroup calls it)
float frobenius(uint t, int n) {
  float s = 0.0;
  for (int e = int(t); e < n; e += 256) s += X[e] * X[e];
  A[t] = s;
  barrier();
  for (uint h = 128u; h > 0u; h >>= 1) {
    if (t < h) A[t] += A[t + h];
    barrier();
  }
  float norm = sqrt(A[0]);
  barrier();
  return norm;
}

// A = X X^T (r x r)
void gram(uint t, int r, int c) {
  for (int e = int(t); e < r * r; e += 256) {
    int i = e / r, j = e % r;
    float s = 0.0;
    for (int q = 0; q < c; q++) s += X[i * c + q] * X[j * c + q];
    A[e] = s;
  }
  barrier();
}

// A <- b A + c A A (in place: every thread computes its entries first)
void polynomial(uint t, int r) {
  float acc[PER_THREAD];
  for (int q = 0; q < PER_THREAD; q++) {
    int e = int(t) + 256 * q;
    if (e >= r * r) break;
    int i = e / r, j = e % r;
    float s = 0.0;
    for (int l = 0; l < r; l++) s += A[i * r + l] * A[l * r + j];
    acc[q] = NS_B * A[e] + NS_C * s;
  }
  barrier();
  for (int q = 0; q < PER_THREAD; q++) {
    int e = int(t) + 256 * q;
    if (e >= r * r) break;
    A[e] = acc[q];
  }
  barrier();
}

// X <- a X + A X (in place, as polynomial)
void advance(uint t, int r, int c) {
  float acc[PER_THREAD];
  for (int q = 0; q < PER_THREAD; q++) {
    int e = int(t) + 256 * q;
    if (e >= r * c) break;
    int i = e / c, j = e % c;
    float s = 0.0;
    for (int l = 0; l < r; l++) s += A[i * r + l] * X[l * c + j];
    acc[q] = NS_A * X[e] + s;
  }
  barrier();
  for (int q = 0; q < PER_THREAD; q++) {
    int e = int(t) + 256 * q;
    if (e >= r * c) break;
    X[e] = acc[q];
  }
  barrier();
}

void main() {
  if (global.frame == 0) return;
  int k = int(gl_WorkGroupID.x);
  uint t = gl_LocalInvocationIndex;
  int rows = muon_rows(k), cols = muon_cols(k);
  bool tall = rows > cols;
  int r = min(rows, cols), c = max(rows, cols);
  for (int e = int(t); e < r * c; e += 256) X[e] = direction(k, param_of(k, tall, e / c, e % c));
  barrier();
  float inv = 1.0 / (frobenius(t, r * c) + 1e-7);
  for (int e = int(t); e < r * c; e += 256) X[e] *= inv;
  barrier();
  for (int s = 0; s < 5; s++) {
    gram(t, r, c);
    polynomial(t, r);
    advance(t, r, c);
  }
  float scale = sqrt(max(1.0, float(rows) / float(cols)));
  for (int e = int(t); e < r * c; e += 256) o[param_of(k, tall, e / c, e % c)] = scale * X[e];
}
