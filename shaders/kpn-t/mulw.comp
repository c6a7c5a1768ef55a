#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
#include "kpn.glsl"
// Weight gradient as a matrix product over pixels, blocked: workgroup (chunk, layer l)
// computes the 64x64 partial dW_l[o][c] = sum_{p in chunk} g_{l+1}[p][o] h_l[p][c] with
// 16-pixel tiles of g and h staged in shared memory; each of the 16x16 threads owns a 4x4
// strided 4x4 block of the output (o = ty + 16i, c = tx + 16j: neighbouring threads read
// neighbouring words). g_{l+1} = G slot l (l < 6) or dK (l = 6, 16 columns);
// h_l = A slot l. Partials go to part[chunk * 28672 + 4096 l + 64 o + c] (reduce sums them).
layout(push_constant) uniform Push { int N; int chunk; } push;
SSBO_IN(0, float, A)
SSBO_IN(1, float, G)
SSBO_IN(2, float, dK)
SSBO_OUT(3, float, part)

#define TP 16
shared float gs[TP][64];
shared float hs[TP][64];

void main() {
  uint t = gl_LocalInvocationIndex;
  uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
  int l = int(gl_WorkGroupID.y);
  int chunk = int(gl_WorkGroupID.x);
  int N = push.N;
  int pbeg = chunk * push.chunk, pend = min(N, pbeg + push.chunk);
  float acc[4][4];
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) acc[i][j] = 0.0;
  uint hbase = uint(l) * uint(N) * 64u;
  uint gbase = uint(l) * uint(N) * 64u;
  for (int p0 = pbeg; p0 < pend; p0 += TP) {
    for (uint k = 0u; k < 4u; k++) {
      uint e = t + 256u * k;
      uint r = e / 64u, col = e % 64u;
      int p = p0 + int(r);
      float hv = 0.0, gv = 0.0;
      if (p < pend) {
        hv = A[hbase + uint(p) * 64u + col];
        if (l < 6) gv = G[gbase + uint(p) * 64u + col];
        else gv = col < uint(N_OUT) ? dK[uint(p) * uint(N_OUT) + col] : 0.0;
      }
      hs[r][col] = hv;
      gs[r][col] = gv;
    }
    barrier();
    for (int r = 0; r < TP; r++) {
      vec4 g4 = vec4(gs[r][ty], gs[r][ty + 16u], gs[r][ty + 32u], gs[r][ty + 48u]);
      vec4 h4 = vec4(hs[r][tx], hs[r][tx + 16u], hs[r][tx + 32u], hs[r][tx + 48u]);
      for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) acc[i][j] += g4[i] * h4[j];
    }
    barrier();
  }
  uint base = uint(chunk) * 28672u + uint(l) * 4096u;
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++)
      part[base + (ty + 16u * uint(i)) * 64u + tx + 16u * uint(j)] = acc[i][j];
}
