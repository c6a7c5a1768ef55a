// The network's shape as compile-time defines (set by modules/mlp-t/module.py; these
// defaults only serve `vkgraph shaders --check`). Weight layout: NETS networks of MLP_LAYERS
// matrices of MLP_WIDTH x MLP_WIDTH, W_{n,l}[o][c] at NET_W * n + MLP_WW * l + MLP_WIDTH * o + c.
#ifndef MLP_CONFIG_GLSL
#define MLP_CONFIG_GLSL

#ifndef MLP_WIDTH
#define MLP_WIDTH 64    // stored neurons per layer (multiple of 16)
#endif
#ifndef MLP_LAYERS
#define MLP_LAYERS 5    // matrices = hidden layers + 1
#endif
#ifndef N_IN
#define N_IN 12         // encoded inputs
#endif
#ifndef HIDDEN
#define HIDDEN 64       // neurons of each hidden layer
#endif
#ifndef N_OUT
#define N_OUT 3         // outputs (r, g, b, a)
#endif
#ifndef TILES_X
#define TILES_X 1       // network array: one net per tile of the target
#endif
#ifndef TILES_Y
#define TILES_Y 1
#endif
#ifndef ENC
#define ENC 1           // 0 none, 1 frequency, 2 triangle, 3 hashgrid, 4 permuto
#endif
#ifndef DIMS
#define DIMS 2          // input dimensions: 2 (u, v) or 3 (u, v, w)
#endif
#ifndef SLICES
#define SLICES 1        // DIMS 3: the target holds SLICES images stacked vertically
#endif
#ifndef TABLE
#define TABLE 0         // floats of the encoding's table, stored after the weights
#endif
#ifndef TABLE_USED
#define TABLE_USED TABLE  // of which the used ones (the rest pads to whole rows)
#endif
#define T_FIX 1099511627776.0  // 2^40: the table gradient's fixed point (64-bit integers)
#ifndef OCTAVES
#define OCTAVES 3
#endif
#ifndef ACT
#define ACT 2           // hidden activation (ACT_* in mlp.glsl)
#endif
#ifndef OUT_ACT
#define OUT_ACT 3       // output activation
#endif
#ifndef LOSS
#define LOSS 0          // 0 l2, 1 l1, 2 relative l2, 3 smape
#endif
#ifndef XFORM
#define XFORM 0         // target transform: 0 identity, 1 flip (uv.yx), 2 zoom (uv/2 + 1/4)
#endif
#ifndef FILTER
#define FILTER 0        // target lookup: 0 nearest texel, 1 bilinear
#endif
#ifndef OPT
#define OPT 0           // OPT_* of optim.glsl: 0 adam, 1 sgd, 2 adamw, 3 momentum, 4 muon
#endif

#define LEAKY_SLOPE 0.01
#define NETS (TILES_X * TILES_Y)
#define NET_W (MLP_LAYERS * MLP_WIDTH * MLP_WIDTH)  // weights per net
#define NW (NETS * NET_W)                          // weights in all
#define NP (NW + TABLE)                            // params in all: weights, then the table
#if DIMS == 3
#define POS vec3
#else
#define POS vec2
#endif

// is stored weight k of a net used? Rows past a layer's outputs and columns past its inputs
// are padding and stay 0; with MLP_BIAS column MLP_WIDTH-1 is the bias.
bool weight_used(int k) {
  int l = k / (MLP_WIDTH * MLP_WIDTH);
  int o = (k / MLP_WIDTH) % MLP_WIDTH, c = k % MLP_WIDTH;
  int nin = l == 0 ? N_IN : HIDDEN;
  int nout = l == MLP_LAYERS - 1 ? N_OUT : HIDDEN;
#ifdef MLP_BIAS
  if (c == MLP_WIDTH - 1) return o < nout;
#endif
  return o < nout && c < nin;
}

#endif
