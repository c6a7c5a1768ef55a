// Arch 2's filter, shared by apply_nl.comp and dapply_nl.comp (maths: modules/kpn-t/
// reference.py, apply_ctx and apply_ctx_backward given block_match's indices). Include after
// kpn.glsl (with KPN_NL) and after binding K (float, N_OUT values a pixel: group 0 luma
// K_0..NK-1, group 1 chroma K_NK..2 NK-1, the rest unused) and nltap (uint, match.comp's
// indices of the NL_TAPS matched offsets, 4 to a word).
#define NT (N_TAPS + NL_TAPS)  // taps: the star's, then the matched ones
#define NK (NT + 1)            // K's values a group: NT logits and the gain

// group g (0 luma, 1 chroma) of pixel i: the softmax s of its NT logits and its gain beta
void group_softmax_nl(int i, int g, out float s[NT], out float beta) {
  int o = i * N_OUT + g * NK;
  float mx = -1e30, S = 0.0;
  for (int k = 0; k < NT; k++) mx = max(mx, K[o + k]);
  for (int k = 0; k < NT; k++) {
    s[k] = exp(K[o + k] - mx);
    S += s[k];
  }
  for (int k = 0; k < NT; k++) s[k] /= S;
  beta = sigmoid(K[o + NT]);
}

// tap k of pixel i: the star's, then its matched offsets
ivec2 tap_offset(int i, int k) {
  if (k < N_TAPS) return taps[k];
  int m = k - N_TAPS;
  return nl_offset((nltap[NL_TAPS / 4 * i + m / 4] >> (8 * (m % 4))) & 255u);
}
