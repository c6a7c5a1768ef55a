// kpn-t's params in file order (modules/kpn-t/params): vkdt's seven, then our extras.
layout(std430, set = 0, binding = 1) readonly buffer Params {
  float alpha, beta1, beta2, eps;
  int init;
  float L2, gradclip;
  int levels, loss, apply, precise_;  // "precise" is a GLSL keyword
  int schedule, feat;
} params;
