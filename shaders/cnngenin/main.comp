#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
#include "rng.glsl"

// cnngenin: training pairs for kpn-t (see modules/cnngenin/README.md for the maths).
// One thread per output pixel; every thread redraws its tile's numbers from the same seed.
// SET: imgi and refi are training sets from i-set (a header of image offsets and sizes, then
// the pixels); each tile draws its image.
// generate 6 writes the noisy image before its camera pipeline (linear, not rounded to half)
// with the tile's JPEG quality in alpha; jpeg.comp and decode.comp make imgo of it.

// params (generated from modules/cnngenin/params, in file order):
//   generate  0 static, 1 random tile/flip/exposure, 2 + noise, 3 + mosaic, 4 both, 5 + noise,
//             on half the tiles (drawn) as a camera makes it: on the RGGB mosaic, demosaiced;
//             6 as 5, then sRGB, 8 bits and a JPEG round trip of drawn quality
//   tiles     1: a grid of `batch` tiles of tile x tile, 0: full image
//   seed      added to vkdt's per-frame seed
//   noise     scales the drawn noise a and b (1: vkdt's range)
//   batch     tiles per frame
//   tile      tile size (vkdt: 64)
//   nlog      1: a and b log-uniform over three decades below their maximum
//   qlo, qhi  generate 6: the JPEG quality range (uniform integers, inclusive)
//   amax, bmax  the largest a and b drawn where > 0 (else noise times vkdt's 65535000, 1000)
//   nerr      > 0: noiseab reports a and b each times exp(nerr (2u - 1)), u drawn from
//             salted(s, ERR_SALT) (the noise itself stays the drawn one)
//   clean     > 0: a tile is noise-free with this probability (u drawn from
//             salted(s, CLEAN_SALT)); noiseab still reports its drawn a and b
//   demosaic  generate 5 and 6, the camera tiles: 0 bilinear, 1 Malvar-He-Cutler, 2 each tile
//             draws one (MHC where u < 0.5, u drawn from salted(s, DEMOSAIC_SALT))
//   zoom      SET: each tile reads its image at 1 / z of its size, the mean of z x z pixels per
//             tile pixel, z drawn uniformly in 1..zoom from salted(s, ZOOM_SALT) (1: as
//             they are)
//   camref    generate 5 and 6: 1 makes a camera tile's reference the clean mosaic through the
//             tile's demosaicer (the noise is then all that tells input and reference apart)
//   colour    SET: the share of the tiles whose channels are permuted and white-balanced (drawn
//             from salted(s, COLOUR_SALT)), input and reference alike, before the noise
//   pattern   generate 3 and 4: 0 the RGGB mosaic on output coordinates (alpha 1); 1 X-Trans,
//             with tiles at each tile's phase (x0, y0) drawn uniformly in 0..5 each from
//             salted(s, PHASE_SALT), without at (0, 0) (pixel lp of the tile or image has the
//             colour XTRANS[(lp.y + y0) % 6][(lp.x + x0) % 6]), the colour (0 r, 1 g, 2 b)
//             in alpha: unet-t's mosaics of any pattern (cfa 2)
#include "params.gen"
#include "jpeg.glsl"
#include "mhc.glsl"

IMG_IN(0, imgi)
IMG_IN(1, refi)
IMG_OUT(2, imgo)
IMG_OUT(3, refo)
SSBO_OUT(4, float, noiseab)

const float NOISE_SCALE = 65535.0;
const uint QUALITY_SALT = 0x4A504547u;  // "JPEG"
const uint ERR_SALT = 0x4E455252u;  // "NERR"
const uint CLEAN_SALT = 0x434C4E21u;  // "CLN!"
const uint DEMOSAIC_SALT = 0x4D484321u;  // "MHC!"
const uint ZOOM_SALT = 0x5A4F4F4Du;  // "ZOOM"
const uint COLOUR_SALT = 0x434F4C52u;  // "COLR"
const uint PHASE_SALT = 0x58545253u;  // "XTRS"

// Fujifilm's X-Trans colours (0 r, 1 g, 2 b), row by row
const int XTRANS[36] = int[36](1, 1, 0, 1, 1, 2, 1, 1, 2, 1, 1, 0, 2, 0, 1, 0, 2, 1,
                               1, 1, 2, 1, 1, 0, 1, 1, 0, 1, 1, 2, 0, 2, 1, 2, 0, 1);

// a tile's state of its own for one kind of extra draw, beside s (which stays as it is for
// every other number): a hash of s ^ salt, not the salted state itself, whose draws xorshift
// (being linear) would tie to s's own next ones and to the other salts' draws
uint salted(uint s, uint salt) { return hash32(s ^ salt) | 1u; }

// generate 6: the tile's JPEG quality, uniform in qlo..qhi, drawn from s ^ QUALITY_SALT so
// that s, and with it the per-pixel noise, stays generate 5's. Not salted(): the shipped
// JPEG recipes were trained on these draws; their one tie, to the first draw of s (pixel
// (0, 0)'s noise state), touches one pixel a tile, and the other extras are hashed
int draw_quality(uint s) {
  uint sq = s ^ QUALITY_SALT;
  int n = params.qhi - params.qlo;
  return params.qlo + min(int(float(n + 1) * mrand(sq)), n);
}

#ifdef SET
uint header(int i, int c) { return floatBitsToUint(imgi[i][c]); }
#endif

// where tile pixel lp (its position inside the tile) reads the input: the tile's flip, crop
// offset, zoom and, with SET, its image (base, size); and its colour transform (colour):
// channel c is wb[c] times input channel perm[c] where recolour
struct Tile {
  int flip; ivec2 off; ivec2 size; uint base; ivec2 isize; int zoom;
  bool recolour; ivec3 perm; vec3 wb;
};

// the first (top-left) of the zoom x zoom input pixels that tile pixel lp reads
ivec2 source_of(Tile tl, ivec2 lp) {
  ivec2 q = lp;
  if ((tl.flip & 4) != 0) q = q.yx;  // tiles are square
  if ((tl.flip & 1) != 0) q.x = tl.size.x - 1 - q.x;
  if ((tl.flip & 2) != 0) q.y = tl.size.y - 1 - q.y;
  return q * tl.zoom + tl.off;
}

// input `which` (0: imgi, 1: refi) at pixel q, mirrored at its borders
vec4 read_at(Tile tl, int which, ivec2 q) {
#ifdef SET
  ivec2 m = mirror2(q, tl.isize);
  uint i = tl.base + uint(m.x) + uint(m.y) * uint(tl.isize.x);
  return which == 0 ? imgi[i] : refi[i];
#else
  return which == 0 ? imgi[texel(0, q)] : refi[texel(1, q)];
#endif
}

// the tile's colour transform of an input value (alpha stays); every read of either input
// goes through it, so the noise (and a camera tile's mosaic) starts from the transformed value
vec4 recoloured(Tile tl, vec4 v) {
  if (!tl.recolour) return v;
  return vec4(tl.wb * vec3(v[tl.perm.x], v[tl.perm.y], v[tl.perm.z]), v.a);
}

// the mean of the zoom x zoom pixels of the input from q on (the pixel itself at zoom 1)
vec4 read_input(Tile tl, int which, ivec2 q) {
  if (tl.zoom == 1) return recoloured(tl, read_at(tl, which, q));
  vec4 sum = vec4(0.0);
  for (int dy = 0; dy < tl.zoom; dy++)
    for (int dx = 0; dx < tl.zoom; dx++) sum += read_at(tl, which, q + ivec2(dx, dy));
  return recoloured(tl, sum / float(tl.zoom * tl.zoom));
}

vec4 read_ref(Tile tl, ivec2 q) { return read_input(tl, 1, q); }

// the per-pixel Gaussian numbers of output pixel p (state s after the tile's draws)
vec4 pixel_normals(uint s, ivec2 p) {
  uint sp = s + 7654u * uint(p.x) + 1357900u * uint(p.y);
  sp = (xorshift32(sp) >> 8) << 5;  // = uint(2^29 * mrand(sp)), exactly
  vec2 u0 = vec2(mrand(sp), mrand(sp));
  vec2 u1 = vec2(mrand(sp), mrand(sp));
  return vec4(warp_gaussian(u0), warp_gaussian(u1));
}

// RGGB on output coordinates: x+y odd -> g (1), else y odd -> b (2), else r (0)
int cfa(ivec2 p) { return ((p.x + p.y) & 1) == 1 ? 1 : ((p.y & 1) == 1 ? 2 : 0); }

// the noisy photosite of tile pixel lp (inside the tile): its CFA colour of the reference plus
// that colour's noise, as generate 2 draws it at that pixel
float noisy_site(Tile tl, ivec2 origin, uint s, ivec2 lp, float gain, float a, float b,
                 out int c) {
  ivec2 p = origin + lp;
  c = cfa(p);
  float r = read_ref(tl, source_of(tl, lp))[c] * gain;
  float var = a + NOISE_SCALE * max(r, 0.0) * b;
  return r + pixel_normals(s, p)[c] * sqrt(var) / NOISE_SCALE;
}

// bilinear demosaic of the noisy mosaic at tile pixel lp: the pixel's own colour is its
// photosite; each other colour the (1 2 1)^2 weighted mean of the 3x3 photosites of that colour
vec3 demosaiced(Tile tl, ivec2 origin, uint s, ivec2 lp, float gain, float a, float b) {
  vec3 sum = vec3(0.0), wsum = vec3(0.0);
  int own = 0;
  float site = 0.0;
  for (int dy = -1; dy <= 1; dy++)
    for (int dx = -1; dx <= 1; dx++) {
      int c;
      float v = noisy_site(tl, origin, s, mirror2(lp + ivec2(dx, dy), tl.size), gain, a, b, c);
      float w = float((2 - abs(dx)) * (2 - abs(dy)));
      sum[c] += w * v;
      wsum[c] += w;
      if (dx == 0 && dy == 0) {
        own = c;
        site = v;
      }
    }
  vec3 rgb = sum / max(wsum, vec3(1.0));
  rgb[own] = site;
  return rgb;
}

// Malvar-He-Cutler demosaic of the noisy mosaic at tile pixel lp (mhc.glsl), the 5 x 5
// photosites reflected into the tile without repeating its edge (-1 -> 1), which keeps the
// pattern's colours
vec3 demosaiced_mhc(Tile tl, ivec2 origin, uint s, ivec2 lp, float gain, float a, float b) {
  float v[25];
  int c;
  for (int dy = -2; dy <= 2; dy++)
    for (int dx = -2; dx <= 2; dx++)
      v[(dy + 2) * 5 + dx + 2] = noisy_site(tl, origin, s, reflect2(lp + ivec2(dx, dy), tl.size),
                                            gain, a, b, c);
  return mhc(v, cfa(origin + lp), cfa(origin + lp + ivec2(1, 0)));
}

void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (!inside(2, p)) return;
  ivec2 osize = node.roi[2].xy;
  int T = params.tiles != 0 ? params.tile : 0;
  ivec2 cell = T > 0 ? p / T : ivec2(0);
  int cols = T > 0 ? osize.x / T : 1;
  int t = cell.x + cell.y * cols;           // the tile of this pixel
  ivec2 tsize = T > 0 ? ivec2(T) : osize;
  ivec2 lp = p - cell * T;                  // position inside the tile

  // tile 0 draws vkdt's numbers; tile t > 0 starts from a hash of that state and t
  uint s = 123456789u + 133700u * uint(global.frame) + uint(params.seed);
  if (t > 0) s = hash32(s ^ hash32(uint(t))) | 1u;
  float ev = 0.0;
  int flip = 0, zoom = 1;
  ivec2 off = ivec2(0);
  bool recolour = false;
  ivec3 perm = ivec3(0, 1, 2);
  vec3 wb = vec3(1.0);
#ifdef SET
  uint n = header(0, 0);
  int k = 0;
  if (T > 0 && params.generate != 0) {  // drawn in this order
    ev = -2.0 + 4.0 * mrand(s);
    flip = int(8.0 * mrand(s));  // bit 2: transpose
    k = min(int(float(n) * mrand(s)), int(n) - 1);
  }
  uint base = header(1 + k, 0);
  ivec2 isize = ivec2(header(1 + k, 1), header(1 + k, 2));
  if (T > 0 && params.generate != 0) {  // a crop inside the image where it is large enough
    uint sz = salted(s, ZOOM_SALT);  // beside s, so every other number stays
    if (params.zoom > 1) zoom = 1 + min(int(float(params.zoom) * mrand(sz)), params.zoom - 1);
    float ux = mrand(s);
    float uy = mrand(s);
    off = ivec2(vec2(max(isize - zoom * tsize + 1, ivec2(1))) * vec2(ux, uy));
    uint sc = salted(s, COLOUR_SALT);
    recolour = mrand(sc) < params.colour;
    const ivec3 PERMS[6] = ivec3[6](ivec3(0, 1, 2), ivec3(0, 2, 1), ivec3(1, 0, 2),
                                    ivec3(1, 2, 0), ivec3(2, 0, 1), ivec3(2, 1, 0));
    perm = PERMS[min(int(6.0 * mrand(sc)), 5)];
    vec3 u;
    for (int c = 0; c < 3; c++) u[c] = mrand(sc);
    wb = exp2(u - (u.x + u.y + u.z) / 3.0);  // 2^(u - 1/2) over the three's geometric mean
  }
#else
  if (T > 0 && params.generate != 0) {  // drawn in this order
    ev = -2.0 + 4.0 * mrand(s);
    flip = int(4.0 * mrand(s));
    float ux = mrand(s);
    float uy = mrand(s);
    off = ivec2(vec2(node.roi[0].xy) * vec2(ux, uy));
  }
#endif

#ifdef SET
  Tile tl = Tile(flip, off, tsize, base, isize, zoom, recolour, perm, wb);
#else
  Tile tl = Tile(flip, off, tsize, 0u, ivec2(0), 1, false, ivec3(0, 1, 2), vec3(1.0));
#endif
  ivec2 q = source_of(tl, lp);
  float gain = exp2(ev);
  vec4 img = read_input(tl, 0, q) * gain;
  vec4 ref = read_ref(tl, q) * gain;

  float noise_a = 0.0, noise_b = 0.0;
  int quality = 0;
  if (params.generate == 2 || params.generate >= 4) {
    float ua = mrand(s);
    float ub = mrand(s);
    if (params.nlog != 0) {  // log-uniform: 10^(-3u) of the maximum
      ua = pow(10.0, -3.0 * ua);
      ub = pow(10.0, -3.0 * ub);
    }
    // 1000 * 65535 * u and 1000 * u (vkdt, noise 1), or amax u and bmax u
    noise_a = (params.amax > 0.0 ? params.amax : params.noise * 65535000.0) * ua;
    noise_b = (params.bmax > 0.0 ? params.bmax : params.noise * 1000.0) * ub;
    // generate 5 and 6: a drawn half of the tiles gets the noise on the mosaic, demosaiced
    bool camera = params.generate >= 5 && mrand(s) < 0.5;
    if (params.generate == 6) quality = draw_quality(s);
    // clean: a drawn share of the tiles gets no noise (a photo without any), told the drawn
    // level all the same; beside s, so every other number stays
    uint sc = salted(s, CLEAN_SALT);
    bool clean = params.clean > 0.0 && mrand(sc) < params.clean;
    float apply_a = clean ? 0.0 : noise_a, apply_b = clean ? 0.0 : noise_b;
    // demosaic: the camera tile's demosaicer, bilinear or Malvar-He-Cutler (2: drawn)
    uint sd = salted(s, DEMOSAIC_SALT);
    bool mhc_tile = params.demosaic == 1 || (params.demosaic == 2 && mrand(sd) < 0.5);
    if (camera && mhc_tile) {
      img.rgb = demosaiced_mhc(tl, cell * T, s, lp, gain, apply_a, apply_b);
      if (params.camref != 0) ref.rgb = demosaiced_mhc(tl, cell * T, s, lp, gain, 0.0, 0.0);
    } else if (camera) {
      img.rgb = demosaiced(tl, cell * T, s, lp, gain, apply_a, apply_b);
      if (params.camref != 0) ref.rgb = demosaiced(tl, cell * T, s, lp, gain, 0.0, 0.0);
    } else {
      vec4 z = pixel_normals(s, p);
      vec3 var = apply_a + NOISE_SCALE * max(ref.rgb, vec3(0.0)) * apply_b;
      img.rgb = ref.rgb + z.rgb * sqrt(var) / NOISE_SCALE;
    }
  }

  bool mosaic = params.generate == 3 || params.generate == 4;
  bool xtrans = mosaic && params.pattern == 1;
  if (xtrans) {
    uint sx = salted(s, PHASE_SALT);  // X-Trans at the tile's phase, its colour in alpha
    int x0 = T > 0 ? min(int(6.0 * mrand(sx)), 5) : 0;
    int y0 = T > 0 ? min(int(6.0 * mrand(sx)), 5) : 0;
    int c = XTRANS[(lp.y + y0) % 6 * 6 + (lp.x + x0) % 6];
    img = vec4(vec3(img[c]), float(c));
  } else if (mosaic) {  // RGGB, channel replicated
    img.rgb = vec3(img[cfa(p)]);
  }

  if (lp.x == 0 && lp.y == 0) {  // the tile's record
    if (params.nerr > 0.0) {  // the profile as an estimate might give it: off by a drawn factor
      uint se = salted(s, ERR_SALT);
      noise_a *= exp(params.nerr * (2.0 * mrand(se) - 1.0));
      noise_b *= exp(params.nerr * (2.0 * mrand(se) - 1.0));
    }
    noiseab[4 * t] = noise_a;
    noiseab[4 * t + 1] = noise_b;
    noiseab[4 * t + 2] = float(T);
    noiseab[4 * t + 3] = float(cols);
  }

  // generate 6: a JPEG holds [0, 1] only, so the reference is the clean image as it could be
  // encoded (the encoder clamps the input the same way)
  if (params.generate == 6) ref.rgb = clamp(ref.rgb, 0.0, 1.0);
  if (!xtrans) img.a = 1.0;
  ref.a = 1.0;
  int i = p.x + p.y * osize.x;
  imgo[i] = params.generate == 6 ? vec4(img.rgb, float(quality)) : to_half(img);
  refo[i] = to_half(ref);
}
