// Double-float sums: a value kept as an unevaluated pair (hi, lo) of floats, exact to about
// 48 bits. Used where fp32 rounding of a long sum would swamp what is measured (the loss
// read by the finite-difference gradient check: E(w+h) - E(w-h) for small h).
// `precise` keeps compilers from contracting or reassociating the error terms away.
#ifndef DFLOAT_GLSL
#define DFLOAT_GLSL

// Knuth's TwoSum: s + e == a + b exactly
vec2 two_sum(float a, float b) {
  precise float s = a + b;
  precise float bb = s - a;
  precise float e = (a - (s - bb)) + (b - bb);
  return vec2(s, e);
}

vec2 df_add(vec2 a, vec2 b) {
  vec2 s = two_sum(a.x, b.x);
  precise float lo = s.y + a.y + b.y;
  return two_sum(s.x, lo);
}



// exact product: p + e == a * b (fma rounds once)
vec2 two_prod(float a, float b) {
  precise float p = a * b;
  precise float e = fma(a, b, -p);
  return vec2(p, e);
}

vec2 df_mul_f(vec2 a, float b) {
  vec2 p = two_prod(a.x, b);
  precise float lo = p.y + a.y * b;
  return two_sum(p.x, lo);
}

// a / b for double-float a and b, one Newton correction
vec2 df_div(vec2 a, vec2 b) {
  precise float q = a.x / b.x;
  vec2 qb = df_mul_f(b, q);
  vec2 r = df_add(a, -qb);
  precise float q2 = r.x / b.x;
  return two_sum(q, q2);
}

#endif
