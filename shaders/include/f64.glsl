// float64 exp and log, which GLSL lacks (for the PRECISE variants of the gradient check: a
// smooth approximation error does not matter to it, only rounding noise does).
#ifndef F64_GLSL
#define F64_GLSL

// exp(x) = 2^k exp(r), r = x - k ln2 in [-ln2/2, ln2/2], exp(r) by its Taylor series to
// degree 14 (remainder < 1e-18)
double mlp_exp64(double x) {
  const double ln2 = 0.6931471805599453094lf;
  x = clamp(x, -700.0lf, 700.0lf);
  double k = floor(x / ln2 + 0.5lf);
  double r = x - k * ln2;
  double s = 1.0lf;
  for (int n = 14; n >= 1; n--) s = 1.0lf + s * r / double(n);
  return ldexp(s, int(k));
}

// log(x), x > 0: the fp32 log refined by Newton steps y += x exp(-y) - 1 (1e-7 -> 1e-14 -> 1e-16)
double mlp_log64(double x) {
  double y = double(log(float(x)));
  for (int i = 0; i < 2; i++) y += x * mlp_exp64(-y) - 1.0lf;
  return y;
}

#endif
