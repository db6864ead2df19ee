"""Progress on stderr while long stages run, only for a person watching a terminal.

    with progress.bar("writing out.json"):               # label and elapsed time
        ...
    with progress.bar("reading logs", total=len(paths)) as bar:
        for path in paths:
            ...
            bar.advance()

rich's progress display draws the line (`et-convert: <label> <bar> <done>/<total> (<pct>%)
<elapsed>`): it redraws it in place ten times a second, fits it to the terminal's width and
erases it when the stage ends, so warnings and errors printed afterwards stay clean. This
module decides whether and when: nothing is drawn when stderr is not a terminal (pipes, tests),
when the CI variable is set, after `disable()` (the CLI's --quiet), or during the first half
second — short runs stay silent and never import rich (70 ms). An inner bar (a counted loop
inside a stage) takes the line over until it ends.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import Callable, Iterator, TextIO

DELAY_S = 0.5  # draw nothing for stages shorter than this
REFRESHES_PER_S = 10

_enabled: bool | None = None  # None: draw when stderr is a terminal
_stack: list["Bar"] = []  # open bars, innermost last; only the innermost is shown
_display = None  # rich.progress.Progress once drawing has started
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
    """One stage's line. Counting only adds here (a log reader counts every line); the display
    reads the count when it redraws (rich's own update costs 5 µs a call, 0.2 µs here)."""

    live = True  # drawn (callers may skip work done only for the progress line)

    def __init__(self, label: str, total: int | None, unit: Callable[[int], str] | None):
        self.label, self.total, self.unit = label, total, unit or str
        self.done = 0
        self.task = None  # its task in the display, once drawn

    def advance(self, count: int = 1) -> None:
        self.done += count

    def update(self, done: int) -> None:
        self.done = done


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
    """A progress line for the block, drawn from DELAY_S on; the elapsed time moves on its own."""
    stream = stream or sys.stderr
    if not _wanted(stream):
        yield _Silent()
        return
    line = Bar(label, total, unit)
    with _lock:
        outermost = not _stack
        _stack.append(line)
        if _display is not None:
            _show_only(line)
    timer = threading.Timer(DELAY_S, _start_display, (line, stream)) if outermost else None
    if timer:
        timer.daemon = True
        timer.start()
    try:
        yield line
    finally:
        if timer:
            timer.cancel()
        _close(line)


def _start_display(outermost: Bar, stream: TextIO) -> None:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    class Display(Progress):
        def get_renderables(self):  # rich's refresh thread, REFRESHES_PER_S times a second
            for line in list(_stack):
                if line.task is not None:
                    self.update(line.task, completed=line.done)
            yield from super().get_renderables()

    global _display
    display = Display(
        TextColumn("et-convert: {task.description}"), BarColumn(bar_width=20), _CountColumn(),
        TimeElapsedColumn(), console=Console(file=stream), transient=True,
        refresh_per_second=REFRESHES_PER_S,
        # No redirection: stdout may be the output (stats --json), and the Chakra writer forks
        # workers while the display runs, which must not inherit a stderr routed through it.
        redirect_stdout=False, redirect_stderr=False,
    )
    with _lock:
        if not _stack or _stack[0] is not outermost or _display is not None:
            return  # the stage ended while rich was imported
        _display = display
        for line in _stack:
            line.task = display.add_task(line.label, total=line.total, completed=line.done, unit=line.unit,
                                         visible=line is _stack[-1])
        display.start()


def _show_only(line: Bar) -> None:
    """Give the line to `line`: hide the others, add its task when it has none."""
    for other in _stack:
        if other.task is not None:
            _display.update(other.task, visible=other is line)
    if line.task is None:
        line.task = _display.add_task(line.label, total=line.total, completed=line.done, unit=line.unit)


def _close(line: Bar) -> None:
    global _display
    with _lock:
        _stack.remove(line)
        if _display is None:
            return
        if _stack:
            _display.remove_task(line.task)
            _show_only(_stack[-1])
        else:
            _display.stop()  # transient: the line is erased
            _display = None


def _count_text(done: int, total: int | None, unit: Callable[[int], str]) -> str:
    if total:
        return f"{unit(done)}/{unit(total)} ({100 * done // total}%)"
    return unit(done) if done else ""


def _CountColumn():
    """`done/total (pct%)` in the bar's unit (rich imported only once drawing starts)."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    class CountColumn(ProgressColumn):
        def render(self, task) -> Text:
            total = int(task.total) if task.total else None
            return Text(_count_text(int(task.completed), total, task.fields["unit"]))

    return CountColumn()


def mib(count: int) -> str:
    """A byte count for a progress line."""
    return f"{count / (1 << 20):.0f} MiB"
