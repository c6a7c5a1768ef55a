// The optimiser kernel of every trainable module (pipeline/trainer.py: optimizer): one thread
// per trained param, fp32 master weights; frame f applies the gradient of frame f - 1 (dw and
// gn come through feedback edges), step t = f, by opt_step (optim.glsl: Adam, SGD, AdamW,
// SGD with momentum) at the module's learning rate times the guard's factor (guard.glsl).
// ADAM_MUON (the scaffold's Muon, pipeline/trainer.py): input `o` at binding MUON_B holds the
// Newton-Schulz update of every 2-D matrix (shaders/trainer/muon.comp, run before this kernel
// in the same frame); while ADAM_OPT is OPT_MUON a matrix element steps by muon_step with
// it, every other param by opt_step (AdamW's step). The momentum is params.momentum.
//
// Frame 0 initialises: w = adam_start(i) (the checkpoint wcp or the module's random init),
// 0 where the param is unused or the start is not finite; m = v = 0; stats[0..3] = 0, 0,
// SCALE_START, 0. Frame f >= 1: a param whose net's gradient has a non-finite entry
// (gn[2 net + 1] == 0), or whose step would not be finite, keeps its values; stats[0] counts
// the skipped (net, frame) updates, stats[1] = adam_gnorm() (the step's gradient norm).
// DYN_SCALE: stats[2] is a dynamic power-of-two scale and stats[3] its count of clean steps
// (dyn_scale: halved after a frame with a skipped net, not below SCALE_LO; doubled after
// SCALE_GROW clean frames, not above SCALE_HI): mlp-t's loss scale, kpn-t's activation scale.
//
// The includer (a module's adam.comp) includes vkgraph.glsl, rng.glsl, params.gen and
// optim.glsl first, defines ADAM_NP (params), ADAM_NETS (nets: gn holds a (norm, finite) pair
// per net), ADAM_OPT (optim.glsl's OPT_*), SCALE_START (and with DYN_SCALE SCALE_LO,
// SCALE_HI, SCALE_GROW), optionally WCP16 (the checkpoint is f16) and W16OUT (binding 7: an
// f16 copy of the weights, written by adam_store16), and then defines the hooks declared
// below. Bindings 0..7 here, the guard's from GUARD_B (pipeline/trainer.py: optimizer).
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
#ifdef ADAM_MUON
#include "muon.glsl"
SSBO_IN(MUON_B, float, o)
#endif

float adam_start(uint i);          // frame 0's value of param i (wcp, or the module's init)
bool adam_used(uint i);            // whether the network uses param i (unused ones stay 0)
uint adam_net(uint i);             // the net param i belongs to (its gn pair)
float adam_grad(uint i, float w);  // param i's gradient: dw clipped, any coupled term added
float adam_lr(uint i, float rate); // param i's learning rate, given the guard's factor
float adam_gnorm();                // stats[1]: the step's gradient norm
void adam_store16(uint i, float w); // the f16 copy (W16OUT), or nothing

// frame f >= 1 on param i: the guard's rollback or snapshot, then the step
float adam_update(uint i, bool used) {
  float wi = w[i];
  bool ok = gn[2u * adam_net(i) + 1u] != 0.0;
  Guard gd = guard_now(global.frame, guard_loss(), ok);
  if (gd.snapshot) guard_keep(i, wi, m[i], v[i], gd.best);
  if (gd.rollback) wi = guard_restore(i);
  if (ok && used && !gd.rollback && !gd.stopped) {
    float g = adam_grad(i, wi);
    float mi = m[i], vi = v[i];
    float lr = adam_lr(i, gd.rate);
    bool stepped;
#ifdef ADAM_MUON
    if (ADAM_OPT == OPT_MUON && muon_matrix(i) >= 0)
      stepped = muon_step(wi, mi, g, o[i], lr, params.momentum, params.wdecay);
    else
#endif
      stepped = opt_step(wi, mi, vi, g, lr, float(global.frame), ADAM_OPT, params.beta1,
                         params.beta2, params.eps, params.wdecay, params.momentum);
    if (stepped) {
      m[i] = mi;
      v[i] = vi;
    }
  }
  if (i == 0u) {
    float skipped = 0.0;
    for (uint j = 0u; j < uint(ADAM_NETS); j++)
      if (gn[2u * j + 1u] == 0.0) skipped += 1.0;
    stats[0] += skipped;
    stats[1] = adam_gnorm();
    guard_update(global.frame, gd, guard_loss(), skipped > 0.0);
#ifdef DYN_SCALE
    float sc = stats[2] > 0.0 ? stats[2] : SCALE_START, clean = stats[3];
    dyn_scale(sc, clean, skipped > 0.0, SCALE_LO, SCALE_HI, SCALE_GROW);
    stats[2] = sc;
    stats[3] = clean;
#endif
  }
  return wi;
}

void main() {
  uint i = gl_GlobalInvocationID.x;
  if (i >= uint(ADAM_NP)) return;
  bool used = adam_used(i);
  float wi;
  if (global.frame == 0) {
    wi = adam_start(i);
    if (!used || !finite(wi)) wi = 0.0;
    m[i] = 0.0;
    v[i] = 0.0;
    guard_keep(i, wi, 0.0, 0.0, true);
    if (i == 0u) {
      stats[0] = 0.0; stats[1] = 0.0; stats[2] = SCALE_START; stats[3] = 0.0;
      guard_init();
    }
  } else {
    wi = adam_update(i, used);
  }
  w[i] = wi;
  adam_store16(i, wi);
}
