"""Write graphs/images/chelsea-noisy.dng: a synthetic camera raw file (the input of
graphs/denoise-raw.cfg and the README's raw example), deterministic.

scikit-image's chelsea.png (a held-out photograph), decoded to linear light, seen through the
made-up camera of vkgraph/apps/dng.py (its colour matrix and white balance), sampled on an RGGB
Bayer mosaic, with cnngenin's noise model on the mosaic normalised to [0, 1] (a = 1000,
b = 20: a full-frame camera at about ISO 6400), as 14-bit counts above a black level of 512;
the DNG says ISO 6400.

    python graphs/images/make_raw.py [--out DIR]      # needs tifffile (the dev extra)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

NAME, SPEC = "chelsea-noisy", "pkg:skimage/data/chelsea.png"
NOISE_A, NOISE_B, SEED, ISO = 1000.0, 20.0, 6, 6400
BLACK, WHITE = 512, 16383


def main(argv: list[str] | None = None) -> None:
    here = Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=here)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(here.parent.parent))  # the repository, when run as a script
    sys.path.insert(0, str(here))
    from make_scene import add_noise

    from vkgraph.apps import dng
    from vkgraph.pipeline.datasets import package_file
    from vkgraph.pipeline.formats import read_image

    photo = read_image(package_file(SPEC))[..., :3]
    mosaic = dng.camera_mosaic(photo, dng.BAYER["RGGB"])
    noisy = add_noise(mosaic, NOISE_A, NOISE_B, SEED)
    path = args.out / f"{NAME}.dng"
    dng.write_dng(path, dng.mosaic_counts(noisy, BLACK, WHITE), dng.BAYER["RGGB"], BLACK,
                  WHITE, dng.CAMERA_MATRIX, dng.CAMERA_NEUTRAL, iso=ISO)
    print(f"{path}: {SPEC} through vkgraph/apps/dng.py's camera, RGGB, noise a {NOISE_A:g} "
          f"b {NOISE_B:g} seed {SEED}, ISO {ISO}")


if __name__ == "__main__":
    main()
