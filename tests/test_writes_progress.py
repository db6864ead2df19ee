"""The progress line (rich's display): drawn only for a terminal and only for stages longer than
half a second, showing the innermost stage, erased when its stage ends, silenced by --quiet."""

from __future__ import annotations

import io
import re
import sys
import time

import pytest

from converters import progress

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def default_switch(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    progress.enable(None)
    yield
    progress.enable(None)


@pytest.fixture
def at_once(monkeypatch):
    monkeypatch.setattr(progress, "DELAY_S", 0)


def last_frame(screen: Terminal) -> str:
    """The line as the terminal shows it now (without colours)."""
    frames = [f for f in ANSI.sub("", screen.getvalue()).split("\r") if f.strip()]
    return frames[-1].strip() if frames else ""


def shown(screen: Terminal, text: str) -> str:
    """Wait (up to 5 s) for the display's timer to draw `text`; the frame it is in."""
    deadline = time.monotonic() + 5
    while text not in last_frame(screen) and time.monotonic() < deadline:
        time.sleep(0.02)
    return last_frame(screen)


def test_a_counted_bar_on_a_terminal_is_drawn_and_then_erased(at_once):
    screen = Terminal()
    with progress.bar("writing ranks", total=4, stream=screen) as bar:
        for _ in range(3):
            bar.advance()
        frame = shown(screen, "3/4")
    assert frame.startswith("et-convert: writing ranks ") and re.search(r" 3/4 \(75%\) 0:00:0\d$", frame), frame
    assert screen.getvalue().endswith("\x1b[2K")  # the line is gone: what follows starts clean


def test_sizes_are_counted_in_the_bars_unit(at_once):
    screen = Terminal()
    with progress.bar("reading logs", total=8 << 20, unit=progress.mib, stream=screen) as bar:
        bar.update(3 << 20)
        assert " 3 MiB/8 MiB (37%) " in shown(screen, "3 MiB")


def test_short_stages_draw_nothing():
    screen = Terminal()
    with progress.bar("reading", total=10, stream=screen) as bar:
        bar.advance(10)
    time.sleep(progress.DELAY_S + 0.2)  # a timer left running would draw now
    assert screen.getvalue() == ""


def test_nothing_is_drawn_off_a_terminal_under_ci_or_when_quiet(monkeypatch, at_once):
    pipe = io.StringIO()
    with progress.bar("reading", total=2, stream=pipe) as bar:
        bar.advance()
        assert not bar.live
        time.sleep(0.2)
    assert pipe.getvalue() == ""
    monkeypatch.setenv("CI", "true")
    screen = Terminal()
    with progress.bar("reading", total=2, stream=screen) as bar:
        bar.advance()
        time.sleep(0.2)
    monkeypatch.delenv("CI")
    progress.disable()
    with progress.bar("reading", total=2, stream=screen) as bar:
        bar.advance()
        time.sleep(0.2)
    assert screen.getvalue() == ""


def test_an_inner_bar_takes_the_line_over_and_gives_it_back(at_once):
    screen = Terminal()
    with progress.bar("writing out", stream=screen):
        assert "writing out" in shown(screen, "writing out")
        with progress.bar("writing ranks", total=2, stream=screen) as inner:
            inner.advance()
            frame = shown(screen, "1/2")
        assert "writing ranks" in frame and "writing out" not in frame
        time.sleep(0.3)
        assert "writing out" in last_frame(screen) and "writing ranks" not in last_frame(screen)


def test_stdout_and_stderr_are_left_alone_while_the_line_is_drawn(at_once, capsys):
    screen = Terminal()
    with progress.bar("writing out", stream=screen):
        shown(screen, "writing out")
        sys.stdout.write('{"iteration_time_ns": 1}\n')  # stats --json > file while stderr shows progress
        sys.stderr.write("a forked worker's last words\n")  # not routed through the display's lock
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ('{"iteration_time_ns": 1}\n', "a forked worker's last words\n")
    assert "iteration_time_ns" not in screen.getvalue() and "last words" not in screen.getvalue()


def test_sizes_read_as_mebibytes():
    assert progress.mib(3 << 20) == "3 MiB"
