// The MLP forward with float64 activations and sums (weights stay fp32, as stored): the
// PRECISE variant used by the finite-difference gradient check, where the rounding noise of
// the fp32 forward (measured 2.5e-8 in a loss of 2.4) would swamp E(w+h) - E(w-h) at steps
// small enough to keep leaky-ReLU kinks out. Include after mlp.glsl (it stages the weights).
// Every activation of mlp.glsl; GLSL has no float64 exp/log, so those are below (a smooth
// approximation error does not matter to the check, only rounding noise does).
#ifndef MLP_F64_GLSL
#define MLP_F64_GLSL

#include "f64.glsl"

double mlp_activate_f64(double z, int act) {
  switch (act) {
    case ACT_RELU: return max(z, 0.0lf);
    case ACT_LEAKY: return z > 0.0lf ? z : z * double(LEAKY_SLOPE);
    case ACT_SIGMOID: return 1.0lf / (1.0lf + mlp_exp64(-z));
    case ACT_TANH: {
      double t = mlp_exp64(-2.0lf * abs(z));
      return sign(z) * (1.0lf - t) / (1.0lf + t);
    }
    case ACT_EXP: return mlp_exp64(z);
    case ACT_SOFTPLUS: return z > 30.0lf ? z + mlp_exp64(-z) : mlp_log64(1.0lf + mlp_exp64(z));
    default: return z;
  }
}

shared double mlp_dact[MLP_BATCH][MLP_WIDTH + 1];

void mlp_forward_layer_f64(uint woff, int l, int nout, int act) {
  uint o = gl_LocalInvocationIndex;
  mlp_load_weights(woff, l, true);
  barrier();
  double z[MLP_BATCH];
  for (int r = 0; r < MLP_BATCH; r++) z[r] = 0.0lf;
  for (int c = 0; c < MLP_WIDTH; c++) {
    double wc = double(mlp_w[c][o]);
    for (int r = 0; r < MLP_BATCH; r++) z[r] += wc * mlp_dact[r][c];
  }
  barrier();
#ifdef MLP_BIAS
  double pad = o == uint(MLP_WIDTH - 1) ? 1.0lf : 0.0lf;  // as mlp_forward_layer
#else
  double pad = 0.0lf;
#endif
  for (int r = 0; r < MLP_BATCH; r++)
    mlp_dact[r][o] = o < uint(nout) ? mlp_activate_f64(z[r], act) : pad;
  barrier();
}

#endif
