#version 460
#extension GL_GOOGLE_include_directive : enable
#include "mlp_coopmat.glsl"
#include "vkgraph.glsl"
#include "unet.glsl"
#include "cm.glsl"
// A 3x3 layer's input gradient (convb_cm.comp's sums, KIND 0) from a staged window of dY
// instead of a gather a tap (conv3.glsl), where every block lies inside one tile (the host
// checks, forward.py's window_fits):
//   dX[ci, q] = sum_{co, tap} W[co][ci][tap] dY[co, q - offset(tap)]
//             = sum_{co, tap} W[co][ci][8 - tap] dY[co, q + offset(tap)]
// (offset(8 - tap) = -offset(tap); an output pixel reads q exactly when it lies in q's
// tile, so the window of dY reads zero outside it, as the forward's window of X does). dY =
// grad_out (grad.glsl) times GSCALE in f16 (cm.glsl); channels below CINA go to dA, the
// rest to dB.
SSBO_IN(0, float, w)
SSBO_IN(1, float, gA)
SSBO_IN(2, float, gB)
SSBO_IN(3, float, outp)
SSBO_OUT(4, float, dA)
SSBO_OUT(5, float, dB)
SSBO_IN(6, float, noiseab)
#include "grad.glsl"

#define ROWS CIN
#define WIN_CH COUT
#define WIN_AT(co, iq) (GSCALE * grad_out(co, iq, ni))
#define W_AT(ci, co, tap) w[widx(co, ci, 8 - (tap))]
#define PUT(ci, iq, s)                                   \
  {                                                      \
    float d_ = cm_poison((s) / GSCALE);                  \
    if ((ci) < CINA) dA[(ci) * ni + (iq)] = d_;          \
    else dB[((ci) - CINA) * ni + (iq)] = d_;             \
  }
#include "conv3.glsl"
