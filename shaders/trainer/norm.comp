#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
// The gradient norm of a trainable module whose network gives none (pipeline/trainer.py:
// gradient_norm): gn[0] = ||dw||_2 over its n params (unused ones have zero gradient), gn[1]
// = 1 if every element and the loss of the same frame (cur[0] + cur[1], lsum's pair) are
// finite, else 0 (adam then skips the update). One workgroup of 256 threads.
layout(push_constant) uniform Push { uint n; } push;
SSBO_IN(0, float, dw)
SSBO_OUT(1, float, gn)
SSBO_IN(2, float, cur)

shared float part[256];
shared uint bad;

void main() {
  uint t = gl_LocalInvocationIndex;
  if (t == 0u) bad = 0u;
  barrier();
  float s = 0.0;
  bool fin = true;
  for (uint i = t; i < push.n; i += 256u) {
    float g = dw[i];
    fin = fin && !isnan(g) && !isinf(g);
    s += g * g;
  }
  if (!fin) atomicOr(bad, 1u);
  part[t] = s;
  barrier();
  for (uint k = 128u; k > 0u; k >>= 1) {
    if (t < k) part[t] += part[t + k];
    barrier();
  }
  if (t == 0u) {
    gn[0] = sqrt(part[0]);
    float loss = cur[0] + cur[1];
    bool lfin = !isnan(loss) && !isinf(loss);
    gn[1] = (bad == 0u && !isinf(part[0]) && lfin) ? 1.0 : 0.0;
  }
}
