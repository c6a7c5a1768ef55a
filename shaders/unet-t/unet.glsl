// unet-t's layer kernels' shared part (conv.comp, convb.comp, convw.comp; the maths:
// modules/unet-t/README.md). The includer defines the layer: KIND (0 conv3, 1 down, 2 up,
// 3 conv1), CIN (input channels), CINA (of them from input A; the rest, a concatenation's
// second part, from input B), COUT, WOFF (the layer's offset in the weights: W[co][ci][tap]
// then the bias), RELU (1: the output is relu'd); PRECISE: activations in float64.
// Activations are planar: channel c of an image of n pixels at [c n, (c + 1) n), rows of
// push.wi (input) or push.wo (output) pixels. Tiles: cnngenin's square tiles of T pixels
// (noiseab[2]; 0: the whole image), T >> push.k at the conv's scale k (push.k: the scale,
// one more with cfa, whose network pixels are cells of 2 x 2 photosites: forward.py's
// layer_push); a conv3 reads zero outside the output pixel's tile.
#ifndef KIND  // a layer where none is named: `vkgraph shaders --check`, and prep and loss,
              // which use only `real` and the push constants (module.py names every layer)
#define KIND 0
#define CIN 4
#define CINA 4
#define COUT 8
#define WOFF 0
#define RELU 1
#endif
#ifndef TM
#define TM 8
#endif
#ifndef CHUNKS
#define CHUNKS 1
#endif
#ifdef PRECISE
#define real double
#else
#define real float
#endif
#if KIND == 0
#define KK 9
#elif KIND == 3
#define KK 1
#else
#define KK 4
#endif
layout(push_constant) uniform Push { int wi, hi, wo, ho, k; } push;

// the tile size at the layer's scale from noiseab's T
int tile_at(float T) { return int(T) >> push.k; }

int widx(int co, int ci, int t) { return WOFF + (co * CIN + ci) * KK + t; }

// input channel ci of the layer at pixel index iq: A's channels, then B's (a concatenation's
// second part); a macro, for the kernels that declare the bindings inA and inB (and ni)
#define INPUT_AT(ci, iq) ((ci) < CINA ? inA[(ci) * ni + (iq)] : inB[((ci) - CINA) * ni + (iq)])
int bidx(int co) { return WOFF + COUT * CIN * KK + co; }

// the box [x0, y0, x1, y1) a conv3 at pixel p reads from: p's tile (T > 0; 0: the whole
// image) within the image (input and output of a conv3 have one scale)
ivec4 box_of(ivec2 p, int T) {
  if (T == 0) return ivec4(0, 0, push.wi, push.hi);
  ivec2 o = (p / T) * T;
  return ivec4(o, min(o + T, ivec2(push.wi, push.hi)));
}

bool in_box(ivec2 q, ivec4 b) { return all(greaterThanEqual(q, b.xy)) && all(lessThan(q, b.zw)); }

// the input pixel q that tap t (ky * k + kx) of output pixel p reads; false where the tap
// reads zero (conv3: outside p's box, box_of(p)) or is not p's (up: one tap an output pixel)
bool source(ivec2 p, int t, ivec4 box, out ivec2 q) {
#if KIND == 0
  q = p + ivec2(t % 3 - 1, t / 3 - 1);
  return in_box(q, box);
#elif KIND == 1
  q = 2 * p + ivec2(t % 2, t / 2);
  return true;
#elif KIND == 2
  q = p / 2;
  return t == (p.y % 2) * 2 + p.x % 2;
#else
  q = p;
  return true;
#endif
}

// the output pixel p whose tap t reads input pixel q (source's inverse; box: box_of(q), as
// p reads q exactly when p is in q's tile); false where none
bool target(ivec2 q, int t, ivec4 box, out ivec2 p) {
#if KIND == 0
  p = q - ivec2(t % 3 - 1, t / 3 - 1);
  return in_box(p, box);
#elif KIND == 1
  p = q / 2;
  return t == (q.y % 2) * 2 + q.x % 2;
#elif KIND == 2
  p = 2 * q + ivec2(t % 2, t / 2);
  return true;
#else
  p = q;
  return true;
#endif
}

// The layer kernels' matrix products (conv.comp, convb.comp, convw.comp): a workgroup of
// THREADS = (TM / RM) (TN / RN) threads sums a block of TM rows x TN columns over steps of
// TK, staged in shared memory as [k][row] and [k][column], an RM x RN block of sums a thread
// (forward.py's Block picks TM, TN, RM, RN; all powers of two). NP: the columns a thread
// stages (the same ones every step).
#ifndef TN
#define TN 32
#endif
#ifndef RM
#define RM 4
#endif
#ifndef RN
#define RN 4
#endif
#define TK 16
#define THREADS ((TM / RM) * (TN / RN))
#define NP ((TN + THREADS - 1) / THREADS)
#define ACC (RM * RN)

// the rows tm and columns tn of this thread's RM x RN block of sums
#define BLOCK_AT(lid) int tm = ((lid) / (TN / RN)) * RM, tn = ((lid) % (TN / RN)) * RN;

// one step of a block's sums: acc (this thread's RM x RN block at rows tm, columns tn) +=
// the step's A (TK x TM rows, shared) times B (TK x TN columns, shared)
#define BLOCK_STEP(A, B)                                                            \
  for (int k = 0; k < TK; k++) {                                                    \
    real a_[RM], b_[RN];                                                            \
    for (int i = 0; i < RM; i++) a_[i] = A[k * TM + tm + i];                        \
    for (int j = 0; j < RN; j++) b_[j] = B[k * TN + tn + j];                        \
    for (int i = 0; i < RM; i++)                                                    \
      for (int j = 0; j < RN; j++) acc[i * RN + j] += a_[i] * b_[j];                \
  }
