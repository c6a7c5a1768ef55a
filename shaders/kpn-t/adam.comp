#version 460
#extension GL_GOOGLE_include_directive : enable
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "vkgraph.glsl"
#include "layout.gen"  // KPN_NW etc.: the weight layout (modules/kpn-t/module.py)
#include "rng.glsl"
#include "params.gen"  // the params block, generated from modules/kpn-t/params
#include "optim.glsl"
// The optimiser (param opt: 0 Adam, 1 SGD, 2 AdamW, optim.glsl) on fp32 master weights; frame
// f applies the gradient of frame f-1 (dw, gn are read through feedback edges), step t = f:
//   g *= gradclip / ||g|| if ||g|| > gradclip;  g += 2 L2 w;  then opt_step at rate a_t
// with a_t = alpha (schedule 0) or alpha (1 + cos(pi t / frames)) / 2 (schedule 1: cosine decay
// to 0 at the run's last frame); AdamW's decoupled decay is wdecay.
// A non-finite gradient (gn[1] == 0) or a non-finite result skips the update; stats[0]
// counts skipped frames. Frame 0 initialises: Xavier-uniform +-sqrt(6/128) from vkdt's
// xorshift with seed 133700013 i (init 1, or no wcp), else the checkpoint wcp; m = v = 0.
// Unused weights (rows 16..63 of matrix 6) stay 0. wout is the f16 copy for o-lut.
// stats[2]: the activation scale s of the fused kernels (fwd_cm and bck_fused multiply the
// features by s and divide it out of K and dE/dW: the MLP is positively homogeneous, so with
// a power of two this is exact but for f16's range), stats[3] its count of clean steps: frame
// 0 sets 1 and 0; a step with a non-finite gradient (an f16 overflow, or else) halves s (not
// below ASCALE_MIN), ASCALE_GROW clean steps in a row double it (not above 1). In the
// checkpoint with the rest of stats.
layout(push_constant) uniform Push { int has_wcp; } push;
SSBO_IN(0, float, dw)
SSBO_IN(1, float, gn)
SSBO_IN(2, float16_t, wcp)
SSBO_RW(3, float, w)
SSBO_RW(4, float, m)
SSBO_RW(5, float, v)
SSBO_RW(6, float, stats)
SSBO_OUT(7, float16_t, wout)
#include "guard.glsl"

#define ASCALE_MIN 9.5367431640625e-7  // 2^-20
#define ASCALE_GROW 1000.0

#ifdef KPN_CTX  // arch 1: the last matrix's first 32 rows (two 15-tap kernels and gains)
#define USED_LAST (2u * KPN_LAST_USED)
#else
#define USED_LAST KPN_LAST_USED
#endif

void main() {
  uint i = gl_GlobalInvocationID.x;
  if (i >= KPN_NW) return;
  bool used = i < KPN_LAST || (i - KPN_LAST) < USED_LAST;  // the last matrix: 16 or 32 rows
  float wi;
  if (global.frame == 0) {
    if (params.init != 0 || push.has_wcp == 0) {
      uint s = i * 133700013u;
      wi = (0.5 - mrand(s)) * 2.0 * sqrt(6.0 / 128.0);
    } else {
      wi = float(wcp[i]);
    }
    if (!used || !finite(wi)) wi = 0.0;
    m[i] = 0.0;
    v[i] = 0.0;
    guard_keep(i, wi, 0.0, 0.0, true);
    if (i == 0u) {
      stats[0] = 0.0; stats[1] = 0.0; stats[2] = 1.0; stats[3] = 0.0;
      guard_init();
    }
  } else {
    wi = w[i];
    bool ok = gn[1] != 0.0;
    Guard gd = guard_now(global.frame, guard_loss(), ok);
    if (gd.snapshot) guard_keep(i, wi, m[i], v[i], gd.best);
    if (gd.rollback) wi = guard_restore(i);
    if (ok && used && !gd.rollback && !gd.stopped) {
      float g = clipped(dw[i], gn[0], params.gradclip) + 2.0 * params.L2 * wi;
      float t = float(global.frame);
      float lr = params.alpha * gd.rate;
      if (params.schedule == 1)
        lr *= 0.5 * (1.0 + cos(M_PI * min(t / float(max(global.frame_cnt, 1)), 1.0)));
      float mi = m[i], vi = v[i];
      if (opt_step(wi, mi, vi, g, lr, t, params.opt, params.beta1, params.beta2, params.eps,
                   params.wdecay)) {
        m[i] = mi;
        v[i] = vi;
      }
    }
    if (i == 0u) {
      if (!ok) stats[0] += 1.0;
      stats[1] = gn[0];
      float sc = stats[2] > 0.0 ? stats[2] : 1.0, clean = stats[3];
      dyn_scale(sc, clean, !ok, ASCALE_MIN, 1.0, ASCALE_GROW);
      stats[2] = sc;
      stats[3] = clean;
      guard_update(global.frame, gd, guard_loss(), !ok);
    }
  }
  w[i] = wi;
  wout[i] = float16_t(clamp(wi, -65504.0, 65504.0));
}
