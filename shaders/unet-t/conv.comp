#version 460
#extension GL_GOOGLE_include_directive : enable
#ifdef PRECISE
#extension GL_ARB_gpu_shader_fp64 : require
#endif
#include "vkgraph.glsl"
#include "unet.glsl"
// One layer's forward (unet.glsl names the layer): for output channels c0 .. c0 + CB - 1
// (CB divides COUT; dispatch z = COUT / CB) of output pixel p,
//   Y[co, p] = b[co] + sum_tap sum_ci W[co][ci][tap] X[ci, source(p, tap)],  relu'd if RELU
// with X = (A's CINA channels, then B's).
SSBO_IN(0, float, w)
SSBO_IN(1, real, inA)
SSBO_IN(2, real, inB)
SSBO_OUT(3, real, outp)
SSBO_IN(4, float, noiseab)

void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (p.x >= push.wo || p.y >= push.ho) return;
  int c0 = int(gl_GlobalInvocationID.z) * CB;
  int ni = push.wi * push.hi, no = push.wo * push.ho, T = tile_at(noiseab[2]);
  real acc[CB];
  for (int j = 0; j < CB; j++) acc[j] = real(w[bidx(c0 + j)]);
  for (int t = 0; t < KK; t++) {
    ivec2 q;
    if (!source(p, t, T, q)) continue;
    int iq = q.x + q.y * push.wi;
    for (int ci = 0; ci < CIN; ci++) {
      real x = ci < CINA ? inA[ci * ni + iq] : inB[(ci - CINA) * ni + iq];
      for (int j = 0; j < CB; j++) acc[j] += real(w[widx(c0 + j, ci, t)]) * x;
    }
  }
  int ip = p.x + p.y * push.wo;
  for (int j = 0; j < CB; j++) {
#if RELU
    outp[(c0 + j) * no + ip] = max(acc[j], real(0));
#else
    outp[(c0 + j) * no + ip] = acc[j];
#endif
  }
}
