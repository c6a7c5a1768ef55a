#version 460
#extension GL_GOOGLE_include_directive : enable
#if defined(WCP16) || defined(W16OUT)
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#endif
#include "vkgraph.glsl"
#include "rng.glsl"
#include "params.gen"  // the params block, generated from modules/mlp-t/params
#include "config.glsl"
#include "optim.glsl"
// mlp-t's optimiser: the trainers' one kernel (adam.glsl) with mlp-t's parts. The gradient
// g = dw * min(1, gradclip / ||dw_n||) (gradclip > 0; per net n), then opt_step (OPT: adam,
// sgd or adamw; AdamW's decoupled decay: wdecay) at alpha; table entries (i >= NW, the
// encoding's table) step with talpha (alpha when talpha is 0) and count as net 0's.
// stats[1] is the largest gradient norm of the nets that stepped. Frame 0: the checkpoint wcp
// (has_wcp), else Xavier-uniform +-sqrt(6/(fan_in + fan_out)) from mrand seeded by (seed, i);
// biases and padding 0; table entries uniform in +-1e-4 (mrand seeded by (seed, "tble", i)).
// W16OUT (the coopmat variant): w16 = the weights as f16, the operands of train_cm.
// DYN_SCALE: stats[2] is the dynamic loss scale that train_cm multiplies its gradients by:
// frame 0 sets lscale; halved (not below min(1, lscale)) after a step with a non-finite
// gradient in any net, doubled (not above max(2^15, lscale)) after `lsgrow` clean steps.
#define ADAM_NP NP
#define ADAM_NETS NETS
#define ADAM_OPT OPT
#define SCALE_START params.lscale
#define SCALE_LO min(1.0, params.lscale)
#define SCALE_HI max(32768.0, params.lscale)
#define SCALE_GROW float(params.lsgrow)
#include "adam.glsl"

// frame 0's value of param i (k = its index inside the net): Xavier-uniform for weights,
// +-1e-4 for table entries, from one random number each
float initial(uint i, int k, bool table) {
  int l = k / (MLP_WIDTH * MLP_WIDTH), c = k % MLP_WIDTH;
  int nin = l == 0 ? N_IN : HIDDEN;
  int nout = l == MLP_LAYERS - 1 ? N_OUT : HIDDEN;
  if (!table && c >= nin) return 0.0;  // bias column (or padding)
  uint s = rng_state(uint(params.seed), table ? 0x74626c65u : 0x6d6c7074u, i, 0u);
  return (2.0 * mrand(s) - 1.0) * (table ? 1e-4 : sqrt(6.0 / float(nin + nout)));
}

bool in_table(uint i) { return i >= uint(NW); }

float adam_start(uint i) {
  return push.has_wcp != 0 ? float(wcp[i]) : initial(i, int(i) % NET_W, in_table(i));
}

bool adam_used(uint i) {
  return in_table(i) ? i - uint(NW) < uint(TABLE_USED) : weight_used(int(i) % NET_W);
}

uint adam_net(uint i) { return in_table(i) ? 0u : i / uint(NET_W); }

float adam_grad(uint i, float w) {
  return clipped(dw[i], gn[2u * adam_net(i)], params.gradclip);
}

float adam_lr(uint i, float rate) {
  return (in_table(i) && params.talpha > 0.0 ? params.talpha : params.alpha) * rate;
}

float adam_gnorm() {
  float gmax = 0.0;
  for (int j = 0; j < NETS; j++)
    if (gn[2 * j + 1] != 0.0) gmax = max(gmax, gn[2 * j]);
  return gmax;
}

void adam_store16(uint i, float w) {
#ifdef W16OUT
  if (i < uint(NW)) w16[i] = float16_t(w);
#endif
}
