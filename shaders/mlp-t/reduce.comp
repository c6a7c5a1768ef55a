#version 460
#extension GL_GOOGLE_include_directive : enable
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#include "vkgraph.glsl"
#include "params.gen"  // the params block, generated from modules/mlp-t/params
#include "config.glsl"
// dw[i] = (sum over chunks of part[chunk * NW + i]) / lscale = dE/dw_i: the loss scale that
// the backward carried is divided out here, so dw is the plain gradient. Table entries
// (i >= NW): dw[i] = tacc[i - NW] / T_FIX, the fixed-point sum train scattered (already
// without the loss scale); NaN for all of them when a contribution was not finite.
// PART_SCALED (train_cm's partials): the chunks are the coopmat workgroups, whose partials
// are dE/dW already (no division).
layout(push_constant) uniform Push { int chunks; } push;
SSBO_IN(0, float, part)
SSBO_IN(1, int64_t, tacc)
SSBO_OUT(2, float, dw)

void main() {
  uint i = gl_GlobalInvocationID.x;
  if (i >= uint(NP)) return;
  if (i >= uint(NW)) {
    dw[i] = tacc[TABLE] != 0 ? uintBitsToFloat(0x7fc00000u)
                             : float(tacc[i - uint(NW)]) * (1.0 / T_FIX);
    return;
  }
  float s = 0.0;
  for (int k = 0; k < push.chunks; k++) s += part[uint(k) * uint(NW) + i];
#ifdef PART_SCALED
  dw[i] = s;  // train_cm divided its partials by its (dynamic) loss scale already
#else
  dw[i] = s / params.lscale;
#endif
}
