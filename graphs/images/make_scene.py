"""Render vkgraph's reference test scenes (numpy only, deterministic from a seed).

A scene is linear-light rgb in [0, 1] with what a denoiser or an image fit has to get right:
smooth gradients (the background), hard edges (filled shapes), fine texture at several scales
(checkers, stripes, a zone plate, a Siemens star, rings, white and smoothed grain, a step
wedge) and text drawn from the 5x7 bitmap font below.

    python graphs/images/make_scene.py [--out DIR]

writes scene.pfm and scene-c.pfm (training images: graphs/photos/train.txt lists them beside
the photographs), scene-b.pfm (kept out of training: the noisy test image's scene), all
256x256, scene.png (an sRGB preview of scene.pfm) and scene-noisy.pfm
(scene-b.pfm with cnngenin's noise model), and chelsea-noisy.exr: the held-out photograph
chelsea.png of scikit-image's wheel (when installed), decoded to linear light, with that noise
model at the benchmark's "mid" level (the input of graphs/denoise.cfg and the README's
`vkgraph denoise` example). Running it again gives bit-identical files.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

SIZE = 256
CELL = 64  # the layout grid: 4x4 cells
SCENES = [("scene", 1), ("scene-b", 2), ("scene-c", 3)]
# the noisy test image: (name, clean scene, noise a, noise b, seed)
NOISY = ("scene-noisy", "scene-b", 1.0e6, 100.0, 4)
# the noisy held-out photograph: (name, pkg: path, noise a, noise b, seed)
NOISY_PHOTO = ("chelsea-noisy", "pkg:skimage/data/chelsea.png", 1.0e6, 100.0, 5)

# 5x7 glyphs, rows top to bottom, '#' = ink
FONT_ROWS = {
    "A": ".###. #...# #...# ##### #...# #...# #...#",
    "B": "####. #...# #...# ####. #...# #...# ####.",
    "C": ".###. #...# #.... #.... #.... #...# .###.",
    "D": "####. #...# #...# #...# #...# #...# ####.",
    "E": "##### #.... #.... ####. #.... #.... #####",
    "F": "##### #.... #.... ####. #.... #.... #....",
    "G": ".###. #...# #.... #.### #...# #...# .####",
    "H": "#...# #...# #...# ##### #...# #...# #...#",
    "I": ".###. ..#.. ..#.. ..#.. ..#.. ..#.. .###.",
    "J": "..### ...#. ...#. ...#. ...#. #..#. .##..",
    "K": "#...# #..#. #.#.. ##... #.#.. #..#. #...#",
    "L": "#.... #.... #.... #.... #.... #.... #####",
    "M": "#...# ##.## #.#.# #.#.# #...# #...# #...#",
    "N": "#...# #...# ##..# #.#.# #..## #...# #...#",
    "O": ".###. #...# #...# #...# #...# #...# .###.",
    "P": "####. #...# #...# ####. #.... #.... #....",
    "Q": ".###. #...# #...# #...# #.#.# #..#. .##.#",
    "R": "####. #...# #...# ####. #.#.. #..#. #...#",
    "S": ".#### #.... #.... .###. ....# ....# ####.",
    "T": "##### ..#.. ..#.. ..#.. ..#.. ..#.. ..#..",
    "U": "#...# #...# #...# #...# #...# #...# .###.",
    "V": "#...# #...# #...# #...# #...# .#.#. ..#..",
    "W": "#...# #...# #...# #.#.# #.#.# #.#.# .#.#.",
    "X": "#...# #...# .#.#. ..#.. .#.#. #...# #...#",
    "Y": "#...# #...# .#.#. ..#.. ..#.. ..#.. ..#..",
    "Z": "##### ....# ...#. ..#.. .#... #.... #####",
    "0": ".###. #...# #..## #.#.# ##..# #...# .###.",
    "1": "..#.. .##.. ..#.. ..#.. ..#.. ..#.. .###.",
    "2": ".###. #...# ....# ...#. ..#.. .#... #####",
    "3": "##### ...#. ..#.. ...#. ....# #...# .###.",
    "4": "...#. ..##. .#.#. #..#. ##### ...#. ...#.",
    "5": "##### #.... ####. ....# ....# #...# .###.",
    "6": "..##. .#... #.... ####. #...# #...# .###.",
    "7": "##### ....# ...#. ..#.. .#... .#... .#...",
    "8": ".###. #...# #...# .###. #...# #...# .###.",
    "9": ".###. #...# #...# .#### ....# ...#. .##..",
    " ": "..... ..... ..... ..... ..... ..... .....",
    "-": "..... ..... ..... ##### ..... ..... .....",
    "+": "..... ..#.. ..#.. ##### ..#.. ..#.. .....",
    "=": "..... ..... ##### ..... ##### ..... .....",
    ".": "..... ..... ..... ..... ..... .##.. .##..",
    ":": "..... .##.. .##.. ..... .##.. .##.. .....",
    "/": "....# ....# ...#. ..#.. .#... #.... #....",
}
FONT = {c: np.array([[ch == "#" for ch in row] for row in rows.split()], bool)
        for c, rows in FONT_ROWS.items()}

WORDS = ["DENOISE", "KERNEL", "VULKAN", "GRAPH", "PIXEL", "SHADER", "LEVEL", "WEIGHT",
         "FRAME", "NOISE", "PRISM", "QUARTZ", "ZEBRA", "JUMPY", "FOX", "WAVE"]


# ------------------------------------------------------------------------------------------
# drawing helpers (all on float64 (ht, wd, 3) canvases, pixel centres at i + 0.5)


def paint(canvas: np.ndarray, mask: np.ndarray, colour) -> None:
    canvas[mask] = colour


def text_mask(text: str, scale: int) -> np.ndarray:
    """Ink of a line of text: glyphs 5x7 scaled by an integer, one column of spacing."""
    glyphs = [np.kron(FONT[c], np.ones((scale, scale), bool)) for c in text.upper()]
    gap = np.zeros((7 * scale, scale), bool)
    row = []
    for g in glyphs:
        row += [g, gap]
    return np.concatenate(row[:-1], axis=1)


def draw_text(canvas, text: str, x: int, y: int, scale: int, ink, backing=None) -> None:
    """Text at (x, y) (top-left), clipped to the canvas; `backing` fills a box behind it,
    else a one-step dark shadow keeps it readable on any background."""
    mask = text_mask(text, scale)
    ht, wd = canvas.shape[:2]

    def put(m, ox, oy, colour):
        h, w = m.shape
        y0, x0 = max(oy, 0), max(ox, 0)
        y1, x1 = min(oy + h, ht), min(ox + w, wd)
        if y1 > y0 and x1 > x0:
            sub = canvas[y0:y1, x0:x1]
            sub[m[y0 - oy:y1 - oy, x0 - ox:x1 - ox]] = colour

    if backing is not None:
        pad = scale * 2
        box = np.ones((mask.shape[0] + 2 * pad, mask.shape[1] + 2 * pad), bool)
        put(box, x - pad, y - pad, backing)
    else:
        put(mask, x + scale, y + scale, (0.01, 0.01, 0.01))
    put(mask, x, y, ink)


def upsample(small: np.ndarray, n: int) -> np.ndarray:
    """Bilinear resize of a square grid to n x n (smooth grain)."""
    m = small.shape[0]
    t = (np.arange(n) + 0.5) * (m - 1) / n
    rows = np.array([np.interp(t, np.arange(m), small[:, j]) for j in range(m)]).T
    return np.array([np.interp(t, np.arange(m), rows[i]) for i in range(n)])


# ------------------------------------------------------------------------------------------
# the scene's parts


def background(rng, ht: int, wd: int) -> np.ndarray:
    """Bilinear blend of four corner colours plus a slow diagonal wave: smooth gradients."""
    v, u = (np.mgrid[0:ht, 0:wd] + 0.5) / np.array([ht, wd])[:, None, None]
    corners = rng.uniform(0.03, 0.55, (4, 3))
    u, v = u[:, :, None], v[:, :, None]
    img = ((1 - u) * (1 - v) * corners[0] + u * (1 - v) * corners[1]
           + (1 - u) * v * corners[2] + u * v * corners[3])
    fu, fv, phase = rng.uniform(0.5, 1.5), rng.uniform(0.5, 1.5), rng.uniform(0, 2 * np.pi)
    wave = 0.06 * np.sin(2 * np.pi * (fu * u + fv * v) + phase)
    return img + wave


def texture(kind: str, n: int, rng) -> np.ndarray:
    """An n x n pattern in [0, 1]."""
    i, j = np.mgrid[0:n, 0:n]
    c = (n - 1) / 2
    dy, dx = i - c, j - c
    r = np.hypot(dx, dy)
    if kind == "checker1":
        return ((i + j) % 2).astype(float)
    if kind == "checker4":
        return ((i // 4 + j // 4) % 2).astype(float)
    if kind == "stripes":  # vertical bands getting finer: periods 8, 6, 4, 3, 2 px
        periods = np.array([8, 6, 4, 3, 2])
        p = periods[np.minimum(j * len(periods) // n, len(periods) - 1)]
        return ((j % p) < p / 2).astype(float)
    if kind == "diagonal":
        return (((i + j) // 3) % 2).astype(float)
    if kind == "zoneplate":  # local frequency r/n cycles per pixel: Nyquist at the edge
        return 0.5 + 0.5 * np.cos(np.pi * r * r / n)
    if kind == "siemens":
        return (np.sin(18 * np.arctan2(dy, dx)) > 0).astype(float) * (r < n / 2)
    if kind == "rings":
        return ((r // 3) % 2).astype(float)
    if kind == "grain":
        return rng.random((n, n))
    if kind == "blobs":
        return np.clip(upsample(rng.random((n // 6 + 2, n // 6 + 2)), n) * 1.4 - 0.2, 0, 1)
    if kind == "wedge":  # eight linear steps
        return np.floor(j * 8 / n) / 7
    raise ValueError(kind)


TEXTURES = ["checker1", "checker4", "stripes", "diagonal", "zoneplate", "siemens", "rings",
            "grain", "blobs", "wedge"]


def shape_mask(kind: str, cx: float, cy: float, size: float, angle: float, ht: int, wd: int):
    y, x = np.mgrid[0:ht, 0:wd] + 0.5
    dx, dy = x - cx, y - cy
    ca, sa = np.cos(angle), np.sin(angle)
    rx, ry = ca * dx + sa * dy, -sa * dx + ca * dy  # rotated frame
    if kind == "disk":
        return dx * dx + dy * dy < size * size
    if kind == "ring":
        d = np.hypot(dx, dy)
        return (d < size) & (d > 0.6 * size)
    if kind == "square":
        return (np.abs(rx) < 0.8 * size) & (np.abs(ry) < 0.8 * size)
    if kind == "bar":
        return (np.abs(rx) < 1.3 * size) & (np.abs(ry) < 0.35 * size)
    if kind == "ellipse":
        return (rx / size) ** 2 + (ry / (0.5 * size)) ** 2 < 1
    if kind == "triangle":
        pts = [(np.cos(angle + k * 2 * np.pi / 3) * size, np.sin(angle + k * 2 * np.pi / 3)
                * size) for k in range(3)]
        inside = np.ones((ht, wd), bool)
        for k in range(3):
            (x0, y0), (x1, y1) = pts[k], pts[(k + 1) % 3]
            inside &= (x1 - x0) * (dy - y0) - (y1 - y0) * (dx - x0) > 0
        return inside
    raise ValueError(kind)


SHAPES = ["disk", "ring", "square", "bar", "ellipse", "triangle"]


def render(seed: int, name: str, size: int = SIZE) -> np.ndarray:
    """One scene: float32 (size, size, 3), linear light in [0, 1]."""
    rng = np.random.default_rng(seed)
    img = background(rng, size, size)
    grid = size // CELL
    cells = rng.permutation(grid * grid)
    patches, free = cells[:6], cells[6:]

    # hard-edged shapes around the free cells (they may reach into their neighbours)
    for cell in free[: rng.integers(7, 11)]:
        cy, cx = (divmod(int(cell), grid) + rng.uniform(0.3, 0.7, 2)) * CELL
        kind = SHAPES[rng.integers(len(SHAPES))]
        colour = rng.uniform(0.02, 0.95, 3)
        paint(img, shape_mask(kind, cx, cy, rng.uniform(14, 30), rng.uniform(0, np.pi),
                              size, size), colour)

    # texture patches, each between a dark and a bright colour
    inset = 5
    n = CELL - 2 * inset
    for cell, kind in zip(patches, rng.choice(TEXTURES, len(patches), replace=False),
                          strict=True):
        gy, gx = divmod(int(cell), grid)
        t = texture(str(kind), n, rng)[:, :, None]
        dark, bright = rng.uniform(0.0, 0.15, 3), rng.uniform(0.45, 1.0, 3)
        y0, x0 = gy * CELL + inset, gx * CELL + inset
        img[y0:y0 + n, x0:x0 + n] = dark + (bright - dark) * t

    # small shapes anywhere, some over the patches: edges against texture
    for _ in range(rng.integers(5, 9)):
        cx, cy = rng.uniform(8, size - 8, 2)
        kind = SHAPES[rng.integers(len(SHAPES))]
        paint(img, shape_mask(kind, cx, cy, rng.uniform(4, 10), rng.uniform(0, np.pi), size,
                              size), rng.uniform(0.0, 1.0, 3))

    # text: a title, a caption with the scene's name, a pangram-ish line and numbers
    words = rng.choice(WORDS, 3, replace=False)
    lines = [
        ("VKGRAPH", 3, rng.integers(4, size - 7 * 18 - 4), rng.integers(4, 40)),
        (f"{name} SEED {seed}", 1, rng.integers(4, 120), rng.integers(70, 100)),
        (f"{words[0]} {words[1]} 0123456789", 1, rng.integers(2, 40), rng.integers(130, 170)),
        (f"{words[2]} 42", 2, rng.integers(4, 140), rng.integers(190, 222)),
        ("ABCDEFGHIJKLMNOPQRSTUVWXYZ:+-=/.", 1, rng.integers(2, 50), rng.integers(240, 247)),
    ]
    for text, scale, x, y in lines:
        ink = rng.uniform(0.75, 1.0, 3)
        backing = rng.uniform(0.0, 0.08, 3) if rng.random() < 0.5 else None
        draw_text(img, text, int(x), int(y), scale, ink, backing)

    return np.clip(img, 0.0, 1.0).astype(np.float32)


def add_noise(img: np.ndarray, a: float, b: float, seed: int) -> np.ndarray:
    """cnngenin's (and vkdt's) noise model on linear values x: Gaussian noise with
    std(x) = sqrt(a + 65535 max(x, 0) b) / 65535 per channel, from a seeded generator; not
    clipped (noisy values may leave [0, 1], as cnngenin's do)."""
    rng = np.random.default_rng(seed)
    x = img.astype(np.float64)
    std = np.sqrt(a + 65535.0 * np.maximum(x, 0.0) * b) / 65535.0
    return (x + std * rng.standard_normal(x.shape)).astype(np.float32)


def main(argv: list[str] | None = None) -> None:
    here = Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=here, help="output folder")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(here.parent.parent))  # the repository, when run as a script
    from vkgraph.pipeline.formats import read_image, write_exr, write_pfm, write_png

    rendered = {}
    for name, seed in SCENES:
        img = rendered[name] = render(seed, name)
        write_pfm(args.out / f"{name}.pfm", img)
        if name == "scene":
            write_png(args.out / "scene.png", img)
        print(f"{args.out / name}.pfm: {img.shape[1]}x{img.shape[0]}, seed {seed}, "
              f"mean {img.mean():.3f}")
    name, clean, a, b, seed = NOISY
    noisy = add_noise(rendered[clean], a, b, seed)
    write_pfm(args.out / f"{name}.pfm", noisy)
    print(f"{args.out / name}.pfm: {clean}.pfm + noise a {a:g}, b {b:g}, seed {seed}, "
          f"rmse {np.sqrt(np.mean((noisy - rendered[clean]) ** 2)):.4f}")
    from vkgraph.pipeline.datasets import package_file
    from vkgraph.pipeline.errors import GraphError
    name, spec, a, b, seed = NOISY_PHOTO
    try:
        photo = read_image(package_file(spec))[..., :3]
    except GraphError as e:
        print(f"{name}.exr not written: {e}")
        return
    noisy = add_noise(photo, a, b, seed)
    write_exr(args.out / f"{name}.exr", noisy, half=True)
    print(f"{args.out / name}.exr: {spec} + noise a {a:g}, b {b:g}, seed {seed} (f16)")


if __name__ == "__main__":
    main()
