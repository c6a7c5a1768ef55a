// The trainable encodings of mlp-t (ENC 3 hashgrid, ENC 4 permuto): the cell or simplex around
// a position at one level, as T_CORNERS table entries and their interpolation weights. The
// forward interpolates the table with them, the backward scatters the gradient through the
// same weights. Maths: modules/mlp-t/README.md, "Table encodings". The module sets the
// level data as defines; these defaults only serve `vkgraph shaders --check`.
#ifndef MLP_ENCODING_GLSL
#define MLP_ENCODING_GLSL

#ifndef T_LEVELS
#define T_LEVELS 2
#define T_FEAT 2
#define T_LOG2 8
#define T_OFF int[](0, 256)
#define T_RES int[](8, 32)
#define T_DENSE int[](1, 0)
#define T_SCALE float[](8.0, 32.0)
#endif
#ifndef T_SHIFT
#if DIMS == 3
#define T_SHIFT float[](0.414213568, 0.732050836, 0.236067966, 0.828427136, 0.464101672, 0.472135931)
#else
#define T_SHIFT float[](0.414213568, 0.732050836, 0.828427136, 0.464101672)
#endif
#endif

#define T_SIZE (1u << uint(T_LOG2))
#if ENC == 3
#define T_CORNERS (1 << DIMS)  // the corners of a grid cell
#else
#define T_CORNERS (DIMS + 1)   // the vertices of a simplex of the permutohedral lattice
#endif

const int t_off[T_LEVELS] = T_OFF;  // first entry of each level

// instant-NGP's spatial hash of grid point (or lattice key) k, modulo the table size
uint t_hash(ivec3 k) {
  return (uint(k.x) ^ (uint(k.y) * 2654435761u) ^ (uint(k.z) * 805459861u)) & (T_SIZE - 1u);
}

#if ENC == 3
const int t_res[T_LEVELS] = T_RES;      // cells per unit
const int t_dense[T_LEVELS] = T_DENSE;  // 1: the level's grid fits the table

// entries (level offset included) and weights of the grid cell around x in [0,1]^DIMS:
// p = N x, i = min(floor(p), N - 1), a = p - i; corner k = i + (bit d of k)_d has weight
// prod_d (bit d ? a_d : 1 - a_d) and entry i_x + (N+1) i_y + (N+1)^2 i_z (dense) or the hash
void t_cell(int l, POS x, out uint idx[T_CORNERS], out float wt[T_CORNERS]) {
  float n = float(t_res[l]);
  POS p = x * n;
  POS i0 = min(floor(p), POS(n - 1.0));
  POS a = p - i0;
  ivec3 i = ivec3(0);
  for (int d = 0; d < DIMS; d++) i[d] = int(i0[d]);
  uint side = uint(t_res[l] + 1);
  for (int k = 0; k < T_CORNERS; k++) {
    ivec3 c = i;
    float w = 1.0;
    for (int d = 0; d < DIMS; d++) {
      bool up = ((k >> d) & 1) != 0;
      c[d] += up ? 1 : 0;
      w *= up ? a[d] : 1.0 - a[d];
    }
    uint e = t_dense[l] != 0 ? uint(c.x) + side * (uint(c.y) + side * uint(c.z)) : t_hash(c);
    idx[k] = uint(t_off[l]) + e;
    wt[k] = w;
  }
}
#else
const float t_scale[T_LEVELS] = T_SCALE;            // positions scaled per level
const float t_shift[T_LEVELS * DIMS] = T_SHIFT;     // and shifted (lattice units)

// entries and barycentric weights of the simplex of the permutohedral lattice A*_d (d = DIMS)
// that holds the elevated position y = E (s_l x + shift_l) (Adams et al. 2010's splat):
// rem0 = the nearest remainder-0 point, rank = the order of y - rem0, made consistent so
// that rem0 sums to 0; vertex r has key rem0_i + r - (d+1) [rank_i > d - r], hashed.
void t_cell(int l, POS x, out uint idx[T_CORNERS], out float wt[T_CORNERS]) {
  const int d = DIMS, d1 = DIMS + 1;
  float y[DIMS + 1], rem0[DIMS + 1];
  int rank[DIMS + 1];
  // elevate: column j of E is c_j (1 (j+1 times), -(j+1), 0, ...), c_j = sqrt(d (d+1) /
  // ((j+1)(j+2))): orthogonal columns, a unit step in p is one lattice edge
  float s = 0.0;
  for (int i = d; i >= 0; i--) {
    float e = 0.0;
    if (i > 0) {
      float p = x[i - 1] * t_scale[l] + t_shift[l * DIMS + i - 1];
      e = sqrt(float(d * d1) / float(i * (i + 1))) * p;
    }
    y[i] = s - float(i) * e;
    s += e;
  }
  int sum = 0;
  for (int i = 0; i <= d; i++) {
    float v = floor(y[i] / float(d1) + 0.5);
    rem0[i] = v * float(d1);
    sum += int(v);
    rank[i] = 0;
  }
  for (int i = 0; i < d; i++)
    for (int j = i + 1; j <= d; j++) {
      if (y[i] - rem0[i] < y[j] - rem0[j]) rank[i]++;
      else rank[j]++;
    }
  for (int i = 0; i <= d; i++) {
    rank[i] += sum;
    if (rank[i] < 0) { rank[i] += d1; rem0[i] += float(d1); }
    else if (rank[i] > d) { rank[i] -= d1; rem0[i] -= float(d1); }
  }
  float b[DIMS + 2];
  for (int i = 0; i <= d + 1; i++) b[i] = 0.0;
  for (int i = 0; i <= d; i++) {
    float v = (y[i] - rem0[i]) / float(d1);
    b[d - rank[i]] += v;
    b[d1 - rank[i]] -= v;
  }
  b[0] += 1.0 + b[d1];
  for (int r = 0; r <= d; r++) {
    ivec3 key = ivec3(0);
    for (int i = 0; i < d; i++) key[i] = int(rem0[i]) + r - (rank[i] > d - r ? d1 : 0);
    idx[r] = uint(t_off[l]) + t_hash(key);
    wt[r] = b[r];
  }
}
#endif

#ifdef PRECISE
#define T_ACC double
#else
#define T_ACC float
#endif

// feature f interpolated over a cell's corners (idx, wt) (ENC_TABLE(i) reads table float i,
// entry e's features at e F .. e F + F - 1)
T_ACC t_interp(uint idx[T_CORNERS], float wt[T_CORNERS], int f) {
  T_ACC h = T_ACC(0.0);
  for (int k = 0; k < T_CORNERS; k++)
    h += T_ACC(wt[k]) * T_ACC(ENC_TABLE(idx[k] * uint(T_FEAT) + uint(f)));
  return h;
}

// encoded input c = l F + f: feature f of level l, interpolated
T_ACC t_encode(POS x, int c) {
  uint idx[T_CORNERS];
  float wt[T_CORNERS];
  t_cell(c / T_FEAT, x, idx, wt);
  return t_interp(idx, wt, c % T_FEAT);
}

// dE/dT_e += w_k g for the corners (idx, wt) of a cell, feature f: 64-bit fixed point (T_FIX)
// integer atomics into the kernel's buffer acc, so the sum does not depend on the order; a
// non-finite g counts in acc[TABLE] instead (the training kernels train and train_cm)
#define T_SCATTER(acc, idx, wt, f, g)                                                   \
  if (isnan(g) || isinf(g)) {                                                           \
    atomicAdd(acc[TABLE], int64_t(1));                                                  \
  } else {                                                                              \
    for (int k_ = 0; k_ < T_CORNERS; k_++) {                                            \
      float q_ = clamp(floor((wt)[k_] * (g) * T_FIX + 0.5), -4.0e18, 4.0e18);          \
      if (q_ != 0.0) atomicAdd(acc[(idx)[k_] * uint(T_FEAT) + uint(f)], int64_t(q_));   \
    }                                                                                   \
  }

#endif
