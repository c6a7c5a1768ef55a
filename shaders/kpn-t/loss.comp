#version 460
#extension GL_GOOGLE_include_directive : enable
#ifdef PRECISE
#extension GL_ARB_gpu_shader_fp64 : require
#endif
#include "vkgraph.glsl"
#include "dfloat.glsl"
// E = (1/N) sum_p sum_rgb l(o, r) and dE/dO, N = W*H pixels of the output O_0.
//   kind 0 smape: l = |o-r| / (|o|+|r|+1e-3),  l' = sign(o-r)/den - |o-r| sign(o)/den^2
//   kind 1 l2:    l = (o-r)^2,                 l' = 2(o-r)
//   kind 2 l1:    l = |o-r|,                   l' = sign(o-r)
// Each 8x8 workgroup writes its partial sum of E as a double-float pair to Epart (summed by
// lsum, no atomics, so runs are bit-reproducible).
layout(push_constant) uniform Push { int kind; } push;
IMG_IN(0, outp)
IMG_IN(1, ref)
IMG_OUT(2, dO)
SSBO_OUT(3, vec2, Epart)
#ifdef PRECISE
// gradient check: the loss from the float64 output Od, in float64
SSBO_IN(4, dvec4, Od)
shared double partd[64];

double loss_d(dvec3 o, dvec3 r) {
  dvec3 d = o - r;
  if (push.kind == 1) return dot(d, d);
  if (push.kind == 2) return abs(d.x) + abs(d.y) + abs(d.z);
  dvec3 l = abs(d) / (abs(o) + abs(r) + 1e-3lf);
  return l.x + l.y + l.z;
}
#endif

shared vec2 part[64];

void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  ivec2 size = node.roi[0].xy;
  float invN = 1.0 / float(size.x * size.y);
  float e = 0.0;
  if (all(lessThan(p, size))) {
    int i = p.x + p.y * size.x;
    vec3 o = outp[i].rgb, r = ref[texel(1, p)].rgb;
    vec3 d = o - r, g;
    if (push.kind == 1) {
      e = dot(d, d);
      g = 2.0 * d;
    } else if (push.kind == 2) {
      e = dot(abs(d), vec3(1.0));
      g = sign(d);
    } else {
      vec3 den = abs(o) + abs(r) + 1e-3;
      vec3 l = abs(d) / den;
      e = l.r + l.g + l.b;
      g = sign(d) / den - abs(d) * sign(o) / (den * den);
    }
    dO[i] = vec4(g * invN, 0.0);
  }
  uint t = gl_LocalInvocationIndex;
#ifdef PRECISE
  double ed = 0.0lf;
  if (all(lessThan(p, size))) {
    int i = p.x + p.y * size.x;
    ed = loss_d(Od[i].rgb, dvec3(ref[texel(1, p)].rgb)) / double(size.x * size.y);
  }
  partd[t] = ed;
  barrier();
  for (uint s = 32u; s > 0u; s >>= 1) {
    if (t < s) partd[t] += partd[t + s];
    barrier();
  }
  if (t == 0u) {
    float hi = float(partd[0]);
    Epart[gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x] =
        vec2(hi, float(partd[0] - double(hi)));
  }
  return;
#endif
  part[t] = vec2(e * invN, 0.0);
  barrier();
  for (uint s = 32u; s > 0u; s >>= 1) {
    if (t < s) part[t] = df_add(part[t], part[t + s]);
    barrier();
  }
  if (t == 0u) Epart[gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x] = part[0];
}
