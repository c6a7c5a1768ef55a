#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
// Pre-pass of the loss plot (trainer/graph.comp, display/plot.comp): one workgroup of 256 threads summarises the loss
// history per plot column, so that no pixel scans the history (up to 250000 frames).
// Shown frames: f0 = max(0, frame - len + 1) .. frame (the ring holds the last len);
// F = max(frame - f0, 1). Column c (0 .. ncols-1) is centred on frame t_c = f0 + c F/(ncols-1)
// and covers [t_c - h, t_c + h], h = F / (2 (ncols-1)), clipped to the shown frames. Over
// that interval the plotted curve L(t) = log10(loss), linear between frames, spans
//   cols[2c] = min, cols[2c+1] = max of L at the interval ends and at the frames inside
// (1e30, -1e30 when the column shows nothing). Frames whose loss is not finite and > 0 are
// left out. The tail holds cols[2 NCOLS + 0..3] = (min L, max L, L(frame), f0).
// cols[2 NCOLS + 4 + c] = the smoothed curve at column c: the mean of L over the frames within
// W/2 of t_c (in columns that show frames), W = max(1, F / 10) frames (a moving average over a tenth of the shown frames; the
// per-frame loss of a training run with random noise levels is dominated by the noise draw).
layout(push_constant) uniform Push { int len; int ncols; } push;
SSBO_IN(0, float, hist)
SSBO_OUT(1, float, cols)

#define NCOLS 512
#define NONE 1e30

shared float smin[256];
shared float smax[256];

bool valid(float e) { return !isnan(e) && !isinf(e) && e > 0.0; }

float lg(int f) {  // log10 of frame f's loss, or NONE
  float e = hist[f % push.len];
  return valid(e) ? log(e) / log(10.0) : NONE;
}

// L at a fractional frame t (f0 <= t <= f1): linear between the two frames around it
float at(float t, int f1) {
  int a = int(floor(t));
  int b = min(a + 1, f1);
  float la = lg(a), lb = lg(b);
  if (la == NONE) return lb;
  if (lb == NONE) return la;
  return mix(la, lb, t - float(a));
}

void main() {
  uint t = gl_LocalInvocationIndex;
  int f1 = global.frame;
  int f0 = max(0, f1 - push.len + 1);
  float F = float(max(f1 - f0, 1));
  int n = min(push.ncols, NCOLS);
  float step = F / float(max(n - 1, 1));
  float gmin = NONE, gmax = -NONE;
  for (int c = int(t); c < n; c += 256) {
    float tc = float(f0) + float(c) * step;
    float a = max(tc - 0.5 * step, float(f0));
    float b = min(tc + 0.5 * step, float(f1));
    float lo = NONE, hi = -NONE;
    if (a <= b) {
      float la = at(a, f1), lb = at(b, f1);
      if (la != NONE) { lo = min(lo, la); hi = max(hi, la); }
      if (lb != NONE) { lo = min(lo, lb); hi = max(hi, lb); }
      for (int f = int(ceil(a)); float(f) <= b; f++) {
        float l = lg(f);
        if (l != NONE) { lo = min(lo, l); hi = max(hi, l); }
      }
    }
    cols[2 * c] = lo;
    cols[2 * c + 1] = hi;
    float half_w = 0.5 * max(1.0, F / 10.0);
    float sum = 0.0, cnt = 0.0;
    for (int f = max(f0, int(ceil(tc - half_w))); float(f) <= min(tc + half_w, float(f1)); f++) {
      float l = lg(f);
      if (l != NONE) { sum += l; cnt += 1.0; }
    }
    cols[2 * NCOLS + 4 + c] = cnt > 0.0 && a <= b ? sum / cnt : NONE;  // where L is drawn
    gmin = min(gmin, lo);
    gmax = max(gmax, hi);
  }
  smin[t] = gmin;
  smax[t] = gmax;
  barrier();
  for (uint k = 128u; k > 0u; k >>= 1) {
    if (t < k) {
      smin[t] = min(smin[t], smin[t + k]);
      smax[t] = max(smax[t], smax[t + k]);
    }
    barrier();
  }
  if (t == 0u) {
    cols[2 * NCOLS] = smin[0];
    cols[2 * NCOLS + 1] = smax[0];
    cols[2 * NCOLS + 2] = lg(f1);
    cols[2 * NCOLS + 3] = float(f0);
  }
}
