// The optimiser step of every trainer's adam kernel (kpn-t, mlp-t; pipeline/trainer.py), on
// fp32 master weights, step t >= 1 (frame f applies the gradient of frame f - 1, t = f):
//   OPT_ADAM:  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//              w -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
//   OPT_SGD:   w -= lr g                                           (m, v untouched)
//   OPT_ADAMW: Adam's step, and w -= lr wd w (the decay decoupled from the moments, as
//              Loshchilov & Hutter's AdamW: the decay term sees w before the step)
//   OPT_MOMENTUM: m = mu m + g;  w -= lr m              (heavy ball, not Nesterov; v untouched)
//   OPT_MUON:  opt_step is AdamW's step (the params outside 2-D matrices); a matrix's elements
//              take muon_step with the Newton-Schulz update o of shaders/trainer/muon.comp
// A step whose result is not finite changes nothing (opt_step returns false); the caller has
// clipped g (clipped()) and added any coupled L2 term. The numpy reference is
// vkgraph/pipeline/optim.py (float64), tested against this code in tests/test_optim.py.
#define OPT_ADAM 0
#define OPT_SGD 1
#define OPT_ADAMW 2
#define OPT_MOMENTUM 3
#define OPT_MUON 4

// g scaled to norm `clip` where the gradient's norm exceeds it (clip <= 0: no clipping)
float clipped(float g, float norm, float clip) {
  return clip > 0.0 && norm > clip ? g * (clip / norm) : g;
}

bool opt_step(inout float w, inout float m, inout float v, float g, float lr, float t, int opt,
              float b1, float b2, float eps, float wd, float mu) {
  if (opt == OPT_SGD) {
    float wn = w - lr * g;
    if (!finite(wn)) return false;
    w = wn;
    return true;
  }
  if (opt == OPT_MOMENTUM) {
    float mi = mu * m + g;
    float wn = w - lr * mi;
    if (!(finite(wn) && finite(mi))) return false;
    w = wn;
    m = mi;
    return true;
  }
  float mi = b1 * m + (1.0 - b1) * g;
  float vi = b2 * v + (1.0 - b2) * g * g;
  float mh = mi / (1.0 - pow(b1, t));
  float vh = vi / (1.0 - pow(b2, t));
  float wn = w - lr * mh / (sqrt(vh) + eps);
  if (opt == OPT_ADAMW || opt == OPT_MUON) wn -= lr * wd * w;
  if (!(finite(wn) && finite(mi) && finite(vi))) return false;
  w = wn;
  m = mi;
  v = vi;
  return true;
}

// Muon's step of a matrix element: the momentum m = mu m + g (muon.comp formed the
// update o = NS5(g + mu m) sqrt(max(1, rows/cols)) from the same values), then
// w -= lr o + lr wd w (the decay decoupled, as AdamW's). Not finite: nothing changes.
bool muon_step(inout float w, inout float m, float g, float o, float lr, float mu, float wd) {
  float mi = mu * m + g;
  float wn = w - lr * o - lr * wd * w;
  if (!(finite(wn) && finite(mi))) return false;
  w = wn;
  m = mi;
  return true;
}

// A dynamic power-of-two scale after a step (mlp-t's loss scale, kpn-t's activation scale;
// stats[2] and its count of clean steps stats[3]): a bad step (non-finite, skipped) halves it,
// not below lo; `grow` clean steps in a row double it, not above hi.
void dyn_scale(inout float sc, inout float clean, bool bad, float lo, float hi, float grow) {
  clean += 1.0;
  if (bad) {
    sc = max(lo, 0.5 * sc);
    clean = 0.0;
  } else if (clean >= grow) {
    sc = min(hi, 2.0 * sc);
    clean = 0.0;
  }
}
