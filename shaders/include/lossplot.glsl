// The loss plot, drawn at any size and font scale: a trainer's `graph` output
// (trainer/graph.comp, 500 x 200 at scale 1) and the loss panel of `vkgraph gui`
// (shaders/display/plot.comp, the window's size at the window's font scale) share it. The
// includer declares the float array `cols` (grange.comp's per-column summary of the loss
// history) and includes font.glsl.
//
// loss_plot(p, a, s, ncols): the colour of pixel p of the plot's box (origin at its top
// left), plot area a = [x0, x1) x [y0, y1) in the same pixels, s window pixels per font pixel,
// ncols columns in `cols` (pixel column x shows cols column (x - x0) ncols / (x1 - x0)). The
// row of a value L is
//   row(L) = y0 + (Lmax - L) / (Lmax - Lmin) (y1 - 1 - y0)   (the middle row if Lmax == Lmin),
// so the largest loss so far is on row y0 and the smallest on row y1 - 1. A pixel is curve
// when its row lies in [round(row(hi)), round(row(lo))] of its column. Dim lines mark the
// decades; axes left of and below the plot; labels in the 5x7 font: "LOSS (LOG)" top left,
// the max and min loss at the top and bottom of the y axis, the first and last frame under
// the ends of the x axis, "FRAME" in between, and the current loss top right. The margins
// the labels need, in font pixels: 56 left, 14 top, 8 right, 22 below (graph.comp's area).
#ifndef LOSSPLOT_GLSL
#define LOSSPLOT_GLSL

#define NCOLS 512
#define NONE 1e30
#define MAXC 12

const vec3 PLOT_BACK = vec3(0.08);
const vec3 PLOT_GRID = vec3(0.2);
const vec3 PLOT_AXIS = vec3(0.6);
const vec3 PLOT_CURVE = vec3(1.0, 0.55, 0.1);
const vec3 PLOT_SMOOTH = vec3(0.35, 0.75, 1.0);  // the moving average
const vec3 PLOT_TEXT = vec3(0.9);

struct Label { int code[MAXC]; int n; };

// is p in the box of n glyphs at top-left o (one glyph every 6 s pixels, 7 s rows)?
bool box(ivec2 o, int n, ivec2 p, int s) {
  ivec2 d = p - o;
  return d.y >= 0 && d.y < 7 * s && d.x >= 0 && d.x < 6 * s * n;
}

int digits(int v) {
  int n = 1;
  for (int t = v; t >= 10; t /= 10) n++;
  return n;
}

// text at top-left o, s pixels per font pixel: is pixel p ink?
bool ink(Label l, ivec2 o, ivec2 p, int s) {
  ivec2 d = p - o;
  if (d.y < 0 || d.y >= 7 * s || d.x < 0 || d.x >= 6 * s * l.n) return false;
  d /= s;
  int i = d.x / 6;
  return font_pixel(l.code[i], d.x - 6 * i, d.y);
}

Label word(int which) {
  Label l;
  l.n = 0;
  if (which == 0) {  // LOSS (LOG)
    l.code = int[MAXC](76, 79, 83, 83, 32, 40, 76, 79, 71, 41, 32, 32);
    l.n = 10;
  } else {  // FRAME
    l.code = int[MAXC](70, 82, 65, 77, 69, 32, 32, 32, 32, 32, 32, 32);
    l.n = 5;
  }
  return l;
}

// a non-negative integer, decimal
Label integer(int v) {
  Label l;
  for (int i = 0; i < MAXC; i++) l.code[i] = 32;
  int n = digits(v);
  for (int i = n - 1; i >= 0; i--) {
    l.code[i] = 48 + v % 10;
    v /= 10;
  }
  l.n = n;
  return l;
}

// 10^L as d.ddE+ee (or E-ee)
Label scientific(float L) {
  Label l;
  for (int i = 0; i < MAXC; i++) l.code[i] = 32;
  int e = int(floor(L));
  int m = int(round(pow(10.0, L - float(e)) * 100.0));  // 100 .. 1000
  if (m >= 1000) { m = 100; e += 1; }
  if (m < 100) m = 100;
  l.code[0] = 48 + m / 100;
  l.code[1] = 46;  // .
  l.code[2] = 48 + (m / 10) % 10;
  l.code[3] = 48 + m % 10;
  l.code[4] = 69;  // E
  l.code[5] = e < 0 ? 45 : 43;
  int a = min(abs(e), 99);
  l.code[6] = 48 + a / 10;
  l.code[7] = 48 + a % 10;
  l.n = 8;
  return l;
}

// the cols column that pixel column x of the plot area [x0, x1) shows
int plot_column(int x, int x0, int x1, int ncols) {
  return ((x - x0) * ncols) / max(x1 - x0, 1);
}

vec3 loss_plot(ivec2 p, ivec4 a, int s, int ncols) {
  int x0 = a.x, y0 = a.y, x1 = a.z, y1 = a.w;
  float lmin = cols[2 * NCOLS], lmax = cols[2 * NCOLS + 1];
  float lcur = cols[2 * NCOLS + 2];
  int f0 = int(cols[2 * NCOLS + 3]);
  bool data = lmin <= lmax;
  float range = lmax - lmin;
  float scale = range > 0.0 ? float(y1 - 1 - y0) / range : 0.0;
  vec3 c = PLOT_BACK;

  if (p.x >= x0 && p.x < x1 && p.y >= y0 && p.y < y1 && data) {
    // decade lines: an integer value of log10(loss) between this row and the next
    if (scale > 0.0) {
      float va = lmax - (float(p.y - y0) - 0.5) / scale;
      float vb = lmax - (float(p.y - y0) + 0.5) / scale;
      if (floor(va) != floor(vb)) c = PLOT_GRID;
    }
    int cx = plot_column(p.x, x0, x1, ncols);
    float lo = cols[2 * cx], hi = cols[2 * cx + 1];
    float mid = 0.5 * float(y0 + y1 - 1);
    if (lo <= hi) {
      float rhi = scale > 0.0 ? float(y0) + (lmax - hi) * scale : mid;
      float rlo = scale > 0.0 ? float(y0) + (lmax - lo) * scale : mid;
      if (p.y >= int(round(rhi)) && p.y <= int(round(rlo))) c = PLOT_CURVE;
    }
    // the moving average, drawn over the raw curve as a line to the next pixel's value
    int nx = p.x + 1 < x1 ? plot_column(p.x + 1, x0, x1, ncols) : cx;
    float s0 = cols[2 * NCOLS + 4 + cx];
    float s1 = cols[2 * NCOLS + 4 + nx];
    if (s1 == NONE) s1 = s0;
    if (s0 != NONE) {
      float r0 = scale > 0.0 ? float(y0) + (lmax - s0) * scale : mid;
      float r1 = scale > 0.0 ? float(y0) + (lmax - s1) * scale : mid;
      if (p.y >= int(round(min(r0, r1))) && p.y <= int(round(max(r0, r1)))) c = PLOT_SMOOTH;
    }
  }
  // axes: the column left of the plot and the row below it
  if ((p.x == x0 - 1 && p.y >= y0 && p.y <= y1) || (p.y == y1 && p.x >= x0 - 1 && p.x < x1))
    c = PLOT_AXIS;

  // labels (each built only for the pixels of its box)
  bool t = false;
  ivec2 o = ivec2(4, 3) * s;
  if (box(o, 10, p, s)) t = t || ink(word(0), o, p, s);
  int last = max(global.frame, f0 + 1);
  o = ivec2(x0, y1 + 4 * s);
  if (box(o, 9, p, s)) t = t || ink(integer(f0), o, p, s);
  o = ivec2(x1 - s * (6 * digits(last) - 1), y1 + 4 * s);
  if (box(o, 9, p, s)) t = t || ink(integer(last), o, p, s);
  o = ivec2((x0 + x1) / 2 - 14 * s, y1 + 4 * s);
  if (box(o, 5, p, s)) t = t || ink(word(1), o, p, s);
  if (data) {  // numbers are 8 glyphs wide
    o = ivec2(x0 - 51 * s, y0);
    if (box(o, 8, p, s)) t = t || ink(scientific(lmax), o, p, s);
    o = ivec2(x0 - 51 * s, y1 - 7 * s);
    if (box(o, 8, p, s)) t = t || ink(scientific(lmin), o, p, s);
    o = ivec2(x1 - 47 * s, 3 * s);
    if (lcur != NONE && box(o, 8, p, s)) t = t || ink(scientific(lcur), o, p, s);
  }
  return t ? PLOT_TEXT : c;
}

#endif
