#version 460
#extension GL_GOOGLE_include_directive : enable
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "vkgraph.glsl"
#include "layout.gen"  // KPN_NW etc.: the weight layout (modules/kpn-t/forward.py)
#include "rng.glsl"
#include "params.gen"  // the params block, generated from modules/kpn-t/params
#include "optim.glsl"
// kpn-t's optimiser: the trainers' one kernel (adam.glsl) with kpn-t's parts. The gradient:
//   g *= gradclip / ||g|| if ||g|| > gradclip;  g += 2 L2 w;  then opt_step (param opt) at
// a_t = alpha (schedule 0) or alpha (1 + cos(pi t / frames)) / 2 (schedule 1: cosine decay
// to 0 at the run's last frame); AdamW's decoupled decay is wdecay. Frame 0: Xavier-uniform
// +-sqrt(6/128) from vkdt's xorshift with seed 133700013 i (init 1, or no wcp), else the
// checkpoint wcp (f16). Unused weights (rows past K's of the last matrix) stay 0. w16 is the
// f16 copy for o-lut and the cooperative-matrix kernels.
// stats[2]: the activation scale s of the fused kernels (fwd_cm and bck_fused multiply the
// features by s and divide it out of K and dE/dW: the MLP is positively homogeneous, so with
// a power of two this is exact but for f16's range), stats[3] its count of clean steps: frame
// 0 sets 1 and 0; a step with a non-finite gradient (an f16 overflow, or else) halves s (not
// below 2^-20), 1000 clean steps in a row double it (not above 1).
#define ADAM_NP KPN_NW
#define ADAM_NETS 1
#define ADAM_OPT params.opt
#define WCP16 1
#define W16OUT 1
#define DYN_SCALE 1
#define SCALE_START 1.0
#define SCALE_LO 9.5367431640625e-7  // 2^-20
#define SCALE_HI 1.0
#define SCALE_GROW 1000.0
#include "adam.glsl"

// the last matrix's rows in use: KPN_ROWS, which module.py passes (forward.py's arch_shape:
// 16 for vkdt's architecture, 32 for arch 1, 56 for arch 2); vkdt's 16 where it is not given
#ifdef KPN_ROWS
#define USED_LAST (KPN_ROWS * 64u)
#else
#define USED_LAST KPN_LAST_USED
#endif

float adam_start(uint i) {
  if (params.init != 0 || push.has_wcp == 0) {
    uint s = i * 133700013u;
    return (0.5 - mrand(s)) * 2.0 * sqrt(6.0 / 128.0);
  }
  return float(wcp[i]);
}

bool adam_used(uint i) { return i < KPN_LAST || (i - KPN_LAST) < USED_LAST; }

uint adam_net(uint i) { return 0u; }

float adam_grad(uint i, float w) {
  return clipped(dw[i], gn[0], params.gradclip) + 2.0 * params.L2 * w;
}

float adam_lr(uint i, float rate) {
  float lr = params.alpha * rate;
  if (params.schedule == 1) {
    float t = float(global.frame);
    lr *= 0.5 * (1.0 + cos(M_PI * min(t / float(max(global.frame_cnt, 1)), 1.0)));
  }
  return lr;
}

float adam_gnorm() { return gn[0]; }  // also where the step was skipped

void adam_store16(uint i, float w) { w16[i] = float16_t(clamp(w, -65504.0, 65504.0)); }
