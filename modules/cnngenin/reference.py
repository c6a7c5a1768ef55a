"""numpy reference of cnngenin, vkdt's generator of training pairs (README.md here).

xorshift numbers are drawn in exact uint32 arithmetic, so tile offsets, flips and per-pixel
seeds agree exactly with the shader's; the float maths runs in float64 and is rounded to half
like the shader's outputs. `reference` gives one frame's (imgo, refo, noiseab);
tests/test_cnngenin.py checks the kernel against it.
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


def frame_numbers(generate: int, tiles: int, frame: int, seed: int, wd: int, ht: int):
    """Per-frame draws: (ev, flip, (offx, offy), noise a, noise b, state after them)."""
    s = np.array([(123456789 + 133700 * frame + seed) & 0xFFFFFFFF], np.uint32)
    ev, flip, off = F32(0), 0, (0, 0)
    if tiles and generate:
        s, u = mrand(s)
        ev = F32(-2) + F32(4) * u[0]
        s, u = mrand(s)
        flip = int(F32(4) * u[0])
        s, ux = mrand(s)
        s, uy = mrand(s)
        off = (int(F32(wd) * ux[0]), int(F32(ht) * uy[0]))
    a = b = F32(0)
    camera = False
    if generate in (2, 4, 5):
        s, u = mrand(s)
        a = F32(65535000) * u[0]
        s, u = mrand(s)
        b = F32(1000) * u[0]
    if generate == 5:  # half the tiles: the noise on the mosaic, demosaiced
        s, u = mrand(s)
        camera = bool(u[0] < F32(0.5))
    return ev, flip, off, a, b, s[0], camera


def cfa(wd: int, ht: int) -> np.ndarray:
    """(ht, wd) colour index of the RGGB mosaic on output coordinates: x+y odd -> g (1), else
    y odd -> b (2), else r (0)."""
    X, Y = np.meshgrid(np.arange(wd), np.arange(ht))
    return np.where((X + Y) % 2 == 1, 1, np.where(Y % 2 == 1, 2, 0))


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


def reference(img, ref, generate, tiles, frame, seed=0):
    """(imgo, refo, noiseab) of one frame; img/ref (ht, wd, 4) float32."""
    ht, wd = img.shape[:2]
    ow, oh = (TILE, TILE) if tiles else (wd, ht)
    ev, flip, off, a, b, s, camera = frame_numbers(generate, tiles, frame, seed, wd, ht)
    x, y = np.arange(ow), np.arange(oh)
    qx = (ow - 1 - x if flip & 1 else x) + off[0]
    qy = (oh - 1 - y if flip & 2 else y) + off[1]
    iy, ix = np.ix_(mirror(qy, ht), mirror(qx, wd))
    gain = 2.0 ** float(ev)
    im = img[iy, ix].astype(np.float64) * gain
    rf = ref[iy, ix].astype(np.float64) * gain
    if generate in (2, 4, 5):
        X, Y = np.meshgrid(x.astype(np.uint32), y.astype(np.uint32))
        sp = np.uint32(s) + np.uint32(7654) * X + np.uint32(1357900) * Y
        sp = (xorshift(sp) >> np.uint32(8)) << np.uint32(5)
        u = []
        for _ in range(4):
            sp, v = mrand(sp)
            u.append(v)
        z0, z1 = warp_gaussian(u[0], u[1])
        z2, _ = warp_gaussian(u[2], u[3])
        z = np.stack([z0, z1, z2], -1)
        var = float(a) + 65535.0 * np.maximum(rf[..., :3], 0) * float(b)
        im[..., :3] = rf[..., :3] + z * np.sqrt(var) / 65535.0
        if camera:
            im[..., :3] = demosaic_bilinear(np.take_along_axis(
                im[..., :3], cfa(ow, oh)[..., None], -1)[..., 0])
    if generate in (3, 4):
        im[..., :3] = np.take_along_axis(im[..., :3], cfa(ow, oh)[..., None], -1)
    im[..., 3] = 1
    rf[..., 3] = 1
    nab = np.array([a, b, TILE if tiles else 0, 1], F32)  # (a, b, tile size, tile columns)
    return to_half(im), to_half(rf), nab
