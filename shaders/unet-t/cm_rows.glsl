// conv_cm.comp's and convb_cm.comp's main: a product of rows (output channels for conv_cm,
// input channels for convb_cm) by pixel columns (the output pixels for conv_cm, the input
// pixels for convb_cm), the inner index in KK CG steps of 16 channels at one tap (cm.glsl).
// Workgroup (x, y) computes rows CM_TM y .. CM_TM y + CM_TM - 1 of the CM_TN columns from
// CM_TN x (warp v: columns 16 CM_FN v .. 16 CM_FN (v + 1) - 1); a step stages A's CM_TM x 16
// block (sa, the weights) and B's 16 x CM_TN block (sb) as f16 in shared memory, a thread
// the same CM_NP pixels every step (px[s], its tile's box pbox[s] with a conv3), whose
// source or target it finds once a step; it reads the next step's values from global
// memory while the warps multiply this step's. The includer defines CG (the inner side's
// channel groups), COLW and COLN (the columns' image width and pixel count) and:
//   void fetch(int t, out float wr[CM_NW], out float xr[16 * CM_NP]): step t's values of this
//     thread, wr[i] for sa[lid + i CM_THREADS], xr[16 s + c] for sb[CM_TN c + lid + s
//     CM_THREADS] (row0, col0: the workgroup's first row and column)
//   void put(int row, int col, float sum): a result (row < the rows, col < COLN)
// and may define CM_STEPS, the steps (KK CG where it does not).
#ifndef CM_FN
#define CM_FN 2
#endif
#define CM_TN (16 * CM_FN * CM_WARPS)
#define CM_NP (CM_TN / CM_THREADS)
#define CM_NW (CM_TM * 16 / CM_THREADS)  // the weights a thread stages a step
#ifndef CM_STEPS
#define CM_STEPS (KK * CG)
#endif
shared float16_t sa[CM_TM * 16];
shared float16_t sb[16 * CM_TN];

int lid, ni, no, row0, col0;
ivec2 px[CM_NP];
ivec4 pbox[CM_NP];

void fetch(int t, out float wr[CM_NW], out float xr[16 * CM_NP]);
void put(int row, int col, float sum);

void main() {
  lid = int(gl_LocalInvocationIndex);
  ni = push.wi * push.hi;
  no = push.wo * push.ho;
  int T = tile_at(noiseab[2]);
  col0 = int(gl_WorkGroupID.x) * CM_TN;
  row0 = int(gl_WorkGroupID.y) * CM_TM;
  uint v = cm_warp();
  for (int s = 0; s < CM_NP; s++) {
    int i = col0 + lid + s * CM_THREADS;
    px[s] = ivec2(i % COLW, i / COLW);
#if KIND == 0
    pbox[s] = box_of(px[s], T);
#endif
  }
  CM_ACC acc[CM_FM * CM_FN];
  CM_UNROLL for (int f = 0; f < CM_FM * CM_FN; f++) CM_ZERO(acc[f]);
  float wr[CM_NW], xr[16 * CM_NP];
  fetch(0, wr, xr);
  for (int t = 0; t < CM_STEPS; t++) {
    for (int i = 0; i < CM_NW; i++) sa[lid + i * CM_THREADS] = cm_half(wr[i]);
    for (int s = 0; s < CM_NP; s++)
      for (int c = 0; c < 16; c++)
        sb[c * CM_TN + lid + s * CM_THREADS] = cm_half(xr[16 * s + c]);
    barrier();
    if (t + 1 < CM_STEPS) fetch(t + 1, wr, xr);
    CM_A a[CM_FM];
    CM_B b[CM_FN];
    CM_UNROLL for (int i = 0; i < CM_FM; i++) CM_LOAD_ROW(a[i], sa, 256 * i, 16);
    CM_UNROLL for (int j = 0; j < CM_FN; j++) CM_LOAD_ROW(b[j], sb, 16 * (CM_FN * v + j), CM_TN);
    CM_UNROLL for (int i = 0; i < CM_FM; i++)
      CM_UNROLL for (int j = 0; j < CM_FN; j++) CM_MMA(acc[i * CM_FN + j], a[i], b[j]);
    barrier();
  }
  CM_UNROLL for (int i = 0; i < CM_FM; i++)
    CM_UNROLL for (int j = 0; j < CM_FN; j++) {
      CM_SCRATCH(acc[i * CM_FN + j])
      for (int e = 0; e < 8; e++) {
        int col = col0 + 16 * (CM_FN * int(v) + j) + CM_COL(e);
        if (col < COLN) put(row0 + 16 * i + CM_ROW(e), col, CM_VALUE(e));
      }
      CM_SYNC();
    }
}
