"""Errors a user can see. Each carries one line of text; the CLI maps them to exit codes.

`GraphError` is bad input (cfg, module declarations, image/lut files, params): exit status 2.
`RuntimeFailure` is the machine failing us (device, driver, I/O): exit status 1.
Neither is ever shown with a Python traceback.
"""

from __future__ import annotations

import difflib
import re

ECHO_MAX = 200  # characters of one echoed token (a name, a value, a path) in a message
LINE_MAX = 2000  # characters of a whole message line


class VkgraphError(Exception):
    exit_code = 1

    def __init__(self, message: str, *, where: str | None = None, hint: str | None = None):
        self.message = message
        self.where = where
        self.hint = hint
        super().__init__(self.line())

    def line(self) -> str:
        text = f"{self.where}: {self.message}" if self.where else self.message
        if self.hint:
            text += f" ({self.hint})"
        return shorten(printable(text))


def printable(text: str) -> str:
    """One line of visible text: control characters (newlines, NUL, escapes from a bad input
    file echoed in a message) are shown as Python escapes."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                   for c in text)


def clip(text, limit: int = ECHO_MAX) -> str:
    """`text` (anything, shown with str) cut to about `limit` characters, saying how much is
    left out: an echoed name or value from a hostile input must not flood the terminal. The
    middle goes: a path's end (the file name) and what follows a name (": reason") stay."""
    text = str(text)
    if len(text) <= limit:
        return text
    tail = limit // 4
    head = limit - tail
    return f"{text[:head]}...({len(text) - limit} more characters)...{text[-tail:]}"


_LONG_TOKEN = re.compile(rf"\S{{{ECHO_MAX + 1},}}")


def shorten(line: str) -> str:
    """A message line with every token longer than ECHO_MAX clipped, and at most LINE_MAX
    characters in all: the last guard for messages that echo input without clip()."""
    line = _LONG_TOKEN.sub(lambda m: clip(m.group(0)), line)
    return clip(line, LINE_MAX)


class GraphError(VkgraphError):
    """Bad input: cfg line, module declaration, param value, input file. Exit status 2."""

    exit_code = 2


class RuntimeFailure(VkgraphError):
    """Device, driver or I/O failure. Exit status 1."""

    exit_code = 1


def closest(name: str, candidates) -> str | None:
    """A 'did you mean' hint for an unknown name, or None."""
    match = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.5)
    return f"did you mean '{match[0]}'?" if match else None
