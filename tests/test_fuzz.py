"""Fuzzing `vkgraph cli` (bad input never crashes): random and mutated cfg text, PFM,
PNG/EXR and `.lut` bytes. Every run must end in a valid run (exit 0, the output readable) or
a clean error (exit 2, exactly one `vkgraph: error:` line), never a traceback or an internal
error, and within a time bound.

The runs call vkgraph.cli.main.main in this process (much faster than a subprocess per example).
Examples are derandomized for CI (the same inputs every run); for a deeper search set
VKGRAPH_FUZZ_EXAMPLES=500 (then hypothesis picks new random inputs each time).
"""

from __future__ import annotations

import functools
import os
import struct
import tempfile
from pathlib import Path

import imageio.v3 as iio
import numpy as np
from conftest import TINY_KPN_LINES, vkgraph
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vkgraph.pipeline import formats as F

EXAMPLES = int(os.environ.get("VKGRAPH_FUZZ_EXAMPLES", "0"))
FUZZ = settings(max_examples=EXAMPLES or 100, deadline=None, derandomize=not EXAMPLES,
                database=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much])
LIMIT_S = 60  # one run; lavapipe runs a valid fuzzed graph in well under a second


run = functools.partial(vkgraph, quiet=True, limit_s=LIMIT_S)  # (rc, stdout, stderr)


OUTCOMES: dict[int, int] = {}  # exit status -> count (VKGRAPH_FUZZ_EXAMPLES runs print it)


def check(res, what: str) -> bool:
    """A clean outcome; True for a valid run."""
    rc, out, err = res
    OUTCOMES[rc] = OUTCOMES.get(rc, 0) + 1
    text = out + err
    assert "Traceback" not in text and "internal error" not in text, f"{what}:\n{text}"
    assert rc in (0, 2), f"{what}: exit {rc}\n{text}"
    if rc == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("vkgraph: error: "), f"{what}:\n{err}"
    return rc == 0


# ------------------------------------------------------------------------------------------
# byte mutations

SPECIAL = [b"0", b"-1", b"1", b"4294967297", b"99999999999", b"nan", b"inf", b"1e39", b" ",
           b"\n", b"\r\n", b"\x00", b"\xff", b"\xff\xff\xff\x7f", b"\x00\x00\xc0\x7f",
           b"\x00\x00\x80\x7f"]


@st.composite
def mutated(draw, seeds: list[bytes], head: int = 32) -> bytes:
    """A seed file with 1-4 edits: bit flips, byte and token insertions, deletions, cuts,
    float splices; half of them aimed at the first `head` bytes (the header)."""
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 4))):
        end = len(data) if draw(st.booleans()) else min(len(data), head)
        pos = draw(st.integers(0, max(0, end - 1)))
        op = draw(st.sampled_from(["flip", "byte", "insert", "delete", "cut", "float"]))
        if op == "flip" and data:
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "byte" and data:
            data[pos] = draw(st.integers(0, 255))
        elif op == "insert":
            data[pos:pos] = draw(st.sampled_from(SPECIAL) | st.binary(min_size=1, max_size=6))
        elif op == "delete":
            del data[pos:pos + draw(st.integers(1, 8))]
        elif op == "cut":
            del data[pos:]
        elif op == "float":
            value = draw(st.sampled_from([np.nan, np.inf, -np.inf, 3e38, -0.0, 1e-45, 65504.0,
                                          65536.0]))
            data[pos:pos + 4] = struct.pack("<f", value)
    return bytes(data)


def files(seeds: list[bytes], head: int = 32):
    return st.one_of(st.binary(max_size=300), mutated(seeds, head))


def image(ht: int, wd: int, c: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((ht, wd, c), dtype=np.float32)


def pfm_seeds() -> list[bytes]:
    big = F.pfm_header(3, 2, 3).replace(b"-1.0", b"01.0")  # big-endian
    return [F.pfm_header(5, 3, 3) + image(3, 5, 3).astype("<f4").tobytes(),
            F.pfm_header(4, 4, 1) + image(4, 4, 1).astype("<f4").tobytes(),
            b"PF\n2 2\n-1\n" + image(2, 2, 3).astype("<f4").tobytes(),
            big + image(2, 3, 3).astype(">f4").tobytes()]


def lut_seeds() -> list[bytes]:
    seeds = [F.lut_bytes(image(2, 8, 1).astype(np.float16), 1, "f16", 8, 2, ssbo=True,
                         text="lut contains weights for\nsomething"),
             F.lut_bytes(image(2, 3, 4), 4, "f32", 3, 2),
             F.lut_bytes((image(3, 2, 2) * 255).astype(np.uint8), 2, "ui8", 2, 3)]
    return [b"".join(bytes(p) for p in parts) for parts in seeds]


def png_seeds() -> list[bytes]:
    img8 = (image(3, 4, 3) * 255).astype(np.uint8)
    return [iio.imwrite("<bytes>", img8, extension=".png"),
            iio.imwrite("<bytes>", (image(4, 2, 1)[:, :, 0] * 65535).astype(np.uint16),
                        extension=".png"),
            iio.imwrite("<bytes>", (image(2, 3, 4) * 255).astype(np.uint8), extension=".png")]


def exr_seeds() -> list[bytes]:
    return [b"".join(bytes(p) for p in F.exr_bytes(image(3, 4, 3), True)),
            b"".join(bytes(p) for p in F.exr_bytes(image(2, 2, 4), False))]


IO_GRAPH = """frames:1
module:{src}:main
module:{dst}:main
connect:{src}:main:output:{dst}:main:input
param:{src}:main:filename:{name}
param:{dst}:main:filename:out
"""


def io_run(raw: bytes, src: str, dst: str, name: str) -> tuple[bool, Path]:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / name).write_bytes(raw)
        (d / "g.cfg").write_text(IO_GRAPH.format(src=src, dst=dst, name=name))
        valid = check(run(d, "-g", "g.cfg"), f"{src} on {raw[:64]!r}")
        if valid:
            ext = "lut" if dst == "o-lut" else "pfm"
            out = d / f"out.{ext}"
            if ext == "pfm":
                assert np.isfinite(F.read_pfm(out)).all()
            else:
                F.read_lut(out, finite=True)
        return valid


@FUZZ
@given(raw=files(pfm_seeds()))
def test_fuzz_pfm(raw):
    io_run(raw, "i-pfm", "o-pfm", "in.pfm")


@FUZZ
@given(raw=files(lut_seeds()))
def test_fuzz_lut(raw):
    io_run(raw, "i-lut", "o-lut", "in.lut")


@FUZZ
@given(raw=files(png_seeds(), head=48), ext=st.sampled_from(["png", "png", "exr"]))
def test_fuzz_png_and_exr(raw, ext):
    io_run(raw, "i-img", "o-pfm", f"in.{ext}")


@FUZZ
@given(raw=mutated(exr_seeds(), head=320))
def test_fuzz_exr(raw):
    io_run(raw, "i-img", "o-pfm", "in.exr")


def test_fuzz_seeds_run():
    """The unmutated seeds are valid files: the fuzzers start from working runs."""
    for raw in pfm_seeds():
        assert io_run(raw, "i-pfm", "o-pfm", "in.pfm")
    for raw in lut_seeds():
        assert io_run(raw, "i-lut", "o-lut", "in.lut")
    for raw in png_seeds():
        assert io_run(raw, "i-img", "o-pfm", "in.png")
    for raw in exr_seeds():
        assert io_run(raw, "i-img", "o-pfm", "in.exr")


# ------------------------------------------------------------------------------------------
# cfg text

KPN = "frames:3\n" + TINY_KPN_LINES
ACCUM = """frames:3
module:i-pfm:main
module:exposure:01
module:accum:01
module:display:main
connect:i-pfm:main:output:exposure:01:input
connect:exposure:01:output:accum:01:input
feedback:accum:01:output:accum:01:back
connect:accum:01:output:display:main:input
param:exposure:01:exposure:1.5
keyframe:2:exposure:01:exposure:0:1:-1
param:accum:01:mode:1
param:i-pfm:main:filename:x.pfm"""
LUT = """frames:1
module:i-lut:w
module:kpn:01
module:i-pfm:main
module:display:main
connect:i-pfm:main:output:kpn:01:input
connect:i-lut:w:output:kpn:01:w
connect:kpn:01:output:display:main:input
param:i-lut:w:filename:w.lut
param:i-pfm:main:filename:x.pfm
param:kpn:01:levels:1"""
BASES = [KPN.splitlines(), ACCUM.splitlines(), LUT.splitlines()]
WORDS = sorted({tok for base in BASES for line in base for tok in line.split(":")}
               | {"feedback", "paramsub", "keyframE", "fps", "%04d", "", " ", "-1", "1e9",
                  "nan", "inf", "0x10", "display", "o-jpg", "o-exr", "9999", "w.lut",
                  "x.pfm", "/", "..", "ééé", "a" * 9})
TOKEN = st.one_of(st.sampled_from(WORDS), st.integers(-3, 20).map(str),
                  st.text(max_size=10))


@st.composite
def cfg_text(draw) -> str:
    lines = list(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["value", "value", "token", "token", "drop", "dup", "swap",
                                   "insert", "cut", "chars"]))
        i = draw(st.integers(0, len(lines) - 1)) if lines else 0
        if not lines:
            lines.append(draw(TOKEN))
        elif op == "value":  # a plausible value: more of these runs get to the device
            fields = lines[i].split(":")
            fields[-1] = draw(st.sampled_from(["0", "1", "2", "3", "-1", "0.5", "1e-3", "4",
                                               "12", "x.pfm", "w.lut", "out"]))
            lines[i] = ":".join(fields)
        elif op == "token":
            fields = lines[i].split(":")
            fields[draw(st.integers(0, len(fields) - 1))] = draw(TOKEN)
            if draw(st.booleans()) and len(fields) > 1:
                fields.insert(draw(st.integers(0, len(fields))), draw(TOKEN))
            lines[i] = ":".join(fields)
        elif op == "drop":
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "insert":
            lines.insert(i, ":".join(draw(st.lists(TOKEN, min_size=1, max_size=8))))
        elif op == "cut":
            lines[i] = lines[i][:draw(st.integers(0, len(lines[i])))]
        else:
            line = lines[i]
            k = draw(st.integers(0, len(line)))
            lines[i] = line[:k] + draw(st.text(max_size=4)) + line[k:]
    return "\n".join(lines) + draw(st.sampled_from(["", "\n", "\r\n", "\n\n"]))


def cfg_run(raw: bytes) -> bool:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        yy, xx = np.mgrid[0:12, 0:12]
        F.write_pfm(d / "x.pfm", np.stack([xx / 12, yy / 12, xx * yy / 144], -1)
                    .astype(np.float32))
        F.write_lut(d / "w.lut", (image(448, 64, 1, 3)[:, :, 0] - 0.5).astype(np.float16)
                    .reshape(-1) * 0.1, 1, "f16", 64, 448, ssbo=True)
        (d / "g.cfg").write_bytes(raw)
        return check(run(d, "-g", "g.cfg", "--frames", "2", "--last-frame-only", "--format",
                         "o-pfm"), f"cfg {raw!r}")


@FUZZ
@given(text=cfg_text())
def test_fuzz_cfg(text):
    cfg_run(text.encode("utf-8", "surrogatepass"))


@FUZZ
@given(raw=st.binary(max_size=200) | st.text(max_size=200).map(
    lambda t: t.encode("utf-8", "surrogatepass")))
def test_fuzz_cfg_random(raw):
    cfg_run(raw)


def test_fuzz_cfg_bases_run():
    for base in BASES:
        assert cfg_run("\n".join(base).encode())


# ------------------------------------------------------------------------------------------
# checkpoint files (--resume)

@functools.cache
def checkpoint_seed() -> bytes:
    """A real checkpoint of the ACCUM graph after 1 of its 3 frames (made on first use)."""
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        F.write_pfm(d / "x.pfm", image(6, 5, 3))
        (d / "g.cfg").write_text(ACCUM)
        assert check(run(d, "-g", "g.cfg", "--frames", "1", "--checkpoint", "c.npz"), "seed")
        return (d / "c.npz").read_bytes()


@FUZZ
@given(raw=st.one_of(st.binary(max_size=300), st.deferred(
    lambda: mutated([checkpoint_seed()], head=400))))
def test_fuzz_checkpoint(raw):
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        F.write_pfm(d / "x.pfm", image(6, 5, 3))
        (d / "g.cfg").write_text(ACCUM)
        (d / "c.npz").write_bytes(raw)
        check(run(d, "-g", "g.cfg", "--last-frame-only", "--format", "o-pfm", "--resume",
                  "c.npz"), f"checkpoint {raw[:64]!r}")


def test_fuzz_checkpoint_seed_resumes():
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        F.write_pfm(d / "x.pfm", image(6, 5, 3))
        (d / "g.cfg").write_text(ACCUM)
        (d / "c.npz").write_bytes(checkpoint_seed())
        assert check(run(d, "-g", "g.cfg", "--resume", "c.npz"), "seed")
