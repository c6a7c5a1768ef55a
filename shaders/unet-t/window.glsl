// The staged window of conv3.glsl (conv3_cm.comp, convb3_cm.comp) and convw3_cm.comp: 16
// channels of a block of 32 x WROWS pixels and its border of one (WROWS + 2 rows of 34), zero
// outside the block's tile, as f16 in shared memory, [pixel][channel]. The includer defines
// WROWS and has `lid` (its invocation's index), `ni` and push.wi; the window's channels are
// WIN_CH, channel c at pixel index iq WIN_AT(c, iq): the layer's input (INPUT_AT of
// unet.glsl, its bindings) unless the includer defines them.
#ifndef WIN_CH
#define WIN_CH CIN
#define WIN_AT(c, iq) INPUT_AT(c, iq)
#endif
#define HW 34                  // a window row: the block's 32 pixels and the border
#define HP ((WROWS + 2) * HW)  // the window's pixels
#define NX ((HP * 16 + CM_THREADS - 1) / CM_THREADS)  // the window values a thread stages
shared float16_t sx[HP * 16];

// channels c0 .. c0 + 15 of the window of the block at o (box: its tile) as this thread
// stages them, read from global memory all at once (a loop that stored each value as it
// came would wait for each read): value k is channel c0 + i / HP of window pixel i % HP,
// i = lid + k CM_THREADS
void window_read(ivec2 o, ivec4 box, int c0, out float xv[NX]) {
  [[unroll]] for (int k = 0; k < NX; k++) {
    int i = lid + k * CM_THREADS, c = c0 + i / HP, hp = i % HP;
    ivec2 q = o + ivec2(hp % HW, hp / HW) - 1;
    bool ok = i < HP * 16 && c < WIN_CH && in_box(q, box);
    xv[k] = ok ? WIN_AT(c, q.x + q.y * push.wi) : 0.0;
  }
}

// window_read's values into sx (between barriers)
void window_store(float xv[NX]) {
  [[unroll]] for (int k = 0; k < NX; k++) {
    int i = lid + k * CM_THREADS;
    if (i < HP * 16) sx[(i % HP) * 16 + i / HP] = cm_half(xv[k]);
  }
}

// the first element in sx of the 16 window pixels that tap t (ky * 3 + kx) reads for the
// block's row r, pixels 16 s .. 16 s + 15
int window_at(int r, int s, int t) { return ((r + t / 3) * HW + 16 * s + t % 3) * 16; }
