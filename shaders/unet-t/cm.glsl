// unet-t's cooperative-matrix layer kernels' shared part (conv_cm.comp and convb_cm.comp,
// whose main is cm_rows.glsl's, and convw_cm.comp: the products of conv.comp, convb.comp and
// convw.comp on tensor cores, f16 operands and f32 sums; shaders/include/mlp_coopmat.glsl has
// the operations). Include after mlp_coopmat.glsl and unet.glsl (the layer, `real` = float:
// these kernels have no PRECISE).
// A workgroup is CM_WARPS warps of 32; its block of the product is CM_TM rows (16 CM_FM: the
// output channels, or the input channels for convb) by columns that each kernel says. The
// products run over their inner index in steps of 16, tap-major: step t of a layer with C
// channels on the inner side (the input's for conv and convw, the output's for convb) is tap
// t / CG, channels 16 (t % CG) .. 16 (t % CG) + 15, CG = ceil(C / 16) (channels past C read
// zero), so that a step's gather finds each pixel's source once for its 16 channels.
#ifndef CM_TM
#define CM_TM 32
#endif
#ifndef CM_WARPS
#define CM_WARPS 4
#endif
#define CM_THREADS (CM_WARPS * 32)
#define CM_FM (CM_TM / 16)  // fragment rows of the block

// gradients go to f16 times GSCALE (a power of two, so exactly undone): dE/dY is ~s / P
// (loss.comp), below f16's normal range; the host picks GSCALE ~ 16 P. A gradient that then
// overflows becomes inf, and the update that reads it is skipped as any non-finite one.
#ifndef GSCALE
#define GSCALE 1.0
#endif

// x in f16: inf (of x's sign) where |x| is past f16's largest, NaN for NaN. A device may
// convert with rounding toward zero, which saturates at 65504: an overflow must show, so
// that the update skips it (training) or the image runs again in fp32 (inference).
float16_t cm_half(float x) {
  return abs(x) <= CM_F16_MAX ? float16_t(x) : float16_t(x * uintBitsToFloat(0x7f800000u));
}

// dst[off + c] = the layer's input channel c0 + c at pixel index iq (unet.glsl's INPUT_AT), 0
// where !ok or past CIN, for c = 0 .. 15: a step's gather of one pixel (conv_cm, convw_cm)
#define CM_GATHER16(dst, off, ok, c0, iq) \
  for (int c_ = 0; c_ < 16; c_++)         \
    dst[(off) + c_] = (ok) && (c0) + c_ < CIN ? INPUT_AT((c0) + c_, iq) : 0.0;

// a layer's output y from f32 sums that overflowed f16 operands may be inf or NaN, and a ReLU
// (max(y, 0)) would turn NaN into 0: an output not finite is NaN, and cm_relu keeps it, so
// that it reaches the loss (training skips the update) or the image (inference reruns).
float cm_poison(float y) { return isinf(y) ? uintBitsToFloat(0x7fc00000u) : y; }
float cm_relu(float y) { return y > 0.0 || isnan(y) ? y : 0.0; }
// a forward layer's output from its sum and bias y: poisoned, relu'd where the layer is
float cm_output(float y) { return RELU != 0 ? cm_relu(cm_poison(y)) : cm_poison(y); }

// each warp's 16 x 16 f32 scratch, through which its fragments reach global memory one at a
// time (bounds and layouts checked element by element)
shared float cm_out[CM_WARPS * 256];

// fragment `frag` of this warp to cm_out, where the warp's lanes then read their 8 elements
// each: element e of this lane is the fragment's row CM_ROW(e), column CM_COL(e), value
// CM_VALUE(e); a CM_SYNC() after the reads. Reached by the whole workgroup (the emulation's
// syncs are workgroup barriers). Element e of the 32 lanes is two rows, a lane a column:
// where the columns are pixels, a store of the 32 values writes two runs of 16 (a lane's 8
// consecutive columns instead wrote 32 places 4 bytes each: 8 times the memory transactions,
// most of an up layer's time on the H100).
#define CM_SCRATCH(frag)                              \
  CM_STORE_ROW(frag, cm_out, cm_warp() * 256u, 16u); \
  CM_SYNC();
#define CM_ROW(e) (2 * (e) + int(cm_lane()) / 16)
#define CM_COL(e) (int(cm_lane()) % 16)
#define CM_VALUE(e) cm_out[cm_warp() * 256u + 32u * uint(e) + cm_lane()]
