// The frame's loss E = the sum of the n (hi, lo) float pairs in Epart, summed as double-float
// pairs in a fixed order (reproducible, and precise enough for the gradient check) ->
// hist[frame % len] (the loss history across frames) and cur[0] + cur[1] (the host adds them
// in float64). By all 256 threads of a workgroup (t: the thread's index); the includer
// declares Epart, hist and cur.
#include "dfloat.glsl"

shared vec2 s_df[256];

void loss_sum(uint t, int n, int len) {
  vec2 e = vec2(0.0);
  for (int k = int(t); k < n; k += 256) e = df_add(e, Epart[k]);
  s_df[t] = e;
  barrier();
  for (uint h = 128u; h > 0u; h >>= 1) {
    if (t < h) s_df[t] = df_add(s_df[t], s_df[t + h]);
    barrier();
  }
  if (t == 0u) {
    hist[global.frame % len] = s_df[0].x + s_df[0].y;
    cur[0] = s_df[0].x;
    cur[1] = s_df[0].y;
  }
}
