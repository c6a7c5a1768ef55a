"""Architecture candidates for the kpn denoiser, prototyped in PyTorch before any shader is
written: which change buys the most held-out PSNR for the least work on the device?

Every variant shares kpn-t's photo recipe (graphs/train-photo.cfg): a Laplacian pyramid of 4
levels, per pixel and level an MLP without biases (leaky ReLU 0.001, 6 hidden layers) reading
noise-normalised features (log2(1 + Y(|D|) / sigma), a constant bias feature), predicting
softmax taps and a band gain sigmoid(K_15) applied to the level's detail; L1 loss; Adam
(2e-3, beta1 0.9, eps 1e-8), gradient clip 1, a cosine decay; batches of 16 tiles of 128x128
from the training photographs (graphs/photos/train.txt), each with its own crop, flip,
exposure (2^U(-2, 2)) and noise draw (a, b log-uniform over three decades below 0.5 of vkdt's
range). The candidates change one thing each:

  base      the recipe above (the shipped architecture: an 8x8 window of luminance features,
            one 15-tap star for all three channels)
  chroma    the detail in an orthonormal opponent space (luma, two chroma axes: white noise
            stays white and keeps its std); one kernel and gain for luma, another for both
            chroma channels (32 outputs instead of 16)
  ctx       chroma, and features with reach: a centred 7x7 window of luma SNR at the level,
            3x3 at the next coarser level around the parent pixel, a 5-point chroma SNR star
  dense     ctx with dense 5x5 filters (25 taps) instead of the 15-tap star
  wide      ctx with hidden width 128
  l2        ctx with an L2 loss (what PSNR measures) instead of L1
  cascade   two ctx stages: the second computes its features from the first's output (a
            pilot estimate, as BM3D's second step does) and filters the noisy input's detail;
            trained jointly (the loss of both outputs, no gradient through the pilot)
  cascade3  three such stages
  signed    ctx with signed luma features, sign(Y(D)) log2(1 + |Y(D)| / sigma), instead of
            the luminance of |D| (a line and an edge differ in sign patterns)
  signed2   signed, two stages
  nl        signed, and 8 nonlocal taps per level and group: the 8 offsets within 11x11 whose
            5x5 patches of the level's luma (the guide's, in a cascade) are closest to the
            pixel's own, as block matching finds them; the kernel's softmax spans the star and
            these taps, and the 8 patch distances (over twice the noise variance, log2(1 + d))
            are 8 more features (72 in all)
  nl2       nl, two stages
  nl64      nl in kpn-t's 64 features: 12 nonlocal taps and their 12 distances, the 7x7
            luma window without the 12 positions nearest its corners (37)
  nlvst     nl64 in the variance-stabilised domain: the generalized Anscombe transform of the
            image's (a, b), f(x) = (2 / k) sqrt(k x + 3/8 k^2 + s^2) (var x = s^2 + k x), makes
            the noise's std 1 everywhere; the network filters f(X) with a noise variance of 1
            and its output goes back through the algebraic inverse (the loss is in linear
            light, so the network learns the inverse's bias away)

Held-out evaluation: bench/quality.py's photographs and noise (true a, b), PSNR in linear
[0, 1]. Prints one table (mean PSNR per level, training seconds) and writes --json.

    python3 bench/kpn_arch.py --variants base,chroma,ctx --steps 6000 --json $OUT/arch.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vkgraph.apps import heldout  # noqa: E402
from vkgraph.pipeline.datasets import image_set  # noqa: E402
from vkgraph.pipeline.formats import read_image  # noqa: E402

LUMA = (0.2627, 0.6780, 0.0593)
LEAK = 0.001
STAR = [(0, -2)] + [(dx, -1) for dx in range(-2, 3)] + [(-1, 0), (0, 0), (1, 0)] + \
    [(dx, 1) for dx in range(-2, 3)] + [(0, 2)]
DENSE = [(dx, dy) for dy in range(-2, 3) for dx in range(-2, 3)]
# orthonormal opponent basis: rows luma, red-blue, green-magenta
OPP = np.array([[1, 1, 1], [1, 0, -1], [1, -2, 1]], np.float64)
OPP /= np.linalg.norm(OPP, axis=1, keepdims=True)

VARIANTS = {
    "base": dict(chroma=False, ctx=False, taps=STAR, width=64),
    "chroma": dict(chroma=True, ctx=False, taps=STAR, width=64),
    "ctx": dict(chroma=True, ctx=True, taps=STAR, width=64),
    "dense": dict(chroma=True, ctx=True, taps=DENSE, width=64),
    "wide": dict(chroma=True, ctx=True, taps=STAR, width=128),
    "l2": dict(chroma=True, ctx=True, taps=STAR, width=64, loss="l2"),
    "cascade": dict(chroma=True, ctx=True, taps=STAR, width=64, stages=2),
    "cascade3": dict(chroma=True, ctx=True, taps=STAR, width=64, stages=3),
    "signed": dict(chroma=True, ctx=True, taps=STAR, width=64, signed=True),
    "signed2": dict(chroma=True, ctx=True, taps=STAR, width=64, signed=True, stages=2),
    "nl": dict(chroma=True, ctx=True, taps=STAR, width=64, signed=True, nl=8),
    "nl2": dict(chroma=True, ctx=True, taps=STAR, width=64, signed=True, nl=8, stages=2),
    "nl64": dict(chroma=True, ctx=True, taps=STAR, width=64, signed=True, nl=12, disc=True),
    "agg": dict(chroma=True, ctx=True, taps=STAR, width=64, signed=True, nl=12, disc=True,
                agg=1),
    "aggu": dict(chroma=True, ctx=True, taps=STAR, width=64, signed=True, nl=12, disc=True,
                 agg=1, uniform=True),
    "agg5": dict(chroma=True, ctx=True, taps=STAR, width=64, signed=True, nl=12, disc=True,
                 agg=2),
    "nl2agg": dict(chroma=True, ctx=True, taps=STAR, width=64, signed=True, nl=12, disc=True,
                   agg=1, uniform=True, stages=2),
    "unet": dict(cnn="unet", width=32, lr=1e-3),
    "unet64": dict(cnn="unet", width=64, lr=1e-3),
    "unet4": dict(cnn="unet", width=32, lr=1e-3, scales=4),
    "unetmid": dict(cnn="unet", width=32, lr=1e-3, norm="mid"),
    "unetaug": dict(cnn="unet", width=32, lr=1e-3, norm="mid", aug=True),
    "unetdl": dict(cnn="unet", width=32, lr=1e-3, norm="mid", aug=True, leaves=0.25),
    "unetl2": dict(cnn="unet", width=32, lr=1e-3, norm="mid", aug=True, loss="l2"),
    "unet48dl": dict(cnn="unet", width=48, lr=1e-3, norm="mid", aug=True, leaves=0.25),
    "unetm2": dict(cnn="unet", width=32, lr=1e-3, norm="mid", loss="l2"),
    "unetgeo": dict(cnn="unet", width=32, lr=1e-3, norm="mid", geo=True),
    "unetgl": dict(cnn="unet", width=32, lr=1e-3, norm="mid", geo=True, leaves=0.25),
    "unetgl2": dict(cnn="unet", width=32, lr=1e-3, norm="mid", geo=True, leaves=0.25,
                    loss="l2"),
    # larger tiles, fewer of them (the same pixels a step): context beyond 128 pixels
    "unet256": dict(cnn="unet", width=32, lr=1e-3, norm="mid", tile=256, n=4),
    "unet4256": dict(cnn="unet", width=32, lr=1e-3, norm="mid", scales=4, tile=256, n=4),
    # 32 tiles a step instead of 16
    "unetb32": dict(cnn="unet", width=32, lr=1e-3, norm="mid", n=32),
    # a nonlocal-means estimate of the noisy tile as 3 more input channels (Cnn.nlmeans)
    "unetnl": dict(cnn="unet", width=32, lr=1e-3, norm="mid", nl=5),
    "dncnn": dict(cnn="dncnn", width=64, depth=17, lr=1e-3),
    "nlvst": dict(chroma=True, ctx=True, taps=STAR, width=64, signed=True, nl=12, disc=True,
                  vst=True),
}
WINDOW7 = [(dx, dy) for dy in range(-3, 4) for dx in range(-3, 4)]
DISC37 = [(dx, dy) for dx, dy in WINDOW7 if abs(dx) + abs(dy) < 5]
NL_R = 5  # nonlocal search radius: offsets within 11x11
NL_OFFS = [(dx, dy) for dy in range(-NL_R, NL_R + 1) for dx in range(-NL_R, NL_R + 1)
           if (dx, dy) != (0, 0)]


def band_noise(levels: int) -> list[float]:
    from vkgraph.modules.kpn_t.forward import band_noise as bn

    return list(bn(levels + 1))


class Kpn:
    def __init__(self, torch, cfg: dict, levels: int, dev: str, seed: int):
        self.t, self.cfg, self.levels, self.dev = torch, cfg, levels, dev
        self.band = band_noise(levels)
        self.taps = cfg["taps"]
        self.nl = cfg.get("nl", 0)
        self.agg = cfg.get("agg", 0)
        self.nk = len(self.taps) + self.nl + 1 + (1 if self.agg else 0)
        self.nout = self.nk * (2 if cfg["chroma"] else 1)
        w, g = cfg["width"], torch.Generator().manual_seed(seed)
        dims = [64 if cfg.get("disc") else 64 + self.nl] + [w] * 6 + [self.nout]
        self.W = []
        for i in range(7):
            bound = math.sqrt(6.0 / (dims[i] + dims[i + 1])) if i < 6 else math.sqrt(6 / (2 * w))
            self.W.append(((torch.rand(dims[i + 1], dims[i], generator=g) * 2 - 1) * bound)
                          .to(dev).requires_grad_())
        self.luma = torch.tensor(LUMA, device=dev).view(1, 3, 1, 1)
        self.opp = torch.tensor(OPP, dtype=torch.float32, device=dev)
        b = torch.tensor([1.0, 4, 6, 4, 1], device=dev) / 16
        self.k5 = (b[:, None] * b[None, :]).view(1, 1, 5, 5)

    # ---- pyramid (mirrored borders: -1 -> 0)
    def pad(self, x, r):
        t = self.t
        x = t.cat([x[..., :r].flip(-1), x, x[..., -r:].flip(-1)], -1)
        return t.cat([x[..., :r, :].flip(-2), x, x[..., -r:, :].flip(-2)], -2)

    def sub(self, M):
        n, c, h, w = M.shape
        y = self.t.nn.functional.conv2d(self.pad(M, 2).reshape(n * c, 1, h + 4, w + 4),
                                        self.k5, stride=2)
        return y.reshape(n, c, y.shape[-2], y.shape[-1])

    def up(self, C, h, w):
        t = self.t

        def axis(C, n, d):
            nxt = t.cat([C.narrow(d, 1, C.shape[d] - 1), C.narrow(d, C.shape[d] - 1, 1)], d)
            out = t.stack([C, 0.5 * (C + nxt)], d + 1)
            shape = list(C.shape)
            shape[d] *= 2
            return out.reshape(shape).narrow(d, 0, n)

        return axis(axis(C, w, 3), h, 2)

    def window(self, s, offs):
        """(n, len(offs), h, w): s (n, 1, h, w) at p + offset, mirrored."""
        r = max(max(abs(dx), abs(dy)) for dx, dy in offs)
        p = self.pad(s, r)
        h, w = s.shape[-2:]
        return self.t.cat([p[:, :, r + dy:r + dy + h, r + dx:r + dx + w] for dx, dy in offs], 1)

    def matches(self, Y, sig):
        """Block matching at one level: Y (n, 1, h, w) the luma of the level's image, sig
        its noise std. The nl offsets (indices into NL_OFFS) whose 5x5 patches are closest
        to the pixel's, (n, nl, h, w), and log2(1 + d / (2 sig^2)) of their distances."""
        t, r = self.t, NL_R
        p = self.pad(Y, r)
        h, w = Y.shape[-2:]
        d = t.cat([(p[:, :, r + dy:r + dy + h, r + dx:r + dx + w] - Y) ** 2
                   for dx, dy in NL_OFFS], 1)
        d = t.nn.functional.avg_pool2d(self.pad(d, 2), 5, stride=1)
        v, idx = t.topk(-d / (2 * sig ** 2), self.nl, dim=1)
        return idx, t.log2(1 + (-v).clamp_min(0))

    def gather(self, D, idx):
        """D (n, 3, h, w) at the matched offsets: (n, nl, 3, h, w)."""
        t, r = self.t, NL_R
        p = self.pad(D, r)
        h, w = D.shape[-2:]
        S = t.stack([p[:, :, r + dy:r + dy + h, r + dx:r + dx + w] for dx, dy in NL_OFFS], 1)
        i = idx[:, :, None].expand(-1, -1, D.shape[1], -1, -1)
        return t.gather(S, 1, i)

    # ---- one image batch X (n, 3, h, w) with its per-image (a, b) -> output (n, 3, h, w)
    def pyramid(self, X):
        M = [X]
        for _ in range(self.levels + 1):
            M.append(self.sub(M[-1]))
        return M, [M[i] - self.up(M[i + 1], *M[i].shape[-2:]) for i in range(self.levels + 1)]

    def forward(self, X, a, b, guide=None):
        """The denoised X; with `guide` (a pilot estimate of the clean X) the features are
        computed from the guide's detail instead of X's."""
        if self.cfg.get("vst"):  # filter f(X) with noise std 1, return f^-1 of the result
            k = (b / 65535.0).view(-1, 1, 1, 1)
            s2 = (a / 65535.0**2).view(-1, 1, 1, 1)

            def f(x):
                return (2 / k) * (k * x + 0.375 * k * k + s2).clamp_min(0).sqrt()

            y = self.filter(f(X), self.t.ones_like(X[:, :1]),
                            None if guide is None else f(guide))
            return ((k * y / 2) ** 2 - 0.375 * k * k - s2) / k
        var = (a.view(-1, 1, 1, 1) + 65535.0 * (X * self.luma).sum(1, keepdim=True)
               .clamp_min(0) * b.view(-1, 1, 1, 1)) / 65535.0**2
        return self.filter(X, var, guide)

    def filter(self, X, var, guide=None):
        """forward's network on X whose noise variance is var (n, 1, h, w)."""
        t, L = self.t, self.levels
        V = [var]
        for _ in range(L + 1):
            V.append(self.sub(V[-1]))
        M, D = self.pyramid(X)
        FM, FD = (M, D) if guide is None else self.pyramid(guide)
        snr, csnr = [], []
        for i in range(L + 1):
            sig = (self.band[i] * V[i].clamp_min(0).sqrt()).clamp_min(1e-6)
            if self.cfg.get("signed"):
                y = (FD[i] * self.luma).sum(1, keepdim=True)
                snr.append(t.sign(y) * t.log2(1 + y.abs() / sig))
            else:
                snr.append(t.log2(1 + (FD[i].abs() * self.luma).sum(1, keepdim=True) / sig))
            if self.cfg["ctx"]:
                c = t.einsum("kc,nchw->nkhw", self.opp[1:], FD[i]).norm(dim=1, keepdim=True)
                csnr.append(t.log2(1 + c / sig))
        feats, gathered = [], []
        for i in range(L):
            if self.cfg["ctx"]:
                h, w = D[i].shape[-2:]
                coarse = self.window(snr[i + 1], [(dx, dy) for dy in (-1, 0, 1)
                                                  for dx in (-1, 0, 1)])
                coarse = coarse.repeat_interleave(2, -1).repeat_interleave(2, -2)[..., :h, :w]
                f = t.cat([t.ones_like(snr[i]),
                           self.window(snr[i], DISC37 if self.cfg.get("disc") else WINDOW7),
                           coarse,
                           self.window(csnr[i], [(0, -1), (-1, 0), (0, 0), (1, 0), (0, 1)])], 1)
            else:
                f = self.window(snr[i], [(c // 8 - 4, c % 8 - 4) for c in range(64)])
                f = t.cat([t.ones_like(f[:, :1]), f[:, 1:]], 1)
            if self.nl:
                sig = (self.band[i] * V[i].clamp_min(0).sqrt()).clamp_min(1e-6)
                idx, dist = self.matches((FM[i] * self.luma).sum(1, keepdim=True), sig)
                gathered.append(idx if self.agg else self.gather(D[i], idx))
                f = t.cat([f, dist], 1)
            feats.append(f.permute(0, 2, 3, 1).reshape(-1, f.shape[1]))
        h = t.cat(feats, 0)
        for i in range(6):
            h = t.nn.functional.leaky_relu(h @ self.W[i].T, LEAK)
        K = h @ self.W[6].T
        out, start = None, 0
        Ks = []
        for i in range(L):
            n, _, hh, ww = D[i].shape
            Ks.append(K[start:start + n * hh * ww].reshape(n, hh, ww, -1).permute(0, 3, 1, 2))
            start += n * hh * ww
        G = gathered or [None] * L
        out = self.up(M[L], *M[L - 1].shape[-2:]) + self.filt(D[L - 1], Ks[L - 1], G[L - 1])
        for i in range(L - 2, -1, -1):
            out = self.up(out, *M[i].shape[-2:]) + self.filt(D[i], Ks[i], G[i])
        return out

    def filt(self, D, K, G=None):
        t = self.t
        if self.agg:
            Do = t.einsum("kc,nchw->nkhw", self.opp, D)
            y = self.apply_agg(Do[:, :1], K[:, :self.nk], G)
            c = self.apply_agg(Do[:, 1:], K[:, self.nk:2 * self.nk], G)
            return t.einsum("kc,nkhw->nchw", self.opp, t.cat([y, c], 1))
        if self.cfg["chroma"]:
            Do = t.einsum("kc,nchw->nkhw", self.opp, D)
            Go = None if G is None else t.einsum("kc,njchw->njkhw", self.opp, G)
            y = self.apply1(Do[:, :1], K[:, :self.nk], None if G is None else Go[:, :, :1])
            c = self.apply1(Do[:, 1:], K[:, self.nk:2 * self.nk],
                            None if G is None else Go[:, :, 1:])
            return t.einsum("kc,nkhw->nchw", self.opp, t.cat([y, c], 1))
        return self.apply1(D, K, G)

    def apply1(self, D, K, G=None):
        """Softmax taps (the star's, then the nonlocal ones on G (n, nl, c, h, w)) and a
        sigmoid gain."""
        t, nt = self.t, self.nk - 1
        s = t.softmax(K[:, :nt], 1)
        g = t.sigmoid(K[:, nt:nt + 1])
        r = 2
        p = self.pad(D, r)
        h, w = D.shape[-2:]
        acc = 0
        for k, (dx, dy) in enumerate(self.taps):
            acc = acc + s[:, k:k + 1] * p[:, :, r + dy:r + dy + h, r + dx:r + dx + w]
        if G is not None:
            nst = len(self.taps)
            acc = acc + (s[:, nst:nst + self.nl, None] * G).sum(1)
        return acc * g


    def shift(self, x, dx, dy):
        """x (..., h, w) at p + (dx, dy), mirrored."""
        r = max(abs(dx), abs(dy))
        if r == 0:
            return x
        h, w = x.shape[-2:]
        return self.pad(x, r)[..., r + dy:r + dy + h, r + dx:r + dx + w]

    def apply_agg(self, D, K, idx):
        """Patch-wise aggregation: the pixel's estimate is a mix of its neighbours' (q = p + e,
        e within (2 agg + 1)^2) kernels applied at p: q's star taps at p's star, q's nonlocal
        taps at p + q's match offsets (the pixel of q's matched patch that corresponds to p),
        as BM3D aggregates every group's estimate of a pixel. The mix is a softmax of one more
        output per group (its confidence), or uniform; the gain is p's own."""
        t, nst, nl = self.t, len(self.taps), self.nl
        s = t.softmax(K[:, :nst + nl], 1)
        g = t.sigmoid(K[:, nst + nl:nst + nl + 1])
        conf = K[:, nst + nl + 1:nst + nl + 2]
        r = NL_R
        p = self.pad(D, r)
        n, c, h, w = D.shape
        S = t.stack([p[:, :, r + dy:r + dy + h, r + dx:r + dx + w] for dx, dy in NL_OFFS], 1)
        P = t.stack([p[:, :, r + dy:r + dy + h, r + dx:r + dx + w] for dx, dy in self.taps], 1)
        E = [(ex, ey) for ey in range(-self.agg, self.agg + 1)
             for ex in range(-self.agg, self.agg + 1)]
        if self.cfg.get("uniform"):
            wts = t.full((n, len(E), h, w), 1.0 / len(E), device=D.device)
        else:
            wts = t.softmax(t.cat([self.shift(conf, ex, ey) for ex, ey in E], 1), 1)
        acc = 0
        for k, (ex, ey) in enumerate(E):
            se = self.shift(s, ex, ey)
            ie = self.shift(idx, ex, ey)[:, :, None].expand(-1, -1, c, -1, -1)
            est = (se[:, :nst, None] * P).sum(1) + (se[:, nst:, None] * t.gather(S, 1, ie)).sum(1)
            acc = acc + wts[:, k:k + 1] * est
        return acc * g


class Cascade:
    """Stages of Kpn: stage k > 0 takes its features from stage k - 1's output."""

    def __init__(self, torch, cfg: dict, levels: int, dev: str, seed: int):
        self.stages = [Kpn(torch, cfg, levels, dev, seed + 17 * k)
                       for k in range(cfg.get("stages", 1))]
        self.W = [w for s in self.stages for w in s.W]

    def outputs(self, X, a, b):
        outs = [self.stages[0].forward(X, a, b)]
        for s in self.stages[1:]:
            outs.append(s.forward(X, a, b, guide=outs[-1].detach()))
        return outs

    def forward(self, X, a, b):
        return self.outputs(X, a, b)[-1]


class Cnn:
    """A convolutional network for comparison (not a kpn): the noisy image and its noise std
    map, both over the image's mean noise std, in; the noise (in those units) out, subtracted.
    `unet`: 3 scales (width, 2 width, 4 width channels, two 3x3 convolutions each, strided
    down, transposed up, skip connections); `dncnn`: depth 3x3 convolutions of width channels
    at full resolution."""

    def __init__(self, torch, cfg: dict, dev: str, seed: int):
        nn = torch.nn
        torch.manual_seed(seed)
        self.t, w = torch, cfg["width"]

        def block(i, o):
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.ReLU(),
                                 nn.Conv2d(o, o, 3, padding=1), nn.ReLU())

        if cfg["cnn"] == "unet":
            n = cfg.get("scales", 3)
            ws = [w << s for s in range(n)]
            cin = 7 if cfg.get("nl") else 4
            self.enc = [block(cin if s == 0 else ws[s - 1], ws[s]) for s in range(n)]
            self.down = [nn.Conv2d(ws[s], ws[s], 2, stride=2) for s in range(n - 1)]
            self.up = [nn.ConvTranspose2d(ws[s + 1], ws[s], 2, stride=2) for s in range(n - 1)]
            self.dec = [block(2 * ws[s], ws[s]) for s in range(n - 1)]
            self.last = nn.Conv2d(w, 3, 1)
            mods = self.enc + self.down + self.up + self.dec + [self.last]
        else:
            layers = [nn.Conv2d(4, w, 3, padding=1), nn.ReLU()]
            for _ in range(cfg["depth"] - 2):
                layers += [nn.Conv2d(w, w, 3, padding=1), nn.ReLU()]
            layers.append(nn.Conv2d(w, 3, 3, padding=1))
            self.net = nn.Sequential(*layers)
            mods = [self.net]
        self.cfg = cfg
        self.W = [p for m in mods for p in m.to(dev).parameters()]
        self.luma = torch.tensor(LUMA, device=dev).view(1, 3, 1, 1)

    def net_out(self, x):
        if self.cfg["cnn"] != "unet":
            return self.net(x)
        t, n = self.t, len(self.enc)
        h, w = x.shape[-2:]
        m = 1 << (n - 1)
        x = t.nn.functional.pad(x, (0, (-w) % m, 0, (-h) % m), mode="reflect")
        f = [self.enc[0](x)]
        for s in range(1, n):
            f.append(self.enc[s](self.down[s - 1](f[-1])))
        g = f[-1]
        for s in range(n - 2, -1, -1):
            g = self.dec[s](t.cat([self.up[s](g), f[s]], 1))
        return self.last(g)[..., :h, :w]

    def load_lut(self, path: Path) -> None:
        """Weights trained by unet-t (its .lut: modules/unet-t/net.py's layer order)."""
        from vkgraph.modules.unet_t.net import layers
        from vkgraph.pipeline.formats import read_lut

        w = read_lut(path)[0].ravel().astype(np.float32)
        self.flat = w.astype(np.float64)
        n = len(self.enc)
        convs = {}
        for k in range(n):
            convs[f"enc{k}a"], convs[f"enc{k}"] = self.enc[k][0], self.enc[k][2]
            if k < n - 1:
                convs[f"down{k}"], convs[f"up{k}"] = self.down[k], self.up[k]
                convs[f"dec{k}a"], convs[f"dec{k}"] = self.dec[k][0], self.dec[k][2]
        convs["out"] = self.last
        ls = layers(self.cfg["width"], n)
        if w.size != ls[-1].end:
            raise SystemExit(f"{path}: {w.size} weights, width {self.cfg['width']} scales {n} "
                             f"has {ls[-1].end}")
        t = self.t
        with t.no_grad():
            for L in ls:
                W = t.tensor(w[L.offset:L.offset + L.weights]).view(L.cout, L.cin, L.k, L.k)
                conv = convs[L.name]
                if L.kind == "up":  # ConvTranspose2d holds [cin][cout][ky][kx]
                    W = W.transpose(0, 1)
                conv.weight.copy_(W.contiguous())
                conv.bias.copy_(t.tensor(w[L.offset + L.weights:L.end]))

    def outputs(self, X, a, b):
        var = (a.view(-1, 1, 1, 1) + 65535.0 * (X * self.luma).sum(1, keepdim=True)
               .clamp_min(0) * b.view(-1, 1, 1, 1)) / 65535.0**2
        sig = var.clamp_min(1e-12).sqrt()
        if self.cfg.get("norm") == "mid":  # unet-t's scale: the noise std at mid grey
            s = ((a + 65535.0 * 0.18 * b).clamp_min(0).sqrt() / 65535.0).clamp_min(1e-5)
            s = s.view(-1, 1, 1, 1)
        else:
            s = sig.mean((1, 2, 3), keepdim=True)
        F = [X / s, sig / s]
        if self.cfg.get("nl"):
            with self.t.no_grad():
                F.append(self.nlmeans(X, sig, self.cfg["nl"]) / s)
        return [X - s * self.net_out(self.t.cat(F, 1))]

    def nlmeans(self, X, sig, r: int, pr: int = 2, h: float = 0.5):
        """Nonlocal means of X (B, 3, H, W) inside each tile: every pixel q within r of p
        (q in the tile) weighs exp(-max(d / (2 sigma(p)^2) - 1, 0) / h), d the mean squared
        difference of the (2 pr + 1)^2 patches around p and q over the three channels (the
        tile's edge replicated), p itself 1."""
        t = self.t
        F = t.nn.functional
        B, _, H, W = X.shape
        P = F.pad(X, (r + pr,) * 4, mode="replicate")
        ones = t.zeros(B, 1, H + 2 * r, W + 2 * r, device=X.device)
        ones[..., r:r + H, r:r + W] = 1
        inv = 1.0 / (2.0 * sig.clamp_min(1e-6) ** 2)
        num, den = X.clone(), t.ones_like(sig)
        for dy in range(-r, r + 1):
            for dx in range(-r, r + 1):
                if dx == 0 and dy == 0:
                    continue
                Q = P[..., r + dy:r + dy + H + 2 * pr, r + dx:r + dx + W + 2 * pr]
                E = ((P[..., r:r + H + 2 * pr, r:r + W + 2 * pr] - Q) ** 2).mean(1, keepdim=True)
                d = F.avg_pool2d(E, 2 * pr + 1, stride=1)
                w = t.exp(-(d * inv - 1.0).clamp_min(0) / h)
                w = w * ones[..., r + dy:r + dy + H, r + dx:r + dx + W]
                num += w * Q[..., pr:pr + H, pr:pr + W]
                den += w
        return num / den

    def forward(self, X, a, b):
        return self.outputs(X, a, b)[-1]


def load_training(torch, dev):
    listing = ROOT / "graphs" / "photos" / "train.txt"
    imgs = []
    for path in image_set(str(listing), lambda n: listing.parent / n):
        x = read_image(path)[..., :3].astype(np.float32)
        if min(x.shape[:2]) >= 128:
            imgs.append(torch.tensor(x, device=dev).permute(2, 0, 1).contiguous())
    return imgs


def orient(t, f: int, undo: bool = False):
    """t (..., h, w) flipped along x (f & 1), along y (f & 2), then transposed (f & 4); undo:
    the inverse, the same steps in reverse order."""
    steps = [(1, lambda u: u.flip(-1)), (2, lambda u: u.flip(-2)),
             (4, lambda u: u.transpose(-1, -2))]
    for bit, step in reversed(steps) if undo else steps:
        if f & bit:
            t = step(t)
    return t


def dead_leaves(torch, imgs, rng, n=48, size=384, dev="cuda"):
    """Procedural training images: occluding discs (radii with density r^-3 between 1.5 and
    96 px, the scale-invariant dead-leaves model) in colours drawn from the training
    photographs' pixels, edges softened by a 2x supersampling."""
    out = []
    cols = torch.cat([im.reshape(3, -1)[:, ::97] for im in imgs], 1).T.cpu().numpy()
    s = 2 * size
    yy, xx = np.mgrid[0:s, 0:s]
    for _ in range(n):
        img = np.zeros((s, s, 3), np.float32)
        lo, hi = 1.5 * 2, 96.0 * 2
        for _ in range(2500):
            r = (lo ** -2 - rng.random() * (lo ** -2 - hi ** -2)) ** -0.5
            cy, cx = rng.random(2) * s
            y0, y1 = int(max(cy - r, 0)), int(min(cy + r + 1, s))
            x0, x1 = int(max(cx - r, 0)), int(min(cx + r + 1, s))
            if y0 >= y1 or x0 >= x1:
                continue
            m = (yy[y0:y1, x0:x1] - cy) ** 2 + (xx[y0:y1, x0:x1] - cx) ** 2 < r * r
            img[y0:y1, x0:x1][m] = cols[rng.integers(len(cols))]
        img = img.reshape(size, 2, size, 2, 3).mean((1, 3))
        out.append(torch.tensor(img, device=dev).permute(2, 0, 1).contiguous())
    return out


def batch(torch, imgs, rng, n=16, tile=128, dev="cuda", aug=False, leaves=None, frac=0.0,
          geo=False):
    X, R, A, B = [], [], [], []
    for _ in range(n):
        img = (leaves[rng.integers(len(leaves))] if leaves and rng.random() < frac
               else imgs[rng.integers(len(imgs))])
        h, w = img.shape[-2:]
        c = min(tile, h, w)  # an image smaller than the tile: its whole side, upscaled
        if aug and rng.random() < 0.5:  # a downscaled crop: more scales, a cleaner target
            c = min(int(tile * 2 ** rng.random()), h, w)
        y, x = rng.integers(h - c + 1), rng.integers(w - c + 1)
        t = img[:, y:y + c, x:x + c]
        if c != tile:
            t = torch.nn.functional.interpolate(t[None], size=(tile, tile), mode="bilinear",
                                                antialias=True, align_corners=False)[0]
        geo = geo or aug
        t = orient(t, int(rng.integers(8 if geo else 4)))
        if geo:
            t = torch.stack([t[int(i)] for i in rng.permutation(3)])
        t = t * float(2.0 ** rng.uniform(-2, 2))
        a = 0.5 * 65535000.0 * 10 ** (-3 * rng.random())
        b = 0.5 * 1000.0 * 10 ** (-3 * rng.random())
        std = ((a + 65535.0 * t.clamp_min(0) * b) ** 0.5) / 65535.0
        X.append(t + std * torch.randn(t.shape, device=dev))
        R.append(t)
        A.append(a)
        B.append(b)
    return (torch.stack(X), torch.stack(R), torch.tensor(A, device=dev),
            torch.tensor(B, device=dev))


def train(torch, name: str, steps: int, seed: int, dev: str, budget: float | None = None,
          log_every: int = 500, model=None, loss: str | None = None, lr: float | None = None):
    """Train one variant for `steps` (fewer if the first 50 steps say they would not fit
    `budget` seconds: the cosine schedule then spans the steps that fit). model, loss,
    lr: a model to go on from (--finetune), and the loss ("l1", "l2") and rate for it."""
    cfg = VARIANTS[name]
    if model is None:
        model = (Cnn(torch, cfg, dev, seed) if cfg.get("cnn")
                 else Cascade(torch, cfg, 4, dev, seed))
    l2 = (loss or cfg.get("loss")) == "l2"
    opt = torch.optim.Adam(model.W, lr=lr or cfg.get("lr", 2e-3), betas=(0.9, 0.999),
                           eps=1e-8)
    total = [steps]
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, total[0]) / total[0])))
    imgs = load_training(torch, dev)
    rng = np.random.default_rng(seed)
    leaves = dead_leaves(torch, imgs, rng, dev=dev) if cfg.get("leaves") else None
    t0 = time.perf_counter()
    losses = []
    step = 0
    while step < total[0]:
        if step == 100 and budget:
            torch.cuda.synchronize()
            t100 = time.perf_counter()
        if step == 300 and budget:
            torch.cuda.synchronize()
            rate = 200 / (time.perf_counter() - t100)
            fit = 300 + int((budget - (time.perf_counter() - t0)) * rate)
            if fit < total[0]:
                print(f"{name}: {fit} steps fit the budget of {budget:.0f} s", flush=True)
                total[0] = max(fit, 400)
        X, R, A, B = batch(torch, imgs, rng, n=cfg.get("n", 16), tile=cfg.get("tile", 128),
                           dev=dev, aug=cfg.get("aug", False), leaves=leaves,
                           frac=cfg.get("leaves", 0.0), geo=cfg.get("geo", False))
        loss = 0
        for out in model.outputs(X, A, B):
            loss = loss + (((out - R) ** 2) if l2 else (out - R).abs()).sum(1).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.W, 1.0)
        opt.step()
        sched.step()
        if step % log_every == 0 or step == total[0] - 1:
            losses.append((step, float(loss)))
            print(f"{name}: step {step} loss {float(loss):.5f} "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)
        step += 1
    torch.cuda.synchronize()
    return model, time.perf_counter() - t0, losses, total[0]


def ensemble(torch, model, X, a, b):
    """The mean of the 8 flips and transposes' outputs (each undone)."""
    return sum(orient(model.forward(orient(X, f), a, b), f, undo=True) for f in range(8)) / 8


def evaluate(torch, model, dev: str, ens: bool = False) -> dict:
    out = {}
    with torch.no_grad():
        for path in heldout.photos():
            clean = heldout.load_clean(path)
            for li, (level, a, b) in enumerate(heldout.LEVELS):
                noisy = heldout.add_noise(clean, a, b, heldout.seed_of(li))
                X = torch.tensor(noisy[..., :3], dtype=torch.float32, device=dev)
                y = (ensemble if ens else lambda t, m, *r: m.forward(*r))(
                    torch, model, X.permute(2, 0, 1)[None], torch.tensor([a], device=dev),
                    torch.tensor([b], device=dev))
                res = y[0].permute(1, 2, 0).double().cpu().numpy()
                out[f"{path.stem}|{level}"] = {"psnr": heldout.psnr(res, clean),
                                               "noisy": heldout.psnr(noisy, clean)}
    return out


def check_against_reference(torch, model, dev: str) -> None:
    """The PyTorch U-Net with unet-t's weights against unet-t's float64 reference on a crop
    of a held-out photo: the same network, or the evaluation would measure another."""
    from vkgraph.modules.unet_t import reference as ref

    clean = heldout.load_clean(heldout.photos()[0])[:64, :96, :3]
    a, b = heldout.LEVELS[1][1:]
    X = heldout.add_noise(clean, a, b, 1)[..., :3]
    with torch.no_grad():
        y = model.forward(torch.tensor(X, dtype=torch.float32, device=dev).permute(2, 0, 1)[None],
                          torch.tensor([a], device=dev), torch.tensor([b], device=dev))
    O = y[0].permute(1, 2, 0).double().cpu().numpy()
    Oref, _ = ref.forward(model.flat, X, np.array([a]), np.array([b]), X.shape[0], 32, 3)
    diff = float(np.abs(O - Oref).max())
    print(f"unet-t weights in PyTorch against the reference: max |diff| {diff:.2e}")
    if diff > 1e-4:
        raise SystemExit("the PyTorch U-Net is not unet-t's network")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default="base,chroma,ctx,dense,wide")
    ap.add_argument("--steps", type=int, default=6000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--budget", type=float, help="training seconds per variant at most")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--ensemble", action="store_true",
                    help="also report the mean of the 8 flips' and transposes' outputs")
    ap.add_argument("--finetune", metavar="LOSS:LR", nargs="+", default=[],
                    help="with --lut: also train the weights on --steps more steps with each "
                    "loss (l1, l2) at its rate (a cosine from it), e.g. l1:1e-4 l2:1e-4")
    ap.add_argument("--lut", type=Path, help="evaluate unet-t's weights (a .lut of width 32, "
                    "scales 3) instead of training the variants")
    args = ap.parse_args(argv)
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda"
    rows = {}
    if args.lut:
        model = Cnn(torch, VARIANTS["unetmid"], dev, args.seed)
        model.load_lut(args.lut)
        check_against_reference(torch, model, dev)
    for name in (["lut"] + args.finetune) if args.lut else args.variants.split(","):
        if args.lut and name != "lut":  # a copy of the weights, trained on
            loss, lr = name.split(":")
            model = Cnn(torch, VARIANTS["unetmid"], dev, args.seed)
            model.load_lut(args.lut)
            model, secs, losses, steps = train(torch, "unetmid", args.steps, args.seed, dev,
                                               model=model, loss=loss, lr=float(lr))
        elif args.lut:
            secs, losses, steps = 0.0, [], 0
        else:
            model, secs, losses, steps = train(torch, name, args.steps, args.seed, dev,
                                               args.budget)
        ev = evaluate(torch, model, dev)
        if args.ensemble:
            ee = evaluate(torch, model, dev, ens=True)
            print(f"{name} x8 ensemble: " + " / ".join(
                f"{np.mean([v['psnr'] for k, v in ee.items() if k.endswith('|' + lv)]):.2f}"
                for lv, _, _ in heldout.LEVELS) + " dB", flush=True)
        per = {lv: float(np.mean([v["psnr"] for k, v in ev.items() if k.endswith("|" + lv)]))
               for lv, _, _ in heldout.LEVELS}
        worst = min(v["psnr"] - v["noisy"] for v in ev.values())
        rows[name] = {"levels": per, "worst_gain": worst, "seconds": secs, "steps": steps,
                      "eval": ev,
                      "losses": losses, "params": sum(w.numel() for w in model.W)}
        print(f"{name}: " + " / ".join(f"{v:.2f}" for v in per.values())
              + f" dB, worst gain {worst:+.2f}, {secs:.0f} s", flush=True)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
    print("\n| variant | params | steps | low | mid | high | worst gain | train s |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['params']} | {r['steps']} | "
              + " | ".join(f"{v:.2f}" for v in r["levels"].values())
              + f" | {r['worst_gain']:+.2f} | {r['seconds']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
