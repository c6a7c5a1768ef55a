#version 460
#extension GL_GOOGLE_include_directive : enable
#include "mlp_coopmat.glsl"
#include "vkgraph.glsl"
#include "unet.glsl"
#include "cm.glsl"
// One layer's forward (conv.comp's) on cooperative matrices:
//   Y[co, p] = b[co] + sum_{tap, ci} W[co][ci][tap] X[ci, source(p, tap)],   relu'd if RELU
// rows co, columns the output pixels p, the inner index (tap, ci) (cm_rows.glsl's main).
// UP_SPLIT (an up layer, KIND 2): an output pixel reads one tap, its position in its 2 x 2
// square, so the layer is 4 products, one a tap (workgroup z): columns the input pixels q,
// the inner index the input channels, results at the output pixels 2 q + (tap % 2, tap / 2);
// a quarter of the steps of the product over every tap, 3 in 4 of whose terms are zero.
SSBO_IN(0, float, w)
SSBO_IN(1, float, inA)
SSBO_IN(2, float, inB)
SSBO_OUT(3, float, outp)
SSBO_IN(4, float, noiseab)
#define CG ((CIN + 15) / 16)
#ifdef UP_SPLIT
#if KIND != 2
#error UP_SPLIT is an up layer's (KIND 2)
#endif
#define COLW push.wi
#define COLN ni
#define CM_STEPS CG
#else
#define COLW push.wo
#define COLN no
#endif
#include "cm_rows.glsl"

void fetch(int t, out float wr[CM_NW], out float xr[16 * CM_NP]) {
#ifdef UP_SPLIT
  int tap = int(gl_WorkGroupID.z), c0 = t * 16;
#else
  int tap = t / CG, c0 = (t % CG) * 16;
#endif
  for (int i = 0; i < CM_NW; i++) {
    int e = lid + i * CM_THREADS, co = row0 + e / 16, ci = c0 + e % 16;
    wr[i] = co < COUT && ci < CIN ? w[widx(co, ci, tap)] : 0.0;
  }
  for (int s = 0; s < CM_NP; s++) {
    ivec2 q;
#ifdef UP_SPLIT
    q = px[s];  // the column's input pixel
    bool ok = col0 + lid + s * CM_THREADS < ni;
#else
    bool ok = col0 + lid + s * CM_THREADS < no && source(px[s], tap, pbox[s], q);
#endif
    int iq = q.x + q.y * push.wi;
    CM_GATHER16(xr, 16 * s, ok, c0, iq)
  }
}

void put(int co, int ip, float sum) {
  if (co >= COUT) return;
#ifdef UP_SPLIT
  int tap = int(gl_WorkGroupID.z);
  ivec2 p = 2 * ivec2(ip % push.wi, ip / push.wi) + ivec2(tap % 2, tap / 2);
  ip = p.x + p.y * push.wo;
#endif
  outp[co * no + ip] = cm_output(sum + w[bidx(co)]);
}
