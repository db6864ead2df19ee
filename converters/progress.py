"""Progress on stderr while long stages run, only for a person watching a terminal.

    with progress.bar("writing out.json"):               # label and elapsed time
        ...
    with progress.bar("reading logs", total=len(paths)) as bar:
        for path in paths:
            ...
            bar.advance()

One line, redrawn in place at most ten times a second and erased when the stage ends, so
warnings and errors printed afterwards stay clean. Nothing is drawn when stderr is not a
terminal (pipes, tests), when the CI variable is set, after `disable()` (the CLI's --quiet),
or during the first half second (short runs stay silent). An inner bar (a counted loop inside a
stage) takes the line over until it ends.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from typing import Callable, Iterator, TextIO

DELAY_S = 0.5  # draw nothing for stages shorter than this
REDRAW_S = 0.1

_enabled: bool | None = None  # None: draw when stderr is a terminal
_stack: list["Bar"] = []
_lock = threading.Lock()


def disable() -> None:
    """No progress at all (the CLI's --quiet)."""
    global _enabled
    _enabled = False


def enable(on: bool | None = None) -> None:
    """Force progress on or off; None restores the default (only on a terminal, not under CI)."""
    global _enabled
    _enabled = on


def _wanted(stream: TextIO) -> bool:
    if _enabled is not None:
        return _enabled
    try:
        return stream.isatty() and not os.environ.get("CI")
    except (AttributeError, ValueError):
        return False


class Bar:
    """One stage's line: `et-convert: <label> <done>/<total> (<pct>%) · <seconds> s`."""

    live = True  # drawn (callers may skip work done only for the progress line)

    def __init__(self, label: str, total: int | None, unit: Callable[[int], str] | None, stream: TextIO):
        self.label, self.total, self.unit, self.stream = label, total, unit or str, stream
        self.done = 0
        self.started = time.monotonic()
        self.last_drawn = 0.0
        self.drawn = False

    def advance(self, count: int = 1) -> None:
        self.done += count
        self._maybe_draw()

    def update(self, done: int) -> None:
        self.done = done
        self._maybe_draw()

    def _maybe_draw(self) -> None:
        now = time.monotonic()
        if now - self.last_drawn >= REDRAW_S and now - self.started >= DELAY_S:
            self.draw(now)

    def text(self, now: float) -> str:
        parts = [self.label]
        if self.total:
            parts.append(f"{self.unit(self.done)}/{self.unit(self.total)} ({100 * self.done // self.total}%)")
        elif self.done:
            parts.append(self.unit(self.done))
        return f"et-convert: {' '.join(parts)} · {now - self.started:.1f} s"

    def draw(self, now: float) -> None:
        with _lock:
            if not _stack or _stack[-1] is not self:
                return
            self.stream.write("\r\x1b[K" + self.text(now))
            self.stream.flush()
            self.drawn = True
            self.last_drawn = now

    def erase(self) -> None:
        with _lock:
            if self.drawn:
                self.stream.write("\r\x1b[K")
                self.stream.flush()


class _Silent:
    """What `bar` gives when nothing is drawn: the same calls, doing nothing."""

    live = False

    def advance(self, count: int = 1) -> None:
        pass

    def update(self, done: int) -> None:
        pass


@contextlib.contextmanager
def bar(label: str, total: int | None = None, unit: Callable[[int], str] | None = None,
        stream: TextIO | None = None) -> Iterator[Bar | _Silent]:
    """A progress line for the block; a timer redraws it so the elapsed time moves on its own."""
    stream = stream or sys.stderr
    if not _wanted(stream):
        yield _Silent()
        return
    line = Bar(label, total, unit, stream)
    with _lock:
        outer = _stack[-1] if _stack else None
        _stack.append(line)
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(REDRAW_S if line.drawn else DELAY_S):
            line.draw(time.monotonic())

    timer = threading.Thread(target=tick, name="et-convert-progress", daemon=True)
    timer.start()
    try:
        yield line
    finally:
        stop.set()
        timer.join()
        line.erase()
        with _lock:
            _stack.remove(line)
        if outer is not None:
            outer.drawn = outer.drawn or line.drawn


def mib(count: int) -> str:
    """A byte count for a progress line."""
    return f"{count / (1 << 20):.0f} MiB"
