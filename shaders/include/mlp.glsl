// Portable MLP building blocks (fp32, shared-memory tiles, any subgroup size).
// One library for every trainable module (kpn-t, mlp-t): width, depth and activations are
// compile-time defines, weights are stored as MLP_LAYERS matrices of MLP_WIDTH x MLP_WIDTH,
// row = output neuron: W_l[o][c] at MLP_WOFF + MLP_WIDTH*MLP_WIDTH*l + MLP_WIDTH*o + c.
// Narrower inputs and outputs are zero-padded to MLP_WIDTH (their weights stay zero).
//
// The kernel that includes this file defines, before the include:
//   MLP_WIDTH   neurons per layer (a multiple of 16, at most 64)
// and, for the forward/backward layers (thread = neuron, MLP_WIDTH x 1 x 1 threads):
//   MLP_BATCH   rows (pixels/samples) a workgroup holds in shared memory
//   MLP_W(i)    an expression reading stored weight i (e.g. w[i])
//   MLP_BIAS    (optional) neuron MLP_WIDTH-1 of every layer input is the constant 1, so
//               column MLP_WIDTH-1 of each matrix is that layer's bias
// and, for the blocked weight gradient (16 x 16 threads, see mlp_weight_grad below):
//   MLP_GRAD_ROWS  rows staged in shared memory per step (e.g. 16)
//
// Forward:  h_0 = input; z_{l+1} = W_l h_l; h_{l+1} = act(z_{l+1}).
// Backward: g_{l} = act'(h_l) * (W_l^T g_{l+1}), with act' written in terms of the output h
//           (every activation here allows that), so only post-activations are stored.
// Weight gradient: dE/dW_l = sum over rows p of g_{l+1}[p] h_l[p]^T.
#ifndef MLP_GLSL
#define MLP_GLSL

#define ACT_NONE 0
#define ACT_RELU 1
#define ACT_LEAKY 2
#define ACT_SIGMOID 3
#define ACT_TANH 4
#define ACT_EXP 5
#define ACT_SOFTPLUS 6

#ifndef LEAKY_SLOPE
#define LEAKY_SLOPE 0.001
#endif

#define MLP_WW (MLP_WIDTH * MLP_WIDTH)

float mlp_activate(float z, int act) {
  switch (act) {
    case ACT_RELU: return max(z, 0.0);
    case ACT_LEAKY: return z > 0.0 ? z : LEAKY_SLOPE * z;
    case ACT_SIGMOID: return 1.0 / (1.0 + exp(-z));
    case ACT_TANH: return tanh(z);
    case ACT_EXP: return exp(z);
    case ACT_SOFTPLUS: return z > 20.0 ? z : log(1.0 + exp(z));
    default: return z;
  }
}

// d act / d z, from the activation's output h
float mlp_activate_grad(float h, int act) {
  switch (act) {
    case ACT_RELU: return h > 0.0 ? 1.0 : 0.0;
    case ACT_LEAKY: return h > 0.0 ? 1.0 : LEAKY_SLOPE;
    case ACT_SIGMOID: return h * (1.0 - h);
    case ACT_TANH: return 1.0 - h * h;
    case ACT_EXP: return h;
    case ACT_SOFTPLUS: return 1.0 - exp(-h);
    default: return 1.0;
  }
}

#ifdef MLP_BATCH
shared float mlp_act[MLP_BATCH][MLP_WIDTH + 1];  // +1 column: no bank conflicts on columns
shared float mlp_w[MLP_WIDTH][MLP_WIDTH + 1];

// stage weight matrix l in shared memory; transpose = false: mlp_w[o][c] = W_l[o][c],
// true: mlp_w[c][o] = W_l[o][c] (for the backward's W^T)
void mlp_load_weights(uint woff, int l, bool transpose) {
  uint t = gl_LocalInvocationIndex;
  for (uint i = t; i < MLP_WW; i += MLP_WIDTH) {
    uint o = i / MLP_WIDTH, c = i % MLP_WIDTH;
    float v = MLP_W(woff + uint(MLP_WW * l) + i);
    if (transpose) mlp_w[c][o] = v;
    else mlp_w[o][c] = v;
  }
}

// one layer forward on the rows in mlp_act, in place: thread o computes neuron o of every
// row. Only the first nout neurons are computed; the rest become 0 (with MLP_BIAS, neuron
// MLP_WIDTH-1 becomes the constant 1 that feeds the next layer's bias). Weights are staged
// transposed so that neighbouring threads read neighbouring words (vector loads on CPU
// drivers, no bank conflicts on GPUs); the row loop is innermost so each weight is loaded
// once per row block.
void mlp_forward_layer(uint woff, int l, int nout, int act) {
  uint o = gl_LocalInvocationIndex;
  mlp_load_weights(woff, l, true);
  barrier();
  float z[MLP_BATCH];
  for (int r = 0; r < MLP_BATCH; r++) z[r] = 0.0;
  for (int c = 0; c < MLP_WIDTH; c++) {
    float wc = mlp_w[c][o];
    for (int r = 0; r < MLP_BATCH; r++) z[r] += wc * mlp_act[r][c];
  }
  barrier();
#ifdef MLP_BIAS
  float pad = o == uint(MLP_WIDTH - 1) ? 1.0 : 0.0;
#else
  float pad = 0.0;
#endif
  for (int r = 0; r < MLP_BATCH; r++)
    mlp_act[r][o] = o < uint(nout) ? mlp_activate(z[r], act) : pad;
  barrier();
}

// one layer backward, in place: on entry mlp_act holds g_{l+1} = dE/dz_{l+1} (rows); on exit
// dE/dh_l = W_l^T g_{l+1}. The caller multiplies by act'(h_l) (it knows h_l).
void mlp_backward_layer(uint woff, int l) {
  uint c = gl_LocalInvocationIndex;
  mlp_load_weights(woff, l, false);
  barrier();
  float d[MLP_BATCH];
  for (int r = 0; r < MLP_BATCH; r++) d[r] = 0.0;
  for (int o = 0; o < MLP_WIDTH; o++) {
    float wo = mlp_w[o][c];
    for (int r = 0; r < MLP_BATCH; r++) d[r] += wo * mlp_act[r][o];
  }
  barrier();
  for (int r = 0; r < MLP_BATCH; r++) mlp_act[r][c] = d[r];
  barrier();
}
#endif  // MLP_BATCH

#ifdef MLP_GRAD_ROWS
// Blocked weight gradient of one matrix over the rows [pbeg, pend) (e.g. one chunk of the
// pixels; partial sums of several chunks are added by a reduction kernel):
//   acc(o, c) += sum_p g[p][o] h[p][c]
// with g = dE/dz_{l+1} (the layer's output gradient) and h = h_l (its input). The kernel
// defines, before or after the include,
//   float mlp_grad_in(int p, int c)    h[p][c], c < MLP_WIDTH
//   float mlp_grad_out(int p, int o)   g[p][o], o < MLP_WIDTH
// and runs 16 x 16 threads: thread (tx, ty) owns the MLP_GB x MLP_GB entries
// acc[i * MLP_GB + j] = (o, c) = (ty + 16 i, tx + 16 j), so that neighbouring threads touch
// neighbouring words. MLP_GRAD_ROWS rows of g and h are staged in shared memory per step
// (every thread loads some), then each thread does MLP_GB^2 multiply-adds per row from
// registers.
#define MLP_GB (MLP_WIDTH / 16)

float mlp_grad_in(int p, int c);
float mlp_grad_out(int p, int o);

shared float mlp_gs[MLP_GRAD_ROWS][MLP_WIDTH];
shared float mlp_hs[MLP_GRAD_ROWS][MLP_WIDTH];

// (o, c) of entry k of a thread's block
ivec2 mlp_grad_entry(int k) {
  return ivec2(int(gl_LocalInvocationID.y) + 16 * (k / MLP_GB),
               int(gl_LocalInvocationID.x) + 16 * (k % MLP_GB));
}

void mlp_weight_grad(int pbeg, int pend, inout float acc[MLP_GB * MLP_GB]) {
  uint t = gl_LocalInvocationIndex;
  uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
  for (int p0 = pbeg; p0 < pend; p0 += MLP_GRAD_ROWS) {
    for (uint e = t; e < uint(MLP_GRAD_ROWS * MLP_WIDTH); e += 256u) {
      int r = int(e) / MLP_WIDTH, col = int(e) % MLP_WIDTH;
      int p = p0 + r;
      bool ok = p < pend;
      mlp_hs[r][col] = ok ? mlp_grad_in(p, col) : 0.0;
      mlp_gs[r][col] = ok ? mlp_grad_out(p, col) : 0.0;
    }
    barrier();
    for (int r = 0; r < MLP_GRAD_ROWS; r++) {
      float gv[MLP_GB], hv[MLP_GB];
      for (int i = 0; i < MLP_GB; i++) {
        gv[i] = mlp_gs[r][ty + 16u * uint(i)];
        hv[i] = mlp_hs[r][tx + 16u * uint(i)];
      }
      for (int i = 0; i < MLP_GB; i++)
        for (int j = 0; j < MLP_GB; j++) acc[i * MLP_GB + j] += gv[i] * hv[j];
    }
    barrier();
  }
}
#endif  // MLP_GRAD_ROWS

#endif
