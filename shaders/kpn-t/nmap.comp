#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
#include "kpn.glsl"
// The noise map for kpn-t's noise-normalised features: M_0 = (input.rgb, var) with the noise
// variance of the pixel under cnngenin's model, var = (a + 65535 max(Y(x), 0) b) / 65535^2
// (Y: luminance of the noisy input x). (a, b) come from kpn's params `noise a`, `noise b`
// (FROM_PARAMS: they may change between frames without a rebuild), or from noiseab (kpn-t:
// cnngenin's per-tile records (a, b, tile size, tile columns)).
IMG_IN(0, inp)
SSBO_IN(1, float, noiseab)
IMG_OUT(2, outp)
#ifdef FROM_PARAMS
#include "params.gen"  // kpn's params block (modules/kpn/params): noise_a, noise_b, ...
#endif

void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (!inside(2, p)) return;
  int i = p.x + p.y * node.roi[2].x;
  vec4 v = inp[i];
#ifdef FROM_PARAMS
  float a = params.noise_a, b = params.noise_b;
#else
  int T = int(noiseab[2]);
  int cols = max(int(noiseab[3]), 1);
  int t = T > 0 ? p.x / T + (p.y / T) * cols : 0;
  float a = noiseab[4 * t];
  float b = noiseab[4 * t + 1];
#endif
  float x = max(dot(v.rgb, luma2020), 0.0);
  outp[i] = vec4(v.rgb, max(a + 65535.0 * x * b, 0.0) / (65535.0 * 65535.0));
}
