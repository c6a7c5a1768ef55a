// The noise profile of pixel p (prep.comp, loss.comp; modules/unet-t/README.md): cnngenin's
// per-tile records on noiseab, (a, b, tile size T or 0 for the whole image, tile columns),
// tile t = p.x / T + (p.y / T) columns; with FROM_PARAMS the module's params `noise a`,
// `noise b` for every pixel (unet, the inference module: they may change between frames
// without a rebuild); with CFA, a cell's photosites. Include after unet.glsl's `real` and the
// bindings noiseab (and inp).
#ifdef FROM_PARAMS
#include "params.gen"  // unet's params block (modules/unet/params): noise_a, noise_b, ...
#endif
const real LUMA_R = real(0.2627), LUMA_G = real(0.6780), LUMA_B = real(0.0593);

// (a, b) of p's tile
void profile(ivec2 p, out real a, out real b) {
#ifdef FROM_PARAMS
  a = real(params.noise_a);
  b = real(params.noise_b);
#else
  int T = int(noiseab[2]);
  int cols = max(int(noiseab[3]), 1);
  int t = T > 0 ? p.x / T + (p.y / T) * cols : 0;
  a = real(noiseab[4 * t]);
  b = real(noiseab[4 * t + 1]);
#endif
}

// s: the noise std at mid grey, max(sqrt(a + 65535 0.18 b) / 65535, 1e-5)
real scale_of(real a, real b) {
  return max(sqrt(max(a + real(65535.0 * 0.18) * b, real(0))) / real(65535), real(1e-5));
}

// [lo, hi): the pixels of p's tile (as profile finds it) within the image of `size` pixels
void tile_box(ivec2 p, ivec2 size, out ivec2 lo, out ivec2 hi) {
#ifdef FROM_PARAMS
  lo = ivec2(0);
  hi = size;
#else
  int T = int(noiseab[2]);
  lo = T > 0 ? p / T * T : ivec2(0);
  hi = T > 0 ? min(lo + T, size) : size;
#endif
}

#ifdef MOSAIC
// A photosite's colour (0 r, 1 g, 2 b) in a mosaic of any pattern: its alpha (README.md,
// "Mosaics of any pattern")
int colour_of(vec4 x) { return clamp(int(x.a + 0.5), 0, 2); }
#endif

#ifdef CFA
// The photosites (R, G1, G2, B) of the RGGB cell whose red photosite is inp[k], rows of w
// pixels, each read from its own colour's channel (prep.comp, loss.comp; an RGB image reads
// as its mosaic). Needs the binding inp too.
vec4 photosites(int k, int w) {
  return vec4(inp[k].r, inp[k + 1].g, inp[k + w].g, inp[k + w + 1].b);
}
#endif
