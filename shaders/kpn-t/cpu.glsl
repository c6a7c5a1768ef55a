// Shared by the cpu kernels fwd_cpu and bck_cpu (fwd_cpu.comp says why they look like this):
// PX pixels per invocation, SG = 8 invocations a subgroup; a weight row W_l[o][0..63] is
// held by the subgroup as two vec4s per lane (v0: columns 4L..4L+3, v1: 32+4L..32+4L+3 on
// lane L), and ROW(v, c0) runs the kernel's MAC(component, lane, column) for each of the 32
// weights of v (ROW2: MAC2 for two rows at once): FROM_LANE(x, L) hands lane L's x to every lane. It is subgroupShuffle with a
// constant lane, not subgroupBroadcast: on llvmpipe a broadcast first loops over the lanes
// (with a branch each) to check the exec mask, and the shuffle costs less: measured at 64^2,
// 4 levels, one llvmpipe thread, fwd_cpu 19.2 -> 15.7 ms, bck_cpu 25.8 -> 15.7 ms. Same
// value, so the same bits. Needs GL_KHR_shader_subgroup_shuffle.
#ifndef KPN_CPU_GLSL
#define KPN_CPU_GLSL

#ifndef PX
#define PX 8
#endif
#define SG 8

#define FROM_LANE(x, L) subgroupShuffle(x, L)

// VEC4_IN(b, name) declares connector b, read as vec4s: V4(name, i) is its i-th vec4. With
// TEXEL (the module sets it where the buffers fit the device's texel-view limit) through a
// uniform texel buffer: llvmpipe fetches texels as one vector gather per component, while a
// storage-buffer load whose address differs per lane is a loop over the lanes with a branch
// each (measured at 64^2, 4 levels, one llvmpipe thread: mulw_cpu 8.3 -> 5.7 ms with its h
// and g fetched as texels, fwd_cpu 10.5 -> 9.0 with its weights, bck_cpu 11.6 -> 9.9 with its
// activations). Same values, so the same bits.
#ifdef TEXEL
#define VEC4_IN(b, name) TEX_IN(b, name##_t)
#define V4(name, i) texelFetch(name##_t, int(i))
#else
#define VEC4_IN(b, name) SSBO_IN(b, vec4, name)
#define V4(name, i) name[i]
#endif

#define LANE(v, L, c0) MAC(v.x, L, c0 + 4 * L) MAC(v.y, L, c0 + 4 * L + 1) \
  MAC(v.z, L, c0 + 4 * L + 2) MAC(v.w, L, c0 + 4 * L + 3)
#define ROW(v, c0) LANE(v, 0, c0) LANE(v, 1, c0) LANE(v, 2, c0) LANE(v, 3, c0) \
  LANE(v, 4, c0) LANE(v, 5, c0) LANE(v, 6, c0) LANE(v, 7, c0)
// the same for two weight rows held as va and vb: MAC2(component of va, of vb, lane, column)
#define LANE2(va, vb, L, c0) MAC2(va.x, vb.x, L, c0 + 4 * L) MAC2(va.y, vb.y, L, c0 + 4 * L + 1) \
  MAC2(va.z, vb.z, L, c0 + 4 * L + 2) MAC2(va.w, vb.w, L, c0 + 4 * L + 3)
#define ROW2(va, vb, c0) LANE2(va, vb, 0, c0) LANE2(va, vb, 1, c0) LANE2(va, vb, 2, c0) \
  LANE2(va, vb, 3, c0) LANE2(va, vb, 4, c0) LANE2(va, vb, 5, c0) LANE2(va, vb, 6, c0)    \
  LANE2(va, vb, 7, c0)

#endif
