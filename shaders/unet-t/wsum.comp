#version 460
#extension GL_GOOGLE_include_directive : enable
#ifdef PRECISE
#extension GL_ARB_gpu_shader_fp64 : require
#define real double
#else
#define real float
#endif
#include "vkgraph.glsl"
// dE/dW of the layers so far: dw[i] = prev[i] (the layers before, i < WOFF; prev unbound for
// the first layer), then the layer's CHUNKS partials (convw.comp) summed in chunk order,
// dw[WOFF + i] = sum_z part[z LW + i] (LW: the layer's weights and bias; PRECISE: the
// partials and their sum in float64).
#ifndef LW  // a layer for `vkgraph shaders --check`; module.py always defines one
#define WOFF 0
#define LW 1
#define CHUNKS 1
#endif
SSBO_IN(0, real, part)
SSBO_IN(1, float, prev)
SSBO_OUT(2, float, dw)

void main() {
  int i = int(gl_GlobalInvocationID.x);
  if (i >= WOFF + LW) return;
  if (i < WOFF) {
    dw[i] = prev[i];
    return;
  }
  real s = real(0);
  for (int z = 0; z < CHUNKS; z++) s += part[z * LW + i - WOFF];
  dw[i] = float(s);
}
