#version 460
#extension GL_GOOGLE_include_directive : enable
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "vkgraph.glsl"
// kpn's f16 weights (a .lut) as f32 for the cpu kernels (fwd_cpu reads f32 vec4 rows). Every
// f16 value is exactly an f32 value, so fwd_cpu then computes on the numbers fwd's W16 variant
// reads: the same sums in the same order, the same bits. All the weights, once a frame.
layout(local_size_x = 256) in;
SSBO_IN(0, float16_t, w16)
SSBO_OUT(1, float, w)

void main() {
  uint i = gl_GlobalInvocationID.x;
  if (i < uint(w.length())) w[i] = float(w16[i]);
}
