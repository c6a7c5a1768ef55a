// What cnngenin's generate 6 kernels share (modules/cnngenin/README.md, "Camera pipeline"):
// the layout of the JPEG planes, half rounding of the outputs, the sRGB curve and libjpeg's
// integer arithmetic (jccolor.c, jdcolor.c, jfdctint.c, jidctint.c, jcdctmgr.c), so that the
// kernels decode to exactly what libjpeg (Pillow) does from the same 8-bit image.
// Needs vkgraph.glsl and params.gen included first.
#ifndef CNNGENIN_JPEG_GLSL
#define CNNGENIN_JPEG_GLSL

const float HALF_MAX = 65504.0;

// the nearest half-precision value (ties to even), in integer arithmetic: a driver may fold
// unpackHalf2x16(packHalf2x16(x)) into x (NVIDIA's does)
float round_half(float x) {
  if (abs(x) < 6.103515625e-05) return roundEven(x * 16777216.0) / 16777216.0;  // subnormal
  uint b = floatBitsToUint(x);
  b += 0x0FFFu + ((b >> 13) & 1u);
  return uintBitsToFloat(b & 0xFFFFE000u);
}

// what an rgba16f image would hold: round to the nearest half (finite range)
vec4 to_half(vec4 v) {
  v = clamp(v, vec4(-HALF_MAX), vec4(HALF_MAX));
  return vec4(round_half(v.x), round_half(v.y), round_half(v.z), round_half(v.w));
}

// -- layout: each tile (or the whole image with tiles 0) is one JPEG image, its own cell of
// the planes, padded to whole 16x16 MCUs (4:2:0)

// the size of one JPEG image in the output of size osize
ivec2 cell_size(ivec2 osize) { return params.tiles != 0 ? ivec2(params.tile) : osize; }

// that size padded to whole MCUs
ivec2 padded(ivec2 cs) { return (cs + 15) / 16 * 16; }

// -- sRGB (pipeline/formats.py's curve) and 8-bit codes

int srgb8(float x) {
  x = clamp(x, 0.0, 1.0);
  float s = x <= 0.0031308 ? 12.92 * x : 1.055 * pow(x, 1.0 / 2.4) - 0.055;
  return int(roundEven(s * 255.0));
}

float srgb_decode8(int c) {
  float x = float(c) / 255.0;
  return x <= 0.04045 ? x / 12.92 : pow((x + 0.055) / 1.055, 2.4);
}

// -- colour conversion, fixed point of 16 bits (libjpeg's FIX(x) = round(x 2^16))

const int HALF16 = 1 << 15;
const int CENTRE16 = 128 << 16;

int luma_of(ivec3 c) { return (19595 * c.r + 38470 * c.g + 7471 * c.b + HALF16) >> 16; }

int cb_of(ivec3 c) { return (-11059 * c.r - 21709 * c.g + 32768 * c.b + CENTRE16 + HALF16 - 1) >> 16; }

int cr_of(ivec3 c) { return (32768 * c.r - 27439 * c.g - 5329 * c.b + CENTRE16 + HALF16 - 1) >> 16; }

ivec3 ycc_to_rgb(int y, int cb, int cr) {
  cb -= 128;
  cr -= 128;
  int r = y + ((91881 * cr + HALF16) >> 16);
  int g = y + ((-22554 * cb + HALF16 - 46802 * cr) >> 16);
  int b = y + ((116130 * cb + HALF16) >> 16);
  return clamp(ivec3(r, g, b), 0, 255);
}

// -- quantisation tables (ITU-T T.81 Annex K, natural order), scaled by quality as IJG does

const int IJG_LUMA[64] = int[64](
  16, 11, 10, 16, 24, 40, 51, 61, 12, 12, 14, 19, 26, 58, 60, 55,
  14, 13, 16, 24, 40, 57, 69, 56, 14, 17, 22, 29, 51, 87, 80, 62,
  18, 22, 37, 56, 68, 109, 103, 77, 24, 35, 55, 64, 81, 104, 113, 92,
  49, 64, 78, 87, 103, 121, 120, 101, 72, 92, 95, 98, 112, 100, 103, 99);
const int IJG_CHROMA[64] = int[64](
  17, 18, 24, 47, 99, 99, 99, 99, 18, 21, 26, 66, 99, 99, 99, 99,
  24, 26, 56, 99, 99, 99, 99, 99, 47, 66, 99, 99, 99, 99, 99, 99,
  99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99,
  99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99);

// jcparam.c: 5000/q below quality 50, 200 - 2q from 50; (t s + 50) div 100 in 1..255
int quant(int base, int quality) {
  int scale = quality < 50 ? 5000 / quality : 200 - 2 * quality;
  return clamp((base * scale + 50) / 100, 1, 255);
}

// -- the islow DCTs: CONST_BITS 13, PASS1_BITS 2

int descale(int x, int n) { return (x + (1 << (n - 1))) >> n; }

// the odd part shared by both DCTs (Loeffler), unscaled: outputs for t4..t7
ivec4 rotate_odd(int t4, int t5, int t6, int t7) {
  int z5 = (t4 + t6 + t5 + t7) * 9633;
  int z1 = (t4 + t7) * -7373, z2 = (t5 + t6) * -20995;
  int z3 = (t4 + t6) * -16069 + z5, z4 = (t5 + t7) * -3196 + z5;
  return ivec4(t4 * 2446 + z1 + z3, t5 * 16819 + z2 + z4, t6 * 25172 + z2 + z3,
               t7 * 12299 + z1 + z4);
}

// one jfdctint.c pass over 8 values: first (rows) scales up by 2^2, the second (columns)
// back, leaving the DCT-II times 8
void fdct8(inout int d[8], bool first) {
  int t0 = d[0] + d[7], t7 = d[0] - d[7], t1 = d[1] + d[6], t6 = d[1] - d[6];
  int t2 = d[2] + d[5], t5 = d[2] - d[5], t3 = d[3] + d[4], t4 = d[3] - d[4];
  int t10 = t0 + t3, t13 = t0 - t3, t11 = t1 + t2, t12 = t1 - t2;
  int n = first ? 11 : 15;
  d[0] = first ? (t10 + t11) << 2 : descale(t10 + t11, 2);
  d[4] = first ? (t10 - t11) << 2 : descale(t10 - t11, 2);
  int z1 = (t12 + t13) * 4433;
  d[2] = descale(z1 + t13 * 6270, n);
  d[6] = descale(z1 - t12 * 15137, n);
  ivec4 o = rotate_odd(t4, t5, t6, t7);
  d[7] = descale(o.x, n);
  d[5] = descale(o.y, n);
  d[3] = descale(o.z, n);
  d[1] = descale(o.w, n);
}

// one jidctint.c pass over 8 dequantised coefficients, descaled by n bits
void idct8(inout int c[8], int n) {
  int z1 = (c[2] + c[6]) * 4433;
  int t2 = z1 - c[6] * 15137, t3 = z1 + c[2] * 6270;
  int t0 = (c[0] + c[4]) << 13, t1 = (c[0] - c[4]) << 13;
  int t10 = t0 + t3, t13 = t0 - t3, t11 = t1 + t2, t12 = t1 - t2;
  ivec4 o = rotate_odd(c[7], c[5], c[3], c[1]);  // (for c7, c5, c3, c1)
  c[0] = descale(t10 + o.w, n);
  c[7] = descale(t10 - o.w, n);
  c[1] = descale(t11 + o.z, n);
  c[6] = descale(t11 - o.z, n);
  c[2] = descale(t12 + o.y, n);
  c[5] = descale(t12 - o.y, n);
  c[3] = descale(t13 + o.x, n);
  c[4] = descale(t13 - o.x, n);
}

// an 8x8 block of 8-bit codes (row-major) through the forward DCT, quantisation (rounded
// half away from zero, jcdctmgr.c), dequantisation and the inverse DCT, back to 8-bit codes
void block_roundtrip(inout int b[64], bool chroma, int quality) {
  int v[8];
  for (int r = 0; r < 8; r++) {
    for (int k = 0; k < 8; k++) v[k] = b[8 * r + k] - 128;
    fdct8(v, true);
    for (int k = 0; k < 8; k++) b[8 * r + k] = v[k];
  }
  for (int c = 0; c < 8; c++) {
    for (int k = 0; k < 8; k++) v[k] = b[8 * k + c];
    fdct8(v, false);
    for (int k = 0; k < 8; k++) {
      int t = quant(chroma ? IJG_CHROMA[8 * k + c] : IJG_LUMA[8 * k + c], quality);
      int q = 8 * t;
      int m = (abs(v[k]) + (q >> 1)) / q;
      v[k] = (v[k] < 0 ? -m : m) * t;  // quantised, dequantised
    }
    idct8(v, 11);
    for (int k = 0; k < 8; k++) b[8 * k + c] = v[k];
  }
  for (int r = 0; r < 8; r++) {
    for (int k = 0; k < 8; k++) v[k] = b[8 * r + k];
    idct8(v, 18);
    for (int k = 0; k < 8; k++) b[8 * r + k] = clamp(v[k] + 128, 0, 255);
  }
}

#endif
