#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"
// Weights and gradients as a 512 x 256 image; block b = x div 64 is weight matrix b (b < 7,
// block 7 stays black), c = x mod 64 the input neuron (column), r the output neuron (row):
//   rows   0..63   w[4096 b + 64 r + c]              (r = y)
//   rows  64..127  dw[4096 b + 64 r + c]             (r = y - 64; this frame's gradient,
//                                                    computed at the weights above)
// value v shown relative to the RMS of all used weights (resp. gradients), s = v / (4 RMS):
//   v == 0 cyan (0, 1, 1);  v < 0 red (min(-s, 1), 0, 0);  v > 0 green (0, min(s, 1), 0)
//   rows 128..255  per-matrix bars from the bottom row up, 128 px = full height:
//     columns  8..27 weight RMS of matrix b, linear, full height at 0.5 (green); a grey
//                    tick in columns 4..31 marks the RMS of the Xavier init, sqrt(6/128)/sqrt(3)
//     columns 36..55 gradient RMS of matrix b on a log scale over 4 decades below the
//                    largest matrix's gradient RMS (red): 1 + log10(rms_b / max_b rms) / 4
// RMS over used weights (matrix 6: rows 0..15), sums of squares from vstat.comp.
SSBO_IN(0, float, w)
SSBO_IN(1, float, dw)
SSBO_IN(2, float, stats)
IMG_OUT(3, vis)

const vec3 ZERO = vec3(0.0, 1.0, 1.0);
const vec3 BARW = vec3(0.2, 0.8, 0.2);
const vec3 BARG = vec3(0.9, 0.2, 0.2);
const vec3 TICK = vec3(0.5);
const vec3 BACK = vec3(0.05);

vec3 signed_colour(float v, float rms) {
  if (v == 0.0) return ZERO;
  float s = v / (4.0 * max(rms, 1e-30));
  return s < 0.0 ? vec3(min(-s, 1.0), 0.0, 0.0) : vec3(0.0, min(s, 1.0), 0.0);
}

float used(int b) { return b == 6 ? 1024.0 : 4096.0; }

void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (!inside(3, p)) return;
  int b = p.x / 64, c = p.x % 64;
  vec3 col = vec3(0.0);
  if (b < 7) {
    if (p.y < 128) {
      float sw = 0.0, sg = 0.0;
      for (int l = 0; l < 7; l++) {
        sw += stats[l];
        sg += stats[8 + l];
      }
      int r = p.y % 64;
      int i = 4096 * b + 64 * r + c;
      if (p.y < 64) col = signed_colour(w[i], sqrt(sw / 25600.0));
      else col = signed_colour(dw[i], sqrt(sg / 25600.0));
    } else {
      col = BACK;
      float h = float(255 - p.y) + 0.5;  // height of the pixel centre above the bottom
      float rw = sqrt(stats[b] / used(b));
      float gmax = 0.0;
      for (int l = 0; l < 7; l++) gmax = max(gmax, sqrt(stats[8 + l] / used(l)));
      float rg = sqrt(stats[8 + b] / used(b));
      float fw = clamp(rw / 0.5, 0.0, 1.0);
      float fg = gmax > 0.0 && rg > 0.0 ? clamp(1.0 + log(rg / gmax) / log(10.0) / 4.0, 0.0, 1.0)
                                        : 0.0;
      if (c >= 4 && c < 32 && 255 - p.y == int(round(128.0 * 0.125 / 0.5))) col = TICK;
      if (c >= 8 && c < 28 && h < 128.0 * fw) col = BARW;
      if (c >= 36 && c < 56 && h < 128.0 * fg) col = BARG;
    }
  }
  vis[p.x + p.y * node.roi[3].x] = vec4(col, 1.0);
}
