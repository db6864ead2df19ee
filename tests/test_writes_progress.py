"""The progress line: drawn only for a terminal, erased when its stage ends, silenced by --quiet."""

from __future__ import annotations

import io
import time

import pytest

from converters import progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def default_switch(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    progress.enable(None)
    yield
    progress.enable(None)


def test_a_counted_bar_on_a_terminal_is_drawn_and_then_erased(monkeypatch):
    monkeypatch.setattr(progress, "DELAY_S", 0)
    monkeypatch.setattr(progress, "REDRAW_S", 0)
    screen = Terminal()
    with progress.bar("writing ranks", total=4, stream=screen) as bar:
        for _ in range(3):
            bar.advance()
        assert screen.getvalue().rsplit("\r\x1b[K", 1)[1].startswith("et-convert: writing ranks 3/4 (75%) · ")
    assert screen.getvalue().endswith("\r\x1b[K")  # the line is gone: what follows starts clean


def test_short_stages_draw_nothing():
    screen = Terminal()
    with progress.bar("reading", total=10, stream=screen) as bar:
        bar.advance(10)
    assert screen.getvalue() == ""


def test_nothing_is_drawn_off_a_terminal_under_ci_or_when_quiet(monkeypatch):
    monkeypatch.setattr(progress, "DELAY_S", 0)
    monkeypatch.setattr(progress, "REDRAW_S", 0)
    pipe = io.StringIO()
    with progress.bar("reading", total=2, stream=pipe) as bar:
        bar.advance()
        assert not bar.live
    assert pipe.getvalue() == ""
    monkeypatch.setenv("CI", "true")
    screen = Terminal()
    with progress.bar("reading", total=2, stream=screen) as bar:
        bar.advance()
    monkeypatch.delenv("CI")
    progress.disable()
    with progress.bar("reading", total=2, stream=screen) as bar:
        bar.advance()
    assert screen.getvalue() == ""


def test_an_inner_bar_takes_the_line_over(monkeypatch):
    monkeypatch.setattr(progress, "DELAY_S", 0)
    monkeypatch.setattr(progress, "REDRAW_S", 0.001)
    screen = Terminal()
    with progress.bar("writing out", stream=screen):
        with progress.bar("writing ranks", total=2, stream=screen) as inner:
            mark = len(screen.getvalue())
            inner.advance()
            time.sleep(0.02)  # the outer line's timer keeps ticking meanwhile
            drawn = screen.getvalue()[mark:]
    assert "writing ranks 1/2" in drawn and "writing out" not in drawn


def test_sizes_read_as_mebibytes():
    assert progress.mib(3 << 20) == "3 MiB"
