#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
#include "rng.glsl"
#include "params.gen"  // the params block, generated from modules/unet-t/params
#include "optim.glsl"
// unet-t's optimiser: the trainers' one kernel (adam.glsl) with unet-t's parts. The gradient
// is clipped, g *= gradclip / ||g|| if ||g|| > gradclip, then opt_step (param opt) at
// a_t = alpha (schedule 0) or alpha (1 + cos(pi t / frames)) / 2 (schedule 1). Frame 0 (init
// 1, or no wcp): a layer's weights uniform in +-1/sqrt(fan_in) (fan_in = CIN k^2) from the
// xorshift of seed 133700013 i, its biases 0; else the checkpoint wcp (f32). The layer table
// comes from module.py: UNET_LAYERS layers, UNET_WEND their weights' ends (the bias follows),
// UNET_END their ends, UNET_FAN their fan-ins.
#ifndef UNET_NP  // one layer for `vkgraph shaders --check`; module.py always defines them
#define UNET_NP 4
#define UNET_LAYERS 1
#define UNET_WEND 3u
#define UNET_END 4u
#define UNET_FAN 3.0
#endif
#define ADAM_NP UNET_NP
#define ADAM_NETS 1
#define ADAM_OPT params.opt
#define SCALE_START 1.0
#include "adam.glsl"

const uint WEND[UNET_LAYERS] = uint[](UNET_WEND);
const uint LEND[UNET_LAYERS] = uint[](UNET_END);
const float FAN[UNET_LAYERS] = float[](UNET_FAN);

float adam_start(uint i) {
  if (params.init == 0 && push.has_wcp != 0) return wcp[i];
  for (int l = 0; l < UNET_LAYERS; l++) {
    if (i < WEND[l]) {
      uint s = i * 133700013u;
      return (0.5 - mrand(s)) * 2.0 / sqrt(FAN[l]);
    }
    if (i < LEND[l]) return 0.0;
  }
  return 0.0;
}

bool adam_used(uint i) { return true; }

uint adam_net(uint i) { return 0u; }

float adam_grad(uint i, float w) { return clipped(dw[i], gn[0], params.gradclip); }

float adam_lr(uint i, float rate) {
  float lr = params.alpha * rate;
  if (params.schedule == 1) {
    float t = float(global.frame);
    lr *= 0.5 * (1.0 + cos(M_PI * min(t / float(max(global.frame_cnt, 1)), 1.0)));
  }
  return lr;
}

float adam_gnorm() { return gn[0]; }

void adam_store16(uint i, float w) {}
