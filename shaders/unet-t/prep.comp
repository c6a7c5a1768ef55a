#version 460
#extension GL_GOOGLE_include_directive : enable
#ifdef PRECISE
#extension GL_ARB_gpu_shader_fp64 : require
#endif
#include "vkgraph.glsl"
#include "unet.glsl"  // `real` and the push constants (no layer)
// The network's input F = (X.rgb / s, sigma / s) of the noisy image X, 4 planes (README.md):
//   sigma = sqrt(max(a + 65535 b max(Y(X), 0), 0)) / 65535,  s = scale_of(a, b)
// F is push.wo x push.ho; X is read mirrored (texel) where it is smaller: unet pads the
// image to the network's multiple of 2^(scales-1) (unet-t's X is F's size).
IMG_IN(0, inp)
SSBO_IN(1, float, noiseab)
SSBO_OUT(2, real, F)
#include "noise.glsl"

void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (p.x >= push.wo || p.y >= push.ho) return;
  int n = push.wo * push.ho, i = p.x + p.y * push.wo;
  real a, b;
  profile(p, a, b);
  real s = scale_of(a, b);
  vec4 x = inp[texel(0, p)];
  real r = real(x.r), g = real(x.g), bl = real(x.b);
  real y = max(LUMA_R * r + LUMA_G * g + LUMA_B * bl, real(0));
  real sigma = sqrt(max(a + real(65535) * b * y, real(0))) / real(65535);
  F[i] = r / s;
  F[n + i] = g / s;
  F[2 * n + i] = bl / s;
  F[3 * n + i] = sigma / s;
}
