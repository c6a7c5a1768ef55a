#version 460
#extension GL_GOOGLE_include_directive : enable
#include "mlp_coopmat.glsl"
#include "vkgraph.glsl"
#include "unet.glsl"
#include "cm.glsl"
// A 3x3 layer's forward (conv_cm.comp's sums, KIND 0) from a staged window instead of a
// gather a tap (conv3.glsl), where every block lies inside one tile (the image one tile, T =
// 0, as in unet's inference; or cnngenin's tiles a multiple of the blocks at the layer's
// scale: the host checks, forward.py's window_fits):
//   Y[co, p] = b[co] + sum_{ci, tap} W[co][ci][tap] X[ci, p + offset(tap)],   relu'd if RELU
SSBO_IN(0, float, w)
SSBO_IN(1, float, inA)
SSBO_IN(2, float, inB)
SSBO_OUT(3, float, outp)
SSBO_IN(4, float, noiseab)

#define ROWS COUT
#define W_AT(co, ci, tap) w[widx(co, ci, tap)]
#define PUT(co, ip, s) outp[(co) * no + (ip)] = cm_output((s) + w[bidx(co)])
#include "conv3.glsl"
