#version 460
#extension GL_GOOGLE_include_directive : enable
#include "mlp_coopmat.glsl"
#include "vkgraph.glsl"
#include "unet.glsl"
#include "cm.glsl"
// One layer's forward (conv.comp's) on cooperative matrices:
//   Y[co, p] = b[co] + sum_{tap, ci} W[co][ci][tap] X[ci, source(p, tap)],   relu'd if RELU
// rows co, columns the output pixels p, the inner index (tap, ci) (cm_rows.glsl's main).
SSBO_IN(0, float, w)
SSBO_IN(1, float, inA)
SSBO_IN(2, float, inB)
SSBO_OUT(3, float, outp)
SSBO_IN(4, float, noiseab)
#define CG ((CIN + 15) / 16)
#define COLW push.wo
#define COLN no
#include "cm_rows.glsl"

void fetch(int t, out float wr[CM_NW], out float xr[16 * CM_NP]) {
  int tap = t / CG, c0 = (t % CG) * 16;
  for (int i = 0; i < CM_NW; i++) {
    int e = lid + i * CM_THREADS, co = row0 + e / 16, ci = c0 + e % 16;
    wr[i] = co < COUT && ci < CIN ? w[widx(co, ci, tap)] : 0.0;
  }
  for (int s = 0; s < CM_NP; s++) {
    ivec2 q;
    bool ok = col0 + lid + s * CM_THREADS < no && source(px[s], tap, pbox[s], q);
    int iq = q.x + q.y * push.wi;
    CM_GATHER16(xr, 16 * s, ok, c0, iq)
  }
}

void put(int co, int ip, float sum) {
  if (co >= COUT) return;
  float y = cm_poison(sum + w[bidx(co)]);
  outp[co * no + ip] = RELU != 0 ? cm_relu(y) : y;
}
