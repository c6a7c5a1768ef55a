#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
#include "compose.glsl"

// One panel of the window: an image connector fitted into its rectangle (aspect kept,
// centred, letterboxed in the panel colour). Dispatched over the panel's wd x ht.
layout(std430, set = 1, binding = 0) readonly buffer Image { float v[]; } img;

layout(push_constant) uniform Push {
  ivec4 panel;  // x, y, wd, ht of the panel in the window
  ivec4 fit;    // x, y, wd, ht of the fitted image in the window
  ivec4 src;    // wd, ht, nchan of the image; bgra texels (1) or rgba (0)
  ivec4 win;    // window wd, ht
} pc;

const int MAXTAP = 16;
const vec3 PANEL = vec3(0.06);  // sRGB-encoded letterbox colour

// The source pixels behind output pixel u of n, from m source pixels along one axis: tap k
// reads pixel clamp(i0 + k * stride, 0, m - 1). Shrinking (m > n): the mean of the source
// pixels under the footprint [u m/n, (u+1) m/n) (at most MAXTAP, evenly strided; t < 0);
// enlarging: linear interpolation at the footprint's centre (u + 0.5) m/n - 0.5, weights
// (1 - t, t).
struct Axis { int i0; int taps; int stride; float t; };

Axis axis(int u, int n, int m) {
  if (m > n) {
    int i0 = (u * m) / n;
    int len = max(1, ((u + 1) * m + n - 1) / n - i0);
    int stride = (len + MAXTAP - 1) / MAXTAP;
    return Axis(i0, (len + stride - 1) / stride, stride, -1.0);
  }
  float x = (float(u) + 0.5) * float(m) / float(n) - 0.5;
  float x0 = floor(x);
  return Axis(int(x0), 2, 1, x - x0);
}

float weight(Axis a, int k) {
  return a.t < 0.0 ? 1.0 / float(a.taps) : (k == 0 ? 1.0 - a.t : a.t);
}

// a value as an 8-bit file stores it: NaN -> 0, clamped to [0, 1]. Clamping before the
// resampling makes the panel the written image resampled (no halo of values above 1).
float displayable(float x) { return isnan(x) ? 0.0 : clamp(x, 0.0, 1.0); }

vec3 load(int x, int y) {
  int n = pc.src.z;
  int i = (y * pc.src.x + x) * n;
  if (n >= 3) return vec3(displayable(img.v[i]), displayable(img.v[i + 1]),
                          displayable(img.v[i + 2]));
  if (n == 2) return vec3(displayable(img.v[i]), displayable(img.v[i + 1]), 0.0);
  return vec3(displayable(img.v[i]));
}

void main() {
  ivec2 q = ivec2(gl_GlobalInvocationID.xy);
  if (any(greaterThanEqual(q, pc.panel.zw))) return;
  ivec2 p = pc.panel.xy + q;
  if (any(greaterThanEqual(p, pc.win.xy))) return;
  ivec2 u = p - pc.fit.xy;
  uint out_texel;
  if (any(lessThan(u, ivec2(0))) || any(greaterThanEqual(u, pc.fit.zw))) {
    out_texel = pack_texel(PANEL, pc.src.w);
  } else {
    Axis ax = axis(u.x, pc.fit.z, pc.src.x);
    Axis ay = axis(u.y, pc.fit.w, pc.src.y);
    vec3 c = vec3(0.0);
    for (int b = 0; b < ay.taps; b++) {
      int y = clamp(ay.i0 + b * ay.stride, 0, pc.src.y - 1);
      vec3 row = vec3(0.0);
      for (int a = 0; a < ax.taps; a++)
        row += weight(ax, a) * load(clamp(ax.i0 + a * ax.stride, 0, pc.src.x - 1), y);
      c += weight(ay, b) * row;
    }
    out_texel = pack_linear(c, pc.src.w);
  }
  window.texel[p.x + p.y * pc.win.x] = out_texel;
}
