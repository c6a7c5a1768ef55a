#version 460
#extension GL_GOOGLE_include_directive : enable
#include "mlp_coopmat.glsl"
#include "vkgraph.glsl"
#include "unet.glsl"
#include "cm.glsl"
// One layer's input gradient (convb.comp's) on cooperative matrices:
//   dX[ci, q] = sum_{tap, co} W[co][ci][tap] dY[co, target(q, tap)]
// (dY = grad_out, grad.glsl, times GSCALE in f16: cm.glsl); channels below CINA go to dA,
// the rest to dB. Rows ci, columns the input pixels q, the inner index (tap, co)
// (cm_rows.glsl's main).
SSBO_IN(0, float, w)
SSBO_IN(1, float, gA)
SSBO_IN(2, float, gB)
SSBO_IN(3, float, outp)
SSBO_OUT(4, float, dA)
SSBO_OUT(5, float, dB)
SSBO_IN(6, float, noiseab)
#include "grad.glsl"
#define CG ((COUT + 15) / 16)
#define COLW push.wi
#define COLN ni
#include "cm_rows.glsl"

void fetch(int t, out float wr[CM_NW], out float xr[16 * CM_NP]) {
  int tap = t / CG, c0 = (t % CG) * 16;
  for (int i = 0; i < CM_NW; i++) {
    int e = lid + i * CM_THREADS, ci = row0 + e / 16, co = c0 + e % 16;
    wr[i] = co < COUT && ci < CIN ? w[widx(co, ci, tap)] : 0.0;
  }
  for (int s = 0; s < CM_NP; s++) {
    ivec2 p;
    bool ok = col0 + lid + s * CM_THREADS < ni && target(px[s], tap, pbox[s], p);
    int ip = p.x + p.y * push.wo;
    for (int c = 0; c < 16; c++) {
      int co = c0 + c;
      xr[16 * s + c] = ok && co < COUT ? GSCALE * grad_out(co, ip, no) : 0.0;
    }
  }
}

void put(int ci, int iq, float sum) {
  float d = cm_poison(sum / GSCALE);
  if (ci < CINA) dA[ci * ni + iq] = d;
  else if (ci < CIN) dB[(ci - CINA) * ni + iq] = d;
}
