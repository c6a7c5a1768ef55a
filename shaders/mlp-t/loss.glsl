// The per-element losses of mlp-t and their derivatives (train.comp, train_cm.comp). The
// including kernel may set LOSS_T, LOSS_ABS and LOSS_C to run loss_value in float64.
#ifndef MLP_LOSS_GLSL
#define MLP_LOSS_GLSL

#ifndef LOSS_T
#define LOSS_T float
#define LOSS_ABS(x) abs(x)
#define LOSS_C(x) float(x)
#endif

// loss of output y against target t, in the forward's precision
LOSS_T loss_value(LOSS_T y, LOSS_T t) {
  LOSS_T d = y - t;
#if LOSS == 1
  return LOSS_ABS(d);
#elif LOSS == 2
  return d * d / (y * y + LOSS_C(0.01));
#elif LOSS == 3
  return LOSS_ABS(d) / (LOSS_ABS(y) + LOSS_ABS(t) + LOSS_C(0.01));
#else
  return d * d;
#endif
}

// d loss / d y, exact (also through the denominators of relative l2 and smape)
float loss_grad(float y, float t) {
  float d = y - t;
#if LOSS == 1
  return sign(d);
#elif LOSS == 2
  float den = y * y + 0.01;
  return 2.0 * d / den - d * d * 2.0 * y / (den * den);
#elif LOSS == 3
  float den = abs(y) + abs(t) + 0.01;
  return sign(d) / den - abs(d) * sign(y) / (den * den);
#else
  return 2.0 * d;
#endif
}

#endif
