// mlp-t's params in file order (modules/mlp-t/params); the string params come last and no
// kernel reads them (the module turns them into defines).
layout(std430, set = 0, binding = 1) readonly buffer Params {
  float alpha, beta1, beta2, eps, lscale, gradclip, shift;
  int seed, batch, width, depth, nout, octaves, bias;
  int tiles_x, tiles_y;
  int init, preview, resample, precise_;  // (precise is a GLSL keyword)
  float talpha, perlevel;
  int levels, features, log2size, baseres, dims, slices, jitter;
} params;
