"""Denoise numpy images with kpn and a `.lut` of kpn-t weights, on one device.

    den = Denoiser(device, "graphs/weights/kpn-photo.lut")
    out = den(noisy, a, b)        # (h, w, 3) float32, linear in, linear out

The graph is i-array (the image) and i-lut (the weights) -> kpn -> o-array (host modules,
pipeline/hostmods). One build per image size, kept and reused for later images of that size:
the weights and kernels stay on the device and only the image and the noise params are
uploaded again. (a, b) is the image's noise profile in cnngenin's units, std(x) =
sqrt(a + 65535 x b) / 65535; it is always handed to kpn (`noise a`, `noise b`), and weights
that do not use it ignore it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .cfg import apply_line
from .errors import GraphError
from .formats import lut_info, read_lut
from .graph import Graph
from .registry import DEFAULT_DIR, Registry
from .runner import Build

HOST_MODULES = Path(__file__).resolve().parent / "hostmods"
SOFTMAX = "softmax kernel weight activation"  # kpn-t's .lut text names its tap activation


def weights_apply(text: str | None) -> int:
    """kpn's `apply` for weights whose .lut text is `text` (kpn-t records it; vkdt's own
    weights and text-less .luts are plain, 0)."""
    return 1 if text and SOFTMAX in text else 0


class Denoiser:
    """kpn with fixed weights on one device; call it with (image, a, b)."""

    def __init__(self, device, weights: str | Path, levels: int = 4):
        self.device = device
        self.weights = Path(weights)
        if not self.weights.is_file():
            raise GraphError(f"weights '{self.weights}' do not exist")
        lut_info(self.weights)  # a bad file is an error now, not at the first image
        self.apply = weights_apply(read_lut(self.weights)[2])
        self.levels = levels
        self.registry = Registry([DEFAULT_DIR, HOST_MODULES])
        self.builds: dict[tuple[int, int], tuple[Build, Graph]] = {}

    def _build(self, image: np.ndarray) -> tuple[Build, Graph]:
        ht, wd = image.shape[:2]
        key = (wd, ht)
        if key not in self.builds:
            g = Graph(self.registry)
            g.add_module("i-array", "main").data["image"] = image
            for line in ("module:i-lut:w", f"param:i-lut:w:filename:{self.weights.resolve()}",
                         "module:kpn:01", f"param:kpn:01:levels:{self.levels}",
                         f"param:kpn:01:apply:{self.apply}", "module:o-array:main",
                         "connect:i-array:main:output:kpn:01:input",
                         "connect:i-lut:w:output:kpn:01:w",
                         "connect:kpn:01:output:o-array:main:input"):
                apply_line(g, line, "denoise")
            self.builds[key] = (Build(g, self.device), g)
        return self.builds[key]

    def __call__(self, image: np.ndarray, a: float, b: float) -> np.ndarray:
        """The denoised rgb (h, w, 3) float32 of a linear float image (h, w, >= 3 or grey)."""
        image = np.asarray(image, np.float32)
        if image.ndim == 2:
            image = image[:, :, None]
        if image.ndim != 3 or min(image.shape) < 1:
            raise GraphError(f"expected an image (h, w, channels), got shape {image.shape}")
        build, g = self._build(image)
        g.modules[("i-array", "main")].data["image"] = image
        for name, value in (("noise a", a), ("noise b", b)):
            apply_line(g, f"param:kpn:01:{name}:{float(value)!r}", "denoise")
        build.run_frame(0)  # frame 0: the sources upload again, the params if they changed
        return np.ascontiguousarray(g.modules[("o-array", "main")].data.pop("image")[..., :3])
