#version 460
#extension GL_GOOGLE_include_directive : enable
#ifdef PRECISE
#extension GL_ARB_gpu_shader_fp64 : require
#endif
#include "vkgraph.glsl"
#include "unet.glsl"
// One layer's input gradient (the adjoint of conv.comp): for input channels c0 .. c0 + CBI - 1
// (CBI divides CINA and CIN - CINA; dispatch z = CIN / CBI) of input pixel q,
//   dX[ci, q] = sum_tap sum_co W[co][ci][tap] dY[co, target(q, tap)]
// with dY = grad_out (grad.glsl); channels below CINA go to dA, the rest to dB.
SSBO_IN(0, float, w)
SSBO_IN(1, real, gA)
SSBO_IN(2, real, gB)
SSBO_IN(3, real, outp)
SSBO_OUT(4, real, dA)
SSBO_OUT(5, real, dB)
SSBO_IN(6, float, noiseab)
#include "grad.glsl"

void main() {
  ivec2 q = ivec2(gl_GlobalInvocationID.xy);
  if (q.x >= push.wi || q.y >= push.hi) return;
  int c0 = int(gl_GlobalInvocationID.z) * CBI;
  int ni = push.wi * push.hi, no = push.wo * push.ho, T = tile_at(noiseab[2]);
  real acc[CBI];
  for (int j = 0; j < CBI; j++) acc[j] = real(0);
  for (int t = 0; t < KK; t++) {
    ivec2 p;
    if (!target(q, t, T, p)) continue;
    int ip = p.x + p.y * push.wo;
    for (int co = 0; co < COUT; co++) {
      real g = grad_out(co, ip, no);
      for (int j = 0; j < CBI; j++) acc[j] += real(w[widx(co, c0 + j, t)]) * g;
    }
  }
  int iq = q.x + q.y * push.wi;
  for (int j = 0; j < CBI; j++) {
    int ci = c0 + j;
    if (ci < CINA) dA[ci * ni + iq] = acc[j];
    else dB[(ci - CINA) * ni + iq] = acc[j];
  }
}
