"""numpy reference of cnngenin, vkdt's generator of training pairs (README.md here).

xorshift numbers are drawn in exact uint32 arithmetic, so tile offsets, flips and per-pixel
seeds agree exactly with the shader's; the float maths runs in float64 and is rounded to half
like the shader's outputs. `reference` gives one frame's (imgo, refo, noiseab) from an image
pair, `set_reference` one tile's from a training set (the kernel's SET variant, with zoom and
colour); tests/test_cnngenin.py checks the kernel against them.
"""

from __future__ import annotations

import numpy as np

TILE = 64  # the crop size with tiles on
F32 = np.float32


def xorshift(s: np.ndarray) -> np.ndarray:
    s = s ^ (s << np.uint32(13))
    s = s ^ (s >> np.uint32(17))
    return s ^ (s << np.uint32(5))


def mrand(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """vkdt's mrand on uint32 arrays: (new state, uniform float32 in [0, 1))."""
    s = xorshift(s)
    return s, (s >> np.uint32(8)).astype(F32) * F32(2.0**-24)


def warp_gaussian(u0: np.ndarray, u1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r = np.sqrt(-2.0 * np.log(1.0 - u0.astype(np.float64)))
    phi = (F32(2.0 * F32(np.pi)) * u1).astype(np.float64)  # the device rounds 2 pi u to f32
    return r * np.cos(phi), r * np.sin(phi)


def mirror(i: np.ndarray, n: int) -> np.ndarray:
    i = np.mod(i, 2 * n)
    return np.where(i < n, i, 2 * n - 1 - i)


def to_half(x: np.ndarray) -> np.ndarray:
    return np.clip(x, -65504, 65504).astype(np.float16).astype(np.float64)


def hash32(x: int) -> int:
    """rng.glsl's hash32 on a Python int (uint32 arithmetic)."""
    m = 0xFFFFFFFF
    x ^= x >> 16
    x = (x * 0x21F0AAAD) & m
    x ^= x >> 15
    x = (x * 0x735A2D97) & m
    return x ^ (x >> 15)


def tile_state(frame: int, seed: int, t: int = 0) -> np.ndarray:
    """Tile t's state at the frame's start (a uint32 array of one): vkdt's frame state for
    tile 0, hash32(s ^ hash32(t)) | 1 of it for the others."""
    s0 = (123456789 + 133700 * frame + seed) & 0xFFFFFFFF
    return np.array([s0 if t == 0 else hash32(s0 ^ hash32(t)) | 1], np.uint32)


def frame_numbers(generate: int, tiles: int, frame: int, seed: int, wd: int, ht: int,
                  t: int = 0, noise: float = 1.0, nlog: int = 0, amax: float = 0.0,
                  bmax: float = 0.0):
    """Per-frame draws of tile t: (ev, flip, (offx, offy), noise a, noise b, state after
    them, camera). noise, nlog, amax, bmax: the module's params (README.md, step 2)."""
    s = tile_state(frame, seed, t)
    ev, flip, off = F32(0), 0, (0, 0)
    if tiles and generate:
        s, u = mrand(s)
        ev = F32(-2) + F32(4) * u[0]
        s, u = mrand(s)
        flip = int(F32(4) * u[0])
        s, ux = mrand(s)
        s, uy = mrand(s)
        off = (int(F32(wd) * ux[0]), int(F32(ht) * uy[0]))
    return (ev, flip, off) + noise_numbers(s, generate, noise, nlog, amax, bmax)


def noise_numbers(s, generate: int, noise: float = 1.0, nlog: int = 0, amax: float = 0.0,
                  bmax: float = 0.0):
    """The draws after the tile's (state s, a uint32 array of one): (noise a, noise b, state
    after them, camera) (README.md, step 2)."""
    a = b = F32(0)
    camera = False
    if generate in (2, 4, 5, 6):
        s, ua = mrand(s)
        s, ub = mrand(s)
        if nlog:  # log-uniform over the three decades below the maximum
            ua, ub = (np.power(F32(10), F32(-3) * u, dtype=F32) for u in (ua, ub))
        amax = F32(amax) if amax > 0 else F32(noise) * F32(65535000)
        bmax = F32(bmax) if bmax > 0 else F32(noise) * F32(1000)
        a, b = F32(amax * ua[0]), F32(bmax * ub[0])
    if generate in (5, 6):  # half the tiles: the noise on the mosaic, demosaiced
        s, u = mrand(s)
        camera = bool(u[0] < F32(0.5))
    return a, b, s[0], camera


QUALITY_SALT = 0x4A504547  # "JPEG"
ERR_SALT = 0x4E455252  # "NERR"
CLEAN_SALT = 0x434C4E21  # "CLN!"
DEMOSAIC_SALT = 0x4D484321  # "MHC!"
ZOOM_SALT = 0x5A4F4F4D  # "ZOOM"
COLOUR_SALT = 0x434F4C52  # "COLR"
PHASE_SALT = 0x58545253  # "XTRS"
# Fujifilm's X-Trans colours (0 r, 1 g, 2 b), row by row (vkgraph/apps/dng.py's XTRANS)
XTRANS = np.array([[1, 1, 0, 1, 1, 2], [1, 1, 2, 1, 1, 0], [2, 0, 1, 0, 2, 1],
                   [1, 1, 2, 1, 1, 0], [1, 1, 0, 1, 1, 2], [0, 2, 1, 2, 0, 1]])
# colour: the six orders of the channels, the draw's index into them
PERMS = ((0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0))


def salted_state(s, salt: int) -> np.ndarray:
    """hash32(s ^ salt) | 1 (a uint32 array of one): a tile's state of its own for one kind
    of extra draw, beside the state s, which stays as it is for every other number. Hashed,
    since xorshift is linear: the draws of s ^ salt itself would mirror s's own next draws
    (and each other salt's)."""
    return np.array([hash32(int(s) ^ salt) | 1], np.uint32)


def salted(s, salt: int) -> np.float32:
    """The first mrand of salted_state(s, salt): a tile's draw of its own beside the state s
    (after the camera draw)."""
    _, u = mrand(salted_state(s, salt))
    return u[0]


def is_clean(s, clean: float) -> bool:
    """clean > 0: whether the tile gets no noise, u drawn by mrand from
    salted_state(s, CLEAN_SALT) (s the state after the camera draw) below clean; noiseab still
    reports the drawn (a, b)."""
    if clean <= 0:
        return False
    return bool(salted(s, CLEAN_SALT) < F32(clean))


def misreport(a, b, s, nerr: float) -> tuple:
    """nerr > 0: (a, b) each times exp(nerr (2u - 1)), the two u drawn by mrand from
    salted_state(s, ERR_SALT) (s the state after the camera draw); what noiseab reports, the
    noise itself stays (a, b)."""
    if nerr <= 0:
        return a, b
    se = salted_state(s, ERR_SALT)
    out = []
    for v in (a, b):
        se, u = mrand(se)
        out.append(F32(v * np.exp(F32(nerr) * (F32(2) * u[0] - F32(1)), dtype=F32)))
    return tuple(out)


def uses_mhc(s, demosaic: int) -> bool:
    """Whether a camera tile is demosaiced by Malvar-He-Cutler (else bilinearly): demosaic 1
    always, 2 where u < 0.5, u drawn by mrand from salted_state(s, DEMOSAIC_SALT) (s the
    state after the camera draw)."""
    if demosaic != 2:
        return demosaic == 1
    return bool(salted(s, DEMOSAIC_SALT) < F32(0.5))


def draw_quality(s, qlo: int = 70, qhi: int = 95) -> int:
    """generate 6: the tile's JPEG quality, uniform in qlo..qhi, drawn by mrand from
    s ^ QUALITY_SALT itself (s the state after the camera draw, which stays generate 5's):
    not hashed, as the shipped JPEG recipes were trained on these draws (the kernel's
    draw_quality says why that is harmless)."""
    n = qhi - qlo
    _, u = mrand(np.array([int(s) ^ QUALITY_SALT], np.uint32))
    return qlo + min(int(F32(n + 1) * u[0]), n)


def cfa(wd: int, ht: int) -> np.ndarray:
    """(ht, wd) colour index of the RGGB mosaic on output coordinates: x+y odd -> g (1), else
    y odd -> b (2), else r (0)."""
    X, Y = np.meshgrid(np.arange(wd), np.arange(ht))
    return np.where((X + Y) % 2 == 1, 1, np.where(Y % 2 == 1, 2, 0))


def xtrans_phase(s) -> tuple[int, int]:
    """pattern 1 with tiles: a tile's X-Trans phase (x0, y0), each uniform in 0..5, the first
    two mrand of salted_state(s, PHASE_SALT) (s the state after the camera draw); without
    tiles the phase is (0, 0)."""
    sx, ux = mrand(salted_state(s, PHASE_SALT))
    _, uy = mrand(sx)
    return min(int(F32(6) * ux[0]), 5), min(int(F32(6) * uy[0]), 5)


def xtrans(wd: int, ht: int, phase: tuple[int, int] = (0, 0)) -> np.ndarray:
    """(ht, wd) colour index of the X-Trans mosaic of a tile at `phase` (x0, y0): pixel (x, y)
    has XTRANS[(y + y0) % 6][(x + x0) % 6]."""
    x0, y0 = phase
    return XTRANS[(np.arange(ht)[:, None] + y0) % 6, (np.arange(wd)[None, :] + x0) % 6]


def demosaic_bilinear(mosaic: np.ndarray) -> np.ndarray:
    """(ht, wd, 3) bilinear demosaic of an RGGB mosaic (ht, wd), mirrored borders: a pixel's own
    colour is its photosite, each other colour the (1 2 1)^2 weighted mean of the 3x3
    photosites of that colour."""
    ht, wd = mosaic.shape
    ch = cfa(wd, ht)
    pm = np.pad(mosaic, 1, mode="symmetric")
    pc = np.pad(ch, 1, mode="symmetric")
    out = np.zeros((ht, wd, 3))
    wsum = np.zeros((ht, wd, 3))
    for dy in (-1, 0, 1):
        for dx in (-1, 0, 1):
            w = (2 - abs(dx)) * (2 - abs(dy))
            v = pm[1 + dy:1 + dy + ht, 1 + dx:1 + dx + wd]
            c = pc[1 + dy:1 + dy + ht, 1 + dx:1 + dx + wd]
            for k in range(3):
                out[..., k] += np.where(c == k, w * v, 0.0)
                wsum[..., k] += np.where(c == k, w, 0.0)
    out /= np.maximum(wsum, 1.0)
    np.put_along_axis(out, ch[..., None], mosaic[..., None], -1)
    return out


def demosaiced(rgb: np.ndarray, mhc: bool) -> np.ndarray:
    """The (ht, wd, 3) demosaic of rgb's RGGB mosaic (each photosite its own colour of rgb):
    Malvar-He-Cutler (the demosaic module's reference) or bilinear."""
    sites = np.take_along_axis(rgb, cfa(rgb.shape[1], rgb.shape[0])[..., None], -1)[..., 0]
    if mhc:
        from ..demosaic.reference import bayer

        return bayer(sites, [[0, 1], [1, 2]])  # RGGB
    return demosaic_bilinear(sites)


def colour_transform(s) -> tuple[np.float32, tuple, np.ndarray]:
    """colour: a set tile's draws from salted_state(s, COLOUR_SALT) (s the state after its
    crop): (u, the channel order, the gains). The tile is transformed where u < colour:
    output channel c is gains[c] times input channel order[c], the gains 2^(u_c - 1/2) over
    their geometric mean."""
    sc = salted_state(s, COLOUR_SALT)
    sc, u0 = mrand(sc)
    sc, up = mrand(sc)
    u = []
    for _ in range(3):
        sc, v = mrand(sc)
        u.append(float(v[0]))
    u = np.array(u)
    return u0[0], PERMS[min(int(F32(6) * up[0]), 5)], 2.0 ** (u - u.mean())


def set_numbers(generate: int, frame: int, seed: int, sizes: list, tile: int = TILE, t: int = 0,
                zoom: int = 1):
    """A set tile's draws (the SET variant, README.md "Batches and training sets"): (ev, flip
    in 0..7, image k, zoom z, (offx, offy), state after the crop). sizes: (wd, ht) per
    image."""
    s = tile_state(frame, seed, t)
    ev, flip, k, z, off = F32(0), 0, 0, 1, (0, 0)
    if generate:
        s, u = mrand(s)
        ev = F32(-2) + F32(4) * u[0]
        s, u = mrand(s)
        flip = int(F32(8) * u[0])
        s, u = mrand(s)
        k = min(int(F32(len(sizes)) * u[0]), len(sizes) - 1)
        if zoom > 1:
            z = 1 + min(int(F32(zoom) * salted(s[0], ZOOM_SALT)), zoom - 1)
        s, ux = mrand(s)
        s, uy = mrand(s)
        wd, ht = sizes[k]
        off = (int(F32(max(wd - z * tile + 1, 1)) * ux[0]),
               int(F32(max(ht - z * tile + 1, 1)) * uy[0]))
    return ev, flip, k, z, off, s


def set_reference(imgs, refs, generate, frame, seed=0, tile=TILE, t=0, origin=(0, 0),
                  zoom=1, colour=0.0, noise=1.0, nlog=0, amax=0.0, bmax=0.0, **kw):
    """(imgo, refo, noiseab) of tile t of a frame cut from training sets (lists of (ht, wd, 4)
    float32 images, as i-set holds them); zoom: each tile reads its image at 1 / z
    (set_numbers); colour: the share of the tiles that get their colour_transform, input and
    reference alike, before the noise. The other params as `reference`'s."""
    ev, flip, k, z, off, s = set_numbers(generate, frame, seed,
                                         [im.shape[1::-1] for im in imgs], tile, t, zoom)
    recolour = False
    if generate:
        u0, perm, wb = colour_transform(s[0])
        recolour = u0 < F32(colour)
    a, b, s, camera = noise_numbers(s, generate, noise, nlog, amax, bmax)
    X, Y = np.meshgrid(np.arange(tile), np.arange(tile))
    qx, qy = (Y, X) if flip & 4 else (X, Y)
    qx = tile - 1 - qx if flip & 1 else qx
    qy = tile - 1 - qy if flip & 2 else qy
    ht, wd = imgs[k].shape[:2]
    gain = 2.0 ** float(ev)
    out = []
    for src in (imgs[k], refs[k]):
        v = sum(src[mirror(qy * z + off[1] + dy, ht), mirror(qx * z + off[0] + dx, wd)]
                .astype(np.float64) for dy in range(z) for dx in range(z)) / (z * z) * gain
        if recolour:
            v[..., :3] = v[..., list(perm)] * wb
        out.append(v)
    return finish(*out, generate, 1, a, b, s, camera, tile, origin, **kw)


def reference(img, ref, generate, tiles, frame, seed=0, qlo=70, qhi=95, tile=TILE,
              t=0, origin=(0, 0), noise=1.0, nlog=0, amax=0.0, bmax=0.0, nerr=0.0,
              clean=0.0, demosaic=0, camref=0, pattern=0):
    """(imgo, refo, noiseab) of one frame; img/ref (ht, wd, 4) float32. With tiles, tile t
    of `tile` pixels at `origin` in the output (its pixels' noise states and mosaic use
    output coordinates). noise, nlog, amax, bmax: the noise params (frame_numbers); nerr:
    noiseab's misreport (misreport); clean: the share of noise-free tiles (is_clean);
    demosaic: the camera tiles' demosaicer (uses_mhc); camref 1: a camera tile's reference is
    the clean mosaic through that demosaicer; pattern 1: generate 3 and 4's mosaic is X-Trans
    (xtrans_phase), its colours in alpha."""
    ht, wd = img.shape[:2]
    ow, oh = (tile, tile) if tiles else (wd, ht)
    ev, flip, off, a, b, s, camera = frame_numbers(generate, tiles, frame, seed, wd, ht, t,
                                                   noise, nlog, amax, bmax)
    x, y = np.arange(ow), np.arange(oh)
    qx = (ow - 1 - x if flip & 1 else x) + off[0]
    qy = (oh - 1 - y if flip & 2 else y) + off[1]
    iy, ix = np.ix_(mirror(qy, ht), mirror(qx, wd))
    gain = 2.0 ** float(ev)
    im = img[iy, ix].astype(np.float64) * gain
    rf = ref[iy, ix].astype(np.float64) * gain
    return finish(im, rf, generate, tiles, a, b, s, camera, tile, origin, qlo, qhi, nerr,
                  clean, demosaic, camref, pattern)


def finish(im, rf, generate, tiles, a, b, s, camera, tile=TILE, origin=(0, 0), qlo=70,
           qhi=95, nerr=0.0, clean=0.0, demosaic=0, camref=0, pattern=0):
    """The steps after the read (README.md, steps 4-7) on a tile's exposed input and
    reference (oh, ow, 4) float64, from its draws (a, b, state s after the camera draw,
    camera): (imgo, refo, noiseab)."""
    oh, ow = im.shape[:2]
    x, y = np.arange(ow), np.arange(oh)
    if generate in (2, 4, 5, 6):
        X, Y = np.meshgrid((x + origin[0]).astype(np.uint32),
                           (y + origin[1]).astype(np.uint32))
        sp = np.uint32(s) + np.uint32(7654) * X + np.uint32(1357900) * Y
        sp = (xorshift(sp) >> np.uint32(8)) << np.uint32(5)
        u = []
        for _ in range(4):
            sp, v = mrand(sp)
            u.append(v)
        z0, z1 = warp_gaussian(u[0], u[1])
        z2, _ = warp_gaussian(u[2], u[3])
        z = np.stack([z0, z1, z2], -1)
        quiet = is_clean(s, clean)  # no noise, the drawn level reported all the same
        var = 0.0 if quiet else float(a) + 65535.0 * np.maximum(rf[..., :3], 0) * float(b)
        im[..., :3] = rf[..., :3] + z * np.sqrt(var) / 65535.0
        if camera:
            mhc = uses_mhc(s, demosaic)
            im[..., :3] = demosaiced(im[..., :3], mhc)
            if camref:
                rf[..., :3] = demosaiced(rf[..., :3], mhc)
        if generate == 6:
            im[..., :3] = camera_pipeline(im[..., :3], draw_quality(s, qlo, qhi))
            rf[..., :3] = np.clip(rf[..., :3], 0, 1)
    im[..., 3] = 1
    if generate in (3, 4):
        phase = xtrans_phase(s) if tiles else (0, 0)  # a whole image keeps the phase
        colours = xtrans(ow, oh, phase) if pattern == 1 else cfa(ow, oh)
        im[..., :3] = np.take_along_axis(im[..., :3], colours[..., None], -1)
        if pattern == 1:
            im[..., 3] = colours
    rf[..., 3] = 1
    a, b = misreport(a, b, s, nerr)
    nab = np.array([a, b, tile if tiles else 0, 1], F32)  # (a, b, tile size, tile columns)
    return to_half(im), to_half(rf), nab


# -- generate 6: the camera pipeline's sRGB, 8 bits and JPEG round trip ----------------------
# libjpeg's (and libjpeg-turbo's) integer arithmetic, as Pillow encodes and decodes with its
# defaults: jccolor.c / jdcolor.c colour conversion, jcsample.c h2v2 box downsampling,
# jfdctint.c / jidctint.c ("islow") DCTs, jcdctmgr.c rounding quantisation, jdsample.c h2v2
# "fancy" (triangle) upsampling. All integer, so the kernel agrees exactly on equal bytes.

# ITU-T T.81 Annex K.1 / K.2 example tables (natural order), scaled by quality as IJG does
IJG_LUMA = np.array([
    16, 11, 10, 16, 24, 40, 51, 61, 12, 12, 14, 19, 26, 58, 60, 55,
    14, 13, 16, 24, 40, 57, 69, 56, 14, 17, 22, 29, 51, 87, 80, 62,
    18, 22, 37, 56, 68, 109, 103, 77, 24, 35, 55, 64, 81, 104, 113, 92,
    49, 64, 78, 87, 103, 121, 120, 101, 72, 92, 95, 98, 112, 100, 103, 99]).reshape(8, 8)
IJG_CHROMA = np.full((8, 8), 99)
IJG_CHROMA[:4, :4] = [[17, 18, 24, 47], [18, 21, 26, 66], [24, 26, 56, 99], [47, 66, 99, 99]]

MCU = 16  # 4:2:0: a 16x16 luma area holds four 8x8 luma blocks and one block of each chroma
SCALE = 16  # jccolor.c / jdcolor.c fixed point
CONST_BITS, PASS1_BITS = 13, 2  # jfdctint.c / jidctint.c


def fix(x: float, bits: int) -> int:
    """libjpeg's FIX: x in fixed point of `bits` fraction bits, rounded."""
    return int(x * (1 << bits) + 0.5)


def quant_table(base: np.ndarray, quality: int) -> np.ndarray:
    """jcparam.c: the table scaled by 5000/q below quality 50, by 200 - 2q from 50, each
    entry (t s + 50) div 100 clamped to 1..255 (baseline)."""
    scale = 5000 // quality if quality < 50 else 200 - 2 * quality
    return np.clip((base * scale + 50) // 100, 1, 255)


def srgb8(x: np.ndarray) -> np.ndarray:
    """Linear -> 8-bit sRGB code (int64), clamped to [0, 1], rounded to nearest (ties to
    even), the curve of pipeline/formats.py (what camera.py writes its JPEGs with)."""
    x = np.clip(x, 0.0, 1.0)
    s = np.where(x <= 0.0031308, 12.92 * x, 1.055 * x ** (1 / 2.4) - 0.055)
    return np.rint(s * 255).astype(np.int64)


def srgb_decode8(c: np.ndarray) -> np.ndarray:
    """8-bit sRGB code -> linear (float64), as read_image decodes a JPEG's bytes."""
    x = c / 255.0
    return np.where(x <= 0.04045, x / 12.92, ((x + 0.055) / 1.055) ** 2.4)


def rgb_to_ycc(rgb: np.ndarray) -> np.ndarray:
    """jccolor.c rgb_ycc_convert on 8-bit codes (..., 3) -> (..., 3) Y, Cb, Cr codes."""
    r, g, b = (rgb[..., k] for k in range(3))
    half, centre = 1 << (SCALE - 1), 128 << SCALE
    y = fix(0.299, SCALE) * r + fix(0.587, SCALE) * g + fix(0.114, SCALE) * b + half
    cb = (-fix(0.16874, SCALE) * r - fix(0.33126, SCALE) * g + fix(0.5, SCALE) * b
          + centre + half - 1)
    cr = (fix(0.5, SCALE) * r - fix(0.41869, SCALE) * g - fix(0.08131, SCALE) * b
          + centre + half - 1)
    return np.stack([y, cb, cr], -1) >> SCALE


def ycc_to_rgb(ycc: np.ndarray) -> np.ndarray:
    """jdcolor.c ycc_rgb_convert: Y, Cb, Cr codes (..., 3) -> 8-bit rgb codes, clamped."""
    y, cb, cr = ycc[..., 0], ycc[..., 1] - 128, ycc[..., 2] - 128
    half = 1 << (SCALE - 1)
    r = y + ((fix(1.402, SCALE) * cr + half) >> SCALE)
    g = y + ((-fix(0.34414, SCALE) * cb + half - fix(0.71414, SCALE) * cr) >> SCALE)
    b = y + ((fix(1.772, SCALE) * cb + half) >> SCALE)
    return np.clip(np.stack([r, g, b], -1), 0, 255)


def downsample_h2v2(plane: np.ndarray) -> np.ndarray:
    """jcsample.c h2v2_downsample: each 2x2 sum plus a bias alternating 1, 2, 1, ... along
    the output row, shifted right by 2 (plane (2h, 2w) -> (h, w))."""
    s = plane[0::2, 0::2] + plane[0::2, 1::2] + plane[1::2, 0::2] + plane[1::2, 1::2]
    bias = 1 + (np.arange(s.shape[1]) & 1)
    return (s + bias) >> 2


def upsample_h2v2_fancy(plane: np.ndarray, wd: int, ht: int) -> np.ndarray:
    """jdsample.c h2v2_fancy_upsample of a (ceil(ht/2), ceil(wd/2)) chroma plane to (ht, wd):
    the triangle filter, 3/4 of the nearest sample and 1/4 of the next in each direction
    (weights 9, 3, 3, 1 of 16), rounding +8 on even output columns and +7 on odd ones; rows
    and columns beyond the plane repeat its edge."""
    h, w = plane.shape
    i = np.arange(ht) >> 1
    other = np.clip(np.where(np.arange(ht) & 1, i + 1, i - 1), 0, h - 1)
    colsum = 3 * plane[i] + plane[other]  # (ht, w)
    j = np.arange(wd) >> 1
    odd = np.arange(wd) & 1
    nxt = np.clip(np.where(odd, j + 1, j - 1), 0, w - 1)
    return (3 * colsum[:, j] + colsum[:, nxt] + 8 - odd) >> 4


def _butterfly(d: list) -> tuple:
    """The even/odd split shared by the forward DCT's passes."""
    t0, t7 = d[0] + d[7], d[0] - d[7]
    t1, t6 = d[1] + d[6], d[1] - d[6]
    t2, t5 = d[2] + d[5], d[2] - d[5]
    t3, t4 = d[3] + d[4], d[3] - d[4]
    return t0 + t3, t1 + t2, t1 - t2, t0 - t3, (t4, t5, t6, t7)


def _rotate_odd(t4, t5, t6, t7) -> tuple:
    """jfdctint.c / jidctint.c odd part (Loeffler): the four odd outputs, unscaled."""
    z1, z2, z3, z4 = t4 + t7, t5 + t6, t4 + t6, t5 + t7
    z5 = (z3 + z4) * 9633  # FIX(1.175875602)
    t4, t5, t6, t7 = t4 * 2446, t5 * 16819, t6 * 25172, t7 * 12299
    z1, z2 = z1 * -7373, z2 * -20995
    z3, z4 = z3 * -16069 + z5, z4 * -3196 + z5
    return t4 + z1 + z3, t5 + z2 + z4, t6 + z2 + z3, t7 + z1 + z4


def descale(x, n: int):
    return (x + (1 << (n - 1))) >> n


def _fdct_pass(d: list, first: bool) -> list:
    """One jfdctint.c pass over 8 values (arrays): the first on rows (outputs scaled up by
    2^PASS1_BITS), the second on columns (scaled back, leaving the DCT times 8)."""
    t10, t11, t12, t13, odd = _butterfly(d)
    out = [None] * 8
    if first:
        out[0], out[4] = (t10 + t11) << PASS1_BITS, (t10 - t11) << PASS1_BITS
        n = CONST_BITS - PASS1_BITS
    else:
        out[0], out[4] = descale(t10 + t11, PASS1_BITS), descale(t10 - t11, PASS1_BITS)
        n = CONST_BITS + PASS1_BITS
    z1 = (t12 + t13) * 4433  # FIX(0.541196100)
    out[2] = descale(z1 + t13 * 6270, n)  # FIX(0.765366865)
    out[6] = descale(z1 - t12 * 15137, n)  # FIX(1.847759065)
    o7, o5, o3, o1 = _rotate_odd(*odd)
    out[7], out[5], out[3], out[1] = (descale(v, n) for v in (o7, o5, o3, o1))
    return out


def fdct_islow(block: np.ndarray) -> np.ndarray:
    """jfdctint.c jpeg_fdct_islow of centred samples (..., 8, 8) (row, column): the 2-D DCT-II
    times 8, in integers."""
    rows = _fdct_pass([block[..., k] for k in range(8)], True)
    d = np.stack(rows, -1)
    cols = _fdct_pass([d[..., k, :] for k in range(8)], False)
    return np.stack(cols, -2)


def _idct_pass(c: list, n: int) -> list:
    """One jidctint.c pass over 8 dequantised coefficients (arrays), descaled by n bits."""
    z1 = (c[2] + c[6]) * 4433
    t2, t3 = z1 - c[6] * 15137, z1 + c[2] * 6270
    t0, t1 = (c[0] + c[4]) << CONST_BITS, (c[0] - c[4]) << CONST_BITS
    t10, t13, t11, t12 = t0 + t3, t0 - t3, t1 + t2, t1 - t2
    o0, o1, o2, o3 = _rotate_odd(c[7], c[5], c[3], c[1])
    return [descale(v, n) for v in (t10 + o3, t11 + o2, t12 + o1, t13 + o0,
                                     t13 - o0, t12 - o1, t11 - o2, t10 - o3)]


def idct_islow(coef: np.ndarray) -> np.ndarray:
    """jidctint.c jpeg_idct_islow of dequantised coefficients (..., 8, 8): 8-bit samples,
    re-centred on 128 and clamped to 0..255 (libjpeg's range-limit table)."""
    cols = _idct_pass([coef[..., k, :] for k in range(8)], CONST_BITS - PASS1_BITS)
    d = np.stack(cols, -2)
    rows = _idct_pass([d[..., k] for k in range(8)], CONST_BITS + PASS1_BITS + 3)
    return np.clip(np.stack(rows, -1) + 128, 0, 255)


def quantise(coef: np.ndarray, table: np.ndarray) -> np.ndarray:
    """jcdctmgr.c: the DCT (times 8) divided by 8 times the table, rounded half away from 0."""
    q = 8 * table
    return np.sign(coef) * ((np.abs(coef) + (q >> 1)) // q)


def blocks(plane: np.ndarray) -> np.ndarray:
    """(h, w) -> (h/8, w/8, 8, 8) blocks."""
    h, w = plane.shape
    return plane.reshape(h // 8, 8, w // 8, 8).swapaxes(1, 2)


def unblocks(b: np.ndarray) -> np.ndarray:
    n, m = b.shape[:2]
    return b.swapaxes(1, 2).reshape(n * 8, m * 8)


def block_roundtrip(plane: np.ndarray, table: np.ndarray) -> np.ndarray:
    """A plane of 8-bit codes (multiples of 8 in size) through DCT, quantisation,
    dequantisation and inverse DCT."""
    coef = quantise(fdct_islow(blocks(plane) - 128), table)
    return unblocks(idct_islow(coef * table))


def jpeg_roundtrip(rgb: np.ndarray, quality: int) -> np.ndarray:
    """8-bit rgb codes (h, w, 3) -> the codes a baseline 4:2:0 JPEG of `quality` decodes to,
    as libjpeg encodes and decodes with its defaults (islow DCTs, fancy upsampling). The
    image is padded to whole 16x16 MCUs as libjpeg expands its edges: columns by repeating
    the last one before downsampling; rows by repeating the last one to an even count, then,
    after downsampling, the last chroma row (so chroma rows past ceil(h/2) copy that row, not
    a downsampled copy of the image's last row). The padding's blocks are decoded but
    dropped."""
    h, w = rgb.shape[:2]
    ph, pw = -(-h // MCU) * MCU, -(-w // MCU) * MCU
    ch, cw = (h + 1) // 2, (w + 1) // 2
    ycc = rgb_to_ycc(np.pad(rgb, ((0, ph - h), (0, pw - w), (0, 0)), mode="edge"))
    y = block_roundtrip(ycc[..., 0], quant_table(IJG_LUMA, quality))[:h, :w]
    table = quant_table(IJG_CHROMA, quality)
    up = []
    for k in (1, 2):
        sub = downsample_h2v2(ycc[:2 * ch, :, k])  # the rows of the image, even count
        sub = np.pad(sub, ((0, ph // 2 - ch), (0, 0)), mode="edge")
        up.append(upsample_h2v2_fancy(block_roundtrip(sub, table)[:ch, :cw], w, h))
    return ycc_to_rgb(np.stack([y, *up], -1))


def camera_pipeline(rgb: np.ndarray, quality: int) -> np.ndarray:
    """generate 6 after the noise: linear rgb (h, w, 3) clamped to [0, 1], sRGB-encoded to 8
    bits, through a 4:2:0 JPEG of `quality` and decoded back to linear."""
    return srgb_decode8(jpeg_roundtrip(srgb8(rgb), quality))
