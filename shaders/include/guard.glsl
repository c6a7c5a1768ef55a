// The divergence guard of every trainer's adam kernel (pipeline/trainer.py: optimizer),
// included after the kernel's own bindings (it uses `stats` and `params`). With ROLLBACK
// (GUARD_B: its first binding) the optimiser keeps a copy of the last good weights and
// moments (wg, mg, vg: taken every SNAP_EVERY frames when the loss the current weights gave
// was finite and not exploded, the net's gradient finite, and no update went wrong since)
// and of the best weights seen (wbest: the lowest smoothed loss at those frames; o-lut
// `best 1` writes them). After `rollback` consecutive bad updates (a non-finite gradient or
// loss, or a loss above `blowup` times the smoothed loss) it rolls back to the copy and
// halves the learning rate; after `retries` rollbacks it rolls back a last time and stops
// updating (G_STOPPED: the host ends the run with an error). The state is in stats, two
// slots used in turn: at frame f every thread reads slot (f - 1) & 1, which thread 0 wrote
// at frame f - 1, and thread 0 writes slot f & 1, so all threads of a frame decide alike.
// Without ROLLBACK (`vkgraph shaders --check`'s plain compile) the guard does nothing.
struct Guard {
  bool rollback;  // restore wg, mg, vg this frame, no update
  bool stopped;   // no update
  bool snapshot;  // copy w, m, v to wg, mg, vg before the update
  bool best;      // and w to wbest
  float rate;     // the learning rate's factor
};

#ifdef ROLLBACK
SSBO_IN(GUARD_B, float, cur)
SSBO_RW(GUARD_B + 1, float, wg)
SSBO_RW(GUARD_B + 2, float, mg)
SSBO_RW(GUARD_B + 3, float, vg)
#ifdef WBEST16
SSBO_OUT(GUARD_B + 4, float16_t, wbest)
#else
SSBO_OUT(GUARD_B + 4, float, wbest)
#endif

#define SNAP_EVERY 16u
#define G_BASE 4u       // stats[4 ..]: two slots of G_SIZE
#define G_SIZE 8u
#define G_CONSEC 0u     // consecutive bad updates
#define G_RATE 1u       // the learning rate's factor (halved at each rollback)
#define G_ROLLBACKS 2u  // rollbacks so far
#define G_EMA 3u        // smoothed loss (0: none yet)
#define G_BEST 4u       // the lowest smoothed loss at a snapshot (wbest's)
#define G_STOPPED 5u    // 1: out of retries, no more updates
#define G_ACT 6u        // 1: roll back at the next frame

float guard(uint slot, uint k) { return stats[G_BASE + G_SIZE * slot + k]; }

float smoothed(float ema, float loss) { return ema == 0.0 ? loss : 0.99 * ema + 0.01 * loss; }

// a loss the weights gave is usable: finite and not exploded against the smoothed loss
bool loss_ok(float loss, float ema) {
  return finite(loss) && !(params.blowup > 0.0 && ema > 0.0 && loss > params.blowup * ema);
}

// what frame f >= 1 does, the same in every thread: `loss` is the loss the current weights
// gave (frame f - 1's), `ok` whether this thread's net's gradient is finite
Guard guard_now(uint f, float loss, bool ok) {
  uint p = (f + 1u) & 1u;
  Guard g;
  g.rollback = guard(p, G_ACT) != 0.0;
  g.stopped = guard(p, G_STOPPED) != 0.0;
  float ema = guard(p, G_EMA);
  // on frame numbers alone, so a resumed run takes the same snapshots as an uninterrupted one
  g.snapshot = !g.rollback && !g.stopped && f % SNAP_EVERY == 0u && guard(p, G_CONSEC) == 0.0
               && ok && loss_ok(loss, ema);
  g.best = g.snapshot && smoothed(ema, loss) < guard(p, G_BEST);
  g.rate = guard(p, G_RATE);
  return g;
}

// frame 0: both slots fresh
void guard_init() {
  for (uint s = 0u; s < 2u; s++) {
    for (uint k = 0u; k < G_SIZE; k++) stats[G_BASE + G_SIZE * s + k] = 0.0;
    stats[G_BASE + G_SIZE * s + G_RATE] = 1.0;
    stats[G_BASE + G_SIZE * s + G_BEST] = 3.0e38;
  }
}

// thread 0 at frame f >= 1: slot f & 1 from slot (f - 1) & 1, given thread 0's Guard g, the
// loss the weights gave and whether any net's update was skipped
void guard_update(uint f, Guard g, float loss, bool skipped) {
  uint p = (f + 1u) & 1u, o = G_BASE + G_SIZE * (f & 1u);
  float consec = guard(p, G_CONSEC), rate = g.rate, rollbacks = guard(p, G_ROLLBACKS);
  float ema = guard(p, G_EMA), best = guard(p, G_BEST), stopped = guard(p, G_STOPPED);
  float act = 0.0;
  if (g.rollback || g.stopped) {
    consec = 0.0;  // nothing was applied this frame
  } else {
    bool ok = loss_ok(loss, ema);
    if (g.best) best = smoothed(ema, loss);
    if (ok) ema = smoothed(ema, loss);
    consec = ok && !skipped ? 0.0 : consec + 1.0;
    if (params.rollback > 0 && consec >= float(params.rollback)) {
      act = 1.0;
      consec = 0.0;
      if (rollbacks >= float(params.retries)) {
        stopped = 1.0;
      } else {
        rollbacks += 1.0;
        rate *= 0.5;
      }
    }
  }
  stats[o + G_CONSEC] = consec;
  stats[o + G_RATE] = rate;
  stats[o + G_ROLLBACKS] = rollbacks;
  stats[o + G_EMA] = ema;
  stats[o + G_BEST] = best;
  stats[o + G_STOPPED] = stopped;
  stats[o + G_ACT] = act;
}
// the loss the current weights gave (frame f - 1's)
float guard_loss() { return cur[0] + cur[1]; }

// param i at frame 0 (w, with m = v = 0) or at a snapshot (gd.snapshot): the copies
void guard_keep(uint i, float w, float mi, float vi, bool best) {
  wg[i] = w;
  mg[i] = mi;
  vg[i] = vi;
#ifdef WBEST16
  if (best) wbest[i] = float16_t(clamp(w, -65504.0, 65504.0));
#else
  if (best) wbest[i] = w;
#endif
}

// the copies back (gd.rollback): m and v, and w returned
float guard_restore(uint i) {
  m[i] = mg[i];
  v[i] = vg[i];
  return wg[i];
}
#else
Guard guard_now(uint f, float loss, bool ok) { return Guard(false, false, false, false, 1.0); }
void guard_init() {}
void guard_update(uint f, Guard g, float loss, bool skipped) {}
float guard_loss() { return 0.0; }
void guard_keep(uint i, float w, float mi, float vi, bool best) {}
float guard_restore(uint i) { return 0.0; }
#endif
