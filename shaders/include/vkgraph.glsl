// Binding conventions shared by every kernel (see pipeline/README.md).
// set 0: 0 global uniform, 1 module params (declared by the kernel), 2 node info.
// set 1: binding i = node connector i: storage buffers (images are f32, row-major), or, for a
// connector the kernel only reads, a uniform texel buffer of vec4 texels (TEX_IN: the engine
// binds a texel view where the kernel declares a samplerBuffer; texelFetch reads it).
// Kernels start with: #version 460, #extension GL_GOOGLE_include_directive : enable,
// #include "vkgraph.glsl".
#ifndef VKGRAPH_GLSL
#define VKGRAPH_GLSL



layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

layout(std140, set = 0, binding = 0) uniform Global {
  int frame;      // current frame index
  int frame_cnt;  // number of frames of this run
  int pad0, pad1;
} global;

// (wd, ht, nchan, 0) of node connector i
layout(std430, set = 0, binding = 2) readonly buffer NodeInfo { ivec4 roi[]; } node;

// declare an image connector as a buffer of vec4/vec2/float
#define IMG_IN(b, name)  layout(std430, set = 1, binding = b) readonly buffer name##_buf { vec4 name[]; };
#define IMG_OUT(b, name) layout(std430, set = 1, binding = b) writeonly buffer name##_buf { vec4 name[]; };
#define IMG_RW(b, name)  layout(std430, set = 1, binding = b) buffer name##_buf { vec4 name[]; };
#define SSBO_IN(b, T, name)  layout(std430, set = 1, binding = b) readonly buffer name##_buf { T name[]; };
#define SSBO_OUT(b, T, name) layout(std430, set = 1, binding = b) writeonly buffer name##_buf { T name[]; };
#define SSBO_RW(b, T, name)  layout(std430, set = 1, binding = b) buffer name##_buf { T name[]; };
#define TEX_IN(b, name) layout(set = 1, binding = b) uniform samplerBuffer name;

// mirrored-repeat index for any reach: -1 -> 0, -2 -> 1, n -> n-1 (numpy pad "symmetric")
// (GLSL leaves % of a negative operand undefined -- NVIDIA's differs from C's -- so negative
// indices are reflected first: -1 -> 0, -2 -> 1, which the period-2n pattern agrees with.)
int mirror(int i, int n) {
  if (uint(i) < uint(n)) return i;  // inside: no division
  int p = 2 * n;
  i = (i < 0 ? -1 - i : i) % p;
  return i < n ? i : p - 1 - i;
}

ivec2 mirror2(ivec2 p, ivec2 size) { return ivec2(mirror(p.x, size.x), mirror(p.y, size.y)); }

// reflected index without repeating the edge: -1 -> 1, -2 -> 2, n -> n - 2 (numpy pad
// "reflect"; keeps a 2 x 2 colour pattern's phase at the borders; n >= 2)
int reflect_index(int i, int n) {
  int p = 2 * (n - 1);
  i = abs(i) % p;
  return i < n ? i : p - i;
}

ivec2 reflect2(ivec2 p, ivec2 size) {
  return ivec2(reflect_index(p.x, size.x), reflect_index(p.y, size.y));
}

// linear index of pixel p of connector c with mirrored borders
int texel(int c, ivec2 p) {
  ivec2 q = mirror2(p, node.roi[c].xy);
  return q.x + q.y * node.roi[c].x;
}

bool inside(int c, ivec2 p) { return all(greaterThanEqual(p, ivec2(0))) && all(lessThan(p, node.roi[c].xy)); }

// neither NaN nor +-inf (the trainers' test of a loss, gradient or step)
bool finite(float x) { return !isnan(x) && !isinf(x); }

#endif
