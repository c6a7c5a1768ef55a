"""What the subcommands of `vkgraph` share (cli/main.py and gui, gradcheck, denoise, sweep):
the usage error, argument types, the graph's session, the device, the signals. Kept apart
from main.py, which imports the subcommands, so that they do not import main back."""

from __future__ import annotations

import argparse
import signal
import threading

from vkgraph.pipeline.constants import INT32
from vkgraph.pipeline.errors import GraphError, clip


class UsageError(GraphError):
    pass


def integer(lo: int, hi: int = INT32[1]):
    """An argparse type: an integer in lo..hi (hi: what a GLSL int holds)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"expected an integer {lo}..{hi}, got "
                                             f"'{clip(text, 40)}'")
        return value
    return parse


def load_session(args):
    """The session of -g (vkgraph.Session, the Python API) and a function that applies the
    --config lines to its graph."""
    from vkgraph.api import Session, graph_path

    session = Session.load(graph_path(args.graph), lenient=args.lenient, host=False)
    return session, lambda: session.apply(args.config, "--config", args.lenient)


def open_device(args, surface=None):
    """The device of --device / --device-id; with a window `surface`, one that can show
    images in it (pipeline/vk/display.py)."""
    from vkgraph.pipeline.vk import Device

    return Device.open(args.device, args.device_id, surface=surface)


class StopSignals:
    """Ctrl-C and SIGTERM during a run: the first one asks the frame loop to stop after the
    current frame (sinks and checkpoint are written, exit 130); a second one stops at once.
    Installed by cmd_cli only (and only in the main thread); the old handlers come back on
    exit."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.signum = None
        self.old = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for s in self.SIGNALS:
                self.old[s] = signal.signal(s, self._handler)
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self.old.items():
            signal.signal(s, handler)
        self.old.clear()

    def _handler(self, signum, frame) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum  # no logging here: the handler may run inside a log call

    def __call__(self) -> bool:
        return self.signum is not None
