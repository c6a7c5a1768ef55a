// Random numbers as vkdt draws them on the GPU (reusable by any kernel).
//   mrand(s): Marsaglia xorshift32 step (shifts 13 left, 17 right, 5 left) on the uint state s,
//             then the top 24 bits as a float in [0, 1): (s >> 8) * 2^-24.
//   warp_gaussian(u): Box-Muller, two uniforms in [0, 1) -> two independent standard normals,
//             r = sqrt(-2 ln(1 - u.x)) (1 - u.x avoids log(0)), (r cos 2 pi u.y, r sin 2 pi u.y).
//   hash32(x): a 32-bit integer hash (xor-shift-multiply rounds, full avalanche) to derive
//             independent states from counters: s = hash32(i + hash32(frame + hash32(seed))).
//   rng_state(a, b, c, d): that chain over four counters, never 0.
// A state of 0 stays 0 (xorshift's fixed point): seed with something else.
#ifndef VKGRAPH_RNG_GLSL
#define VKGRAPH_RNG_GLSL

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

uint xorshift32(uint s) {
  s ^= s << 13;
  s ^= s >> 17;
  s ^= s << 5;
  return s;
}

float mrand(inout uint s) {
  s = xorshift32(s);
  return float(s >> 8) * (1.0 / 16777216.0);
}

uint hash32(uint x) {
  x ^= x >> 16;
  x *= 0x21f0aaadu;
  x ^= x >> 15;
  x *= 0x735a2d97u;
  x ^= x >> 15;
  return x;
}

uint rng_state(uint a, uint b, uint c, uint d) {
  uint s = hash32(d + hash32(c + hash32(b + hash32(a))));
  return s == 0u ? 1u : s;
}

vec2 warp_gaussian(vec2 u) {
  float r = sqrt(-2.0 * log(1.0 - u.x));
  float phi = 2.0 * M_PI * u.y;
  return r * vec2(cos(phi), sin(phi));
}

#endif
