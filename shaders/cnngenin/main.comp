#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
#include "rng.glsl"

// cnngenin: training pairs for kpn-t (see modules/cnngenin/README.md for the maths).
// One thread per output pixel; every thread redraws the per-frame numbers from the same seed.

layout(std430, set = 0, binding = 1) readonly buffer Params {
  int generate;  // 0 static, 1 random tile/flip/exposure, 2 + noise, 3 + mosaic, 4 both
  int tiles;     // 1: 64x64 tiles, 0: full image
  int seed;      // added to vkdt's per-frame seed
  float noise;   // scales the drawn noise a and b (1: vkdt's range)
} params;

IMG_IN(0, imgi)
IMG_IN(1, refi)
IMG_OUT(2, imgo)
IMG_OUT(3, refo)
SSBO_OUT(4, float, noiseab)

const float NOISE_SCALE = 65535.0;
const float HALF_MAX = 65504.0;

// the nearest half-precision value (ties to even), in integer arithmetic: a driver may fold
// unpackHalf2x16(packHalf2x16(x)) into x (NVIDIA's does)
float round_half(float x) {
  if (abs(x) < 6.103515625e-05) return roundEven(x * 16777216.0) / 16777216.0;  // subnormal
  uint b = floatBitsToUint(x);
  b += 0x0FFFu + ((b >> 13) & 1u);
  return uintBitsToFloat(b & 0xFFFFE000u);
}

// what an rgba16f image would hold: round to the nearest half (finite range)
vec4 to_half(vec4 v) {
  v = clamp(v, vec4(-HALF_MAX), vec4(HALF_MAX));
  return vec4(round_half(v.x), round_half(v.y), round_half(v.z), round_half(v.w));
}

void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (!inside(2, p)) return;
  ivec2 osize = node.roi[2].xy;

  uint s = 123456789u + 133700u * uint(global.frame) + uint(params.seed);
  float ev = 0.0;
  int flip = 0;
  ivec2 off = ivec2(0);
  if (params.tiles != 0 && params.generate != 0) {  // drawn in this order
    ev = -2.0 + 4.0 * mrand(s);
    flip = int(4.0 * mrand(s));
    float ux = mrand(s);
    float uy = mrand(s);
    off = ivec2(vec2(node.roi[0].xy) * vec2(ux, uy));
  }

  ivec2 q = p;
  if ((flip & 1) != 0) q.x = osize.x - 1 - p.x;
  if ((flip & 2) != 0) q.y = osize.y - 1 - p.y;
  q += off;
  float gain = exp2(ev);
  vec4 img = imgi[texel(0, q)] * gain;
  vec4 ref = refi[texel(1, q)] * gain;

  float noise_a = 0.0, noise_b = 0.0;
  if (params.generate == 2 || params.generate == 4) {
    noise_a = params.noise * 65535000.0 * mrand(s);  // 1000 * 65535 * u (vkdt, noise 1)
    noise_b = params.noise * 1000.0 * mrand(s);
    uint sp = s + 7654u * uint(p.x) + 1357900u * uint(p.y);
    sp = (xorshift32(sp) >> 8) << 5;  // = uint(2^29 * mrand(sp)), exactly
    vec2 u0 = vec2(mrand(sp), mrand(sp));
    vec2 u1 = vec2(mrand(sp), mrand(sp));
    vec4 z = vec4(warp_gaussian(u0), warp_gaussian(u1));
    vec3 var = noise_a + NOISE_SCALE * max(ref.rgb, vec3(0.0)) * noise_b;
    img.rgb = ref.rgb + z.rgb * sqrt(var) / NOISE_SCALE;
  }

  if (params.generate == 3 || params.generate == 4) {  // RGGB mosaic, channel replicated
    float v = ((p.x + p.y) & 1) == 1 ? img.g : ((p.y & 1) == 1 ? img.b : img.r);
    img.rgb = vec3(v);
  }

  if (p.x == 0 && p.y == 0) {
    noiseab[0] = noise_a;
    noiseab[1] = noise_b;
    noiseab[2] = 0.0;
    noiseab[3] = 0.0;
  }

  img.a = 1.0;
  ref.a = 1.0;
  int i = p.x + p.y * osize.x;
  imgo[i] = to_half(img);
  refo[i] = to_half(ref);
}
