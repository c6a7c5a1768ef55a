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
// The optimizer (OPT: adam, sgd or adamw, optim.glsl) on fp32 master weights; frame f applies
// the gradient of frame f-1 (dw and gn come through feedback edges), step t = f:
//   g = dw * min(1, gradclip / ||dw_n||)   (gradclip > 0; per net n), then opt_step
// (AdamW's decoupled decay: wdecay)
// A net whose gradient has a non-finite entry (gn[2n+1] == 0), or whose update would not be
// finite, keeps its weights; stats[0] counts such skipped (net, frame) updates, stats[1] is
// the largest gradient norm of the step. Frame 0 initialises: from the checkpoint wcp
// (has_wcp), else Xavier-uniform +-sqrt(6/(fan_in + fan_out)) from mrand seeded by
// (seed, i); biases and padding 0; m = v = 0. Table entries (i >= NW, the encoding's table)
// start uniform in +-1e-4 (mrand seeded by (seed, "tble", i)) and step with talpha (alpha
// when talpha is 0); the table counts as net 0's for the norm.
// W16OUT (the coopmat variant): w16 = the weights as f16, the operands of train_cm.
// DYN_SCALE: stats[2] is the dynamic loss scale that train_cm multiplies its gradients by
// and stats[3] the count of clean steps since it last changed: frame 0 sets lscale and 0; a
// step with a non-finite gradient in any net (skipped) halves it (not below min(1, lscale)),
// `lsgrow` clean steps in a row double it (not above max(2^15, lscale)). In the checkpoint
// with the rest of stats, so a resumed run goes on with the same scale.
layout(push_constant) uniform Push { int has_wcp; } push;
SSBO_IN(0, float, dw)
SSBO_IN(1, float, gn)
#ifdef WCP16
SSBO_IN(2, float16_t, wcp)
#else
SSBO_IN(2, float, wcp)
#endif
SSBO_RW(3, float, w)
SSBO_RW(4, float, m)
SSBO_RW(5, float, v)
SSBO_RW(6, float, stats)
#ifdef W16OUT
SSBO_OUT(7, float16_t, w16)
#endif
#include "guard.glsl"

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

void main() {
  uint i = gl_GlobalInvocationID.x;
  if (i >= uint(NP)) return;
  bool table = i >= uint(NW);
  int n = table ? 0 : int(i) / NET_W, k = int(i) % NET_W;
  bool used = table ? i - uint(NW) < uint(TABLE_USED) : weight_used(k);
  float alpha = table && params.talpha > 0.0 ? params.talpha : params.alpha;
  float wi;
  if (global.frame == 0) {
    wi = push.has_wcp != 0 ? float(wcp[i]) : initial(i, k, table);
    if (!used || !finite(wi)) wi = 0.0;
    m[i] = 0.0;
    v[i] = 0.0;
    guard_keep(i, wi, 0.0, 0.0, true);
    if (i == 0u) {
      stats[0] = 0.0; stats[1] = 0.0; stats[2] = params.lscale; stats[3] = 0.0;
      guard_init();
    }
  } else {
    wi = w[i];
    bool ok = gn[2 * n + 1] != 0.0;
    Guard gd = guard_now(global.frame, guard_loss(), ok);
    if (gd.snapshot) guard_keep(i, wi, m[i], v[i], gd.best);
    if (gd.rollback) wi = guard_restore(i);
    if (ok && used && !gd.rollback && !gd.stopped) {
      float g = clipped(dw[i], gn[2 * n], params.gradclip);
      float mi = m[i], vi = v[i];
      if (opt_step(wi, mi, vi, g, alpha * gd.rate, float(global.frame), OPT, params.beta1, params.beta2,
                   params.eps, params.wdecay)) {
        m[i] = mi;
        v[i] = vi;
      }
    }
    if (i == 0u) {
      float skipped = 0.0, gmax = 0.0;
      for (int j = 0; j < NETS; j++) {
        if (gn[2 * j + 1] == 0.0) skipped += 1.0;
        else gmax = max(gmax, gn[2 * j]);
      }
      stats[0] += skipped;
      stats[1] = gmax;
      guard_update(global.frame, gd, guard_loss(), skipped > 0.0);
#ifdef DYN_SCALE
      float sc = stats[2] > 0.0 ? stats[2] : params.lscale, clean = stats[3];
      dyn_scale(sc, clean, skipped > 0.0, min(1.0, params.lscale), max(32768.0, params.lscale),
                float(params.lsgrow));
      stats[2] = sc;
      stats[3] = clean;
#endif
    }
  }
  w[i] = wi;
#ifdef W16OUT
  if (i < uint(NW)) w16[i] = float16_t(wi);
#endif
}
