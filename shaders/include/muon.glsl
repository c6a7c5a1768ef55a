// Muon's 2-D weight matrices inside a trainer's param vector (pipeline/trainer.py: Weights.
// matrices, pipeline/optim.py: Matrix), shared by the Newton-Schulz kernel
// (shaders/trainer/muon.comp) and the element step (adam.glsl with ADAM_MUON). The includer
// defines MUON_COUNT (matrices), MUON_STRIDE (params between a matrix's rows) and MUON_MATS,
// the table: per matrix its first param, rows, cols and net (gn's pair that clips it).
#ifndef MUON_GLSL
#define MUON_GLSL

#ifndef MUON_COUNT  // defaults for `vkgraph shaders --check` only: one 64 x 64 matrix
#define MUON_COUNT 1
#define MUON_STRIDE 64
#define MUON_MATS 0, 64, 64, 0
#endif

const int MUON_TABLE[4 * MUON_COUNT] = int[](MUON_MATS);

int muon_offset(int k) { return MUON_TABLE[4 * k]; }
int muon_rows(int k) { return MUON_TABLE[4 * k + 1]; }
int muon_cols(int k) { return MUON_TABLE[4 * k + 2]; }
int muon_net(int k) { return MUON_TABLE[4 * k + 3]; }

// the matrix whose block holds param i, or -1 (Muon's params outside every block take AdamW)
int muon_matrix(uint i) {
  for (int k = 0; k < MUON_COUNT; k++) {
    int d = int(i) - muon_offset(k);
    if (d >= 0 && d < muon_rows(k) * MUON_STRIDE && d % MUON_STRIDE < muon_cols(k)) return k;
  }
  return -1;
}

#endif
