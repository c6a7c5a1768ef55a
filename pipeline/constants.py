"""Constants that the command line needs before it starts its work (and is_raw, a test on
them), in a module without numpy: `vkgraph denoise` starts the device as soon as its
arguments are parsed, and importing numpy first (40-80 ms) would make the device's start
wait for it."""

from pathlib import Path

# what a param value must fit on the device: ints are GLSL `int`, floats are `float`
INT32 = (-2**31, 2**31 - 1)
FLT_MAX = 3.4028234663852886e38

# the image files pipeline/formats.py writes, by extension
IMAGE_WRITERS = {".png": "png", ".jpg": "jpg", ".jpeg": "jpg", ".tif": "tiff", ".tiff": "tiff",
                 ".webp": "webp", ".exr": "exr", ".pfm": "pfm"}
JPG_QUALITY = 95  # JPEG/WebP output of an input without a JPEG quality

# vkgraph sweep --metric: what ranks the trials, and which way
METRICS = {"loss": "min", "best_loss": "min", "psnr": "max"}

# the camera raw files pipeline/raw.py reads (through LibRaw), by extension
RAW_EXTENSIONS = {".dng", ".cr2", ".cr3", ".crw", ".nef", ".nrw", ".arw", ".srf", ".sr2",
                  ".raf", ".orf", ".rw2", ".pef", ".srw", ".3fr", ".fff", ".iiq", ".mos",
                  ".mef", ".mrw", ".x3f", ".erf", ".kdc", ".dcr", ".rwl", ".raw"}


def is_raw(path) -> bool:
    """Does the file name say camera raw? (The CLI routes such files through read_raw.)"""
    return Path(path).suffix.lower() in RAW_EXTENSIONS
