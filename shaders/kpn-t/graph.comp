#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
#include "font.glsl"
// The loss plot (500 x 200): log10(loss) over the frames shown, from the per-column summary
// of grange.comp. Plot area [x0, x1) x [y0, y1) (push constants, module.py's GRAPH_PLOT):
// column x0 + c shows the curve's span in column c (grange.comp); the row of a value L is
//   row(L) = y0 + (Lmax - L) / (Lmax - Lmin) (y1 - 1 - y0)   (the middle row if Lmax == Lmin),
// so the largest loss so far is on row y0 and the smallest on row y1 - 1. A pixel is curve
// when its row lies in [round(row(hi)), round(row(lo))] of its column. Dim lines mark the
// decades; axes left of and below the plot; labels in the 5x7 font: "LOSS (LOG)" top left,
// the max and min loss at the top and bottom of the y axis, the first and last frame under
// the ends of the x axis, "FRAME" in between, and the current loss top right.
layout(push_constant) uniform Push { int len; int x0, y0, x1, y1; } push;
SSBO_IN(0, float, cols)
IMG_OUT(1, plot)

#define NCOLS 512
#define NONE 1e30
#define MAXC 12

const vec3 BACK = vec3(0.08);
const vec3 GRID = vec3(0.2);
const vec3 AXIS = vec3(0.6);
const vec3 CURVE = vec3(1.0, 0.55, 0.1);
const vec3 SMOOTH = vec3(0.35, 0.75, 1.0);  // the moving average
const vec3 TEXT = vec3(0.9);

struct Label { int code[MAXC]; int n; };

// is p in the box of n glyphs at top-left o (one glyph every 6 pixels, 7 rows)?
bool box(ivec2 o, int n, ivec2 p) {
  ivec2 d = p - o;
  return d.y >= 0 && d.y < 7 && d.x >= 0 && d.x < 6 * n;
}

int digits(int v) {
  int n = 1;
  for (int t = v; t >= 10; t /= 10) n++;
  return n;
}

// text at top-left o: is pixel p ink?
bool ink(Label s, ivec2 o, ivec2 p) {
  ivec2 d = p - o;
  if (d.y < 0 || d.y > 6 || d.x < 0 || d.x >= 6 * s.n) return false;
  int i = d.x / 6;
  return font_pixel(s.code[i], d.x - 6 * i, d.y);
}

Label word(int which) {
  Label s;
  s.n = 0;
  if (which == 0) {  // LOSS (LOG)
    s.code = int[MAXC](76, 79, 83, 83, 32, 40, 76, 79, 71, 41, 32, 32);
    s.n = 10;
  } else {  // FRAME
    s.code = int[MAXC](70, 82, 65, 77, 69, 32, 32, 32, 32, 32, 32, 32);
    s.n = 5;
  }
  return s;
}

// a non-negative integer, decimal
Label integer(int v) {
  Label s;
  for (int i = 0; i < MAXC; i++) s.code[i] = 32;
  int n = digits(v);
  for (int i = n - 1; i >= 0; i--) {
    s.code[i] = 48 + v % 10;
    v /= 10;
  }
  s.n = n;
  return s;
}

// 10^L as d.ddE+ee (or E-ee)
Label scientific(float L) {
  Label s;
  for (int i = 0; i < MAXC; i++) s.code[i] = 32;
  int e = int(floor(L));
  int m = int(round(pow(10.0, L - float(e)) * 100.0));  // 100 .. 1000
  if (m >= 1000) { m = 100; e += 1; }
  if (m < 100) m = 100;
  s.code[0] = 48 + m / 100;
  s.code[1] = 46;  // .
  s.code[2] = 48 + (m / 10) % 10;
  s.code[3] = 48 + m % 10;
  s.code[4] = 69;  // E
  s.code[5] = e < 0 ? 45 : 43;
  int a = min(abs(e), 99);
  s.code[6] = 48 + a / 10;
  s.code[7] = 48 + a % 10;
  s.n = 8;
  return s;
}

void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (!inside(1, p)) return;
  int x0 = push.x0, y0 = push.y0, x1 = push.x1, y1 = push.y1;
  float lmin = cols[2 * NCOLS], lmax = cols[2 * NCOLS + 1];
  float lcur = cols[2 * NCOLS + 2];
  int f0 = int(cols[2 * NCOLS + 3]);
  bool data = lmin <= lmax;
  float range = lmax - lmin;
  float scale = range > 0.0 ? float(y1 - 1 - y0) / range : 0.0;
  vec3 c = BACK;

  if (p.x >= x0 && p.x < x1 && p.y >= y0 && p.y < y1 && data) {
    // decade lines: an integer value of log10(loss) between this row and the next
    if (scale > 0.0) {
      float va = lmax - (float(p.y - y0) - 0.5) / scale;
      float vb = lmax - (float(p.y - y0) + 0.5) / scale;
      if (floor(va) != floor(vb)) c = GRID;
    }
    float lo = cols[2 * (p.x - x0)], hi = cols[2 * (p.x - x0) + 1];
    float mid = 0.5 * float(y0 + y1 - 1);
    if (lo <= hi) {
      float rhi = scale > 0.0 ? float(y0) + (lmax - hi) * scale : mid;
      float rlo = scale > 0.0 ? float(y0) + (lmax - lo) * scale : mid;
      if (p.y >= int(round(rhi)) && p.y <= int(round(rlo))) c = CURVE;
    }
    // the moving average, drawn over the raw curve as a line to the next column's value
    int cx = p.x - x0;
    float s0 = cols[2 * NCOLS + 4 + cx];
    float s1 = cx + 1 < x1 - x0 ? cols[2 * NCOLS + 5 + cx] : s0;
    if (s1 == NONE) s1 = s0;
    if (s0 != NONE) {
      float r0 = scale > 0.0 ? float(y0) + (lmax - s0) * scale : mid;
      float r1 = scale > 0.0 ? float(y0) + (lmax - s1) * scale : mid;
      if (p.y >= int(round(min(r0, r1))) && p.y <= int(round(max(r0, r1)))) c = SMOOTH;
    }
  }
  // axes: the column left of the plot and the row below it
  if ((p.x == x0 - 1 && p.y >= y0 && p.y <= y1) || (p.y == y1 && p.x >= x0 - 1 && p.x < x1))
    c = AXIS;

  // labels (each built only for the pixels of its box)
  bool t = false;
  ivec2 o = ivec2(4, 3);
  if (box(o, 10, p)) t = t || ink(word(0), o, p);
  int last = max(global.frame, f0 + 1);
  o = ivec2(x0, y1 + 4);
  if (box(o, 9, p)) t = t || ink(integer(f0), o, p);
  o = ivec2(x1 - 6 * digits(last) + 1, y1 + 4);
  if (box(o, 9, p)) t = t || ink(integer(last), o, p);
  o = ivec2((x0 + x1) / 2 - 14, y1 + 4);
  if (box(o, 5, p)) t = t || ink(word(1), o, p);
  if (data) {  // numbers are 8 glyphs wide
    o = ivec2(x0 - 4 - 47, y0);
    if (box(o, 8, p)) t = t || ink(scientific(lmax), o, p);
    o = ivec2(x0 - 4 - 47, y1 - 7);
    if (box(o, 8, p)) t = t || ink(scientific(lmin), o, p);
    o = ivec2(x1 - 47, 3);
    if (lcur != NONE && box(o, 8, p)) t = t || ink(scientific(lcur), o, p);
  }
  if (t) c = TEXT;

  plot[p.x + p.y * node.roi[1].x] = vec4(c, 1.0);
}
