"""How et-convert reports trouble: one error type for bad input, counted warnings.

Errors are raised as `InputError` and shown by the CLI as one line, exit code 2:
    et-convert: error: runs/w.txt:41: expected 12 columns (...), found 5
Warnings are collected per kind and printed once each with a count:
    et-convert: warning: w.txt: skipped 128 collectives of size 0 (...; first at line 9)
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field


class InputError(Exception):
    """Input that cannot be used. `where` is "file:line", "file: byte N", or just "file"."""

    def __init__(self, where: str | None, message: str):
        super().__init__(f"{where}: {message}" if where else message)
        self.where = where
        self.message = message

    def __reduce__(self):
        # raised in a worker process (--jobs, --cluster), it must arrive whole in the parent
        return type(self), (self.where, self.message)


class InterruptedAfterWriting(KeyboardInterrupt):
    """Ctrl-C came while a finished output was being moved into place (`writers/atomic.py`): it
    was let finish, so `written` (the output) is the new one when the interruption is raised."""

    def __init__(self, written: str):
        super().__init__(written)
        self.written = written


class UsageError(Exception):
    """Options that do not fit together (also exit code 2)."""


def at(path: str, line: int | None = None, col: int | None = None) -> str:
    """Format a source location: `file`, `file:line` or `file:line:col`."""
    if line is None:
        return path
    return f"{path}:{line}" if col is None else f"{path}:{line}:{col}"


@dataclass
class _Kind:
    template: str  # str.format template with {count}, {first}
    count: int = 0
    first: str = ""


@dataclass
class Diagnostics:
    """Collects warnings by kind so each kind is reported once with a count.

    Besides warnings: notes (only with -v), the trace's assumptions (only with -v, except those
    that change numbers, which are warnings) and results (one-line answers such as the scheduled
    iteration time, shown unless -q).
    """

    kinds: dict[str, _Kind] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # shown only with -v
    assumptions: list[str] = field(default_factory=list)  # the trace's, shown only with -v
    results: list[str] = field(default_factory=list)
    number_changing: set[str] = field(default_factory=set)  # assumptions already warned about

    def warn(self, kind: str, template: str, first: str = "", count: int = 1) -> None:
        """Count one occurrence (or `count` occurrences) of warning `kind`.

        `template` may use {count} and {first} (the location of the first occurrence),
        e.g. "w.txt: skipped {count} collectives of size 0 (first at line {first})".
        """
        entry = self.kinds.get(kind)
        if entry is None:
            entry = self.kinds[kind] = _Kind(template, 0, first)
        entry.count += count

    def note(self, message: str) -> None:
        self.notes.append(message)

    def merge(self, other: "Diagnostics") -> None:
        """Add what another Diagnostics collected (a worker's, for one file or rank), as if said here."""
        for kind, entry in other.kinds.items():
            self.warn(kind, entry.template, entry.first, entry.count)
        self.notes.extend(other.notes)

    def warn_assumption(self, sentence: str, where: str) -> None:
        """Warn about an assumption that changes numbers (the caller also records it with
        `trace.assume(sentence)`); -v does not list it a second time."""
        self.number_changing.add(sentence)
        self.warn(f"assumption:{sentence}", f"{where}: assumed: {sentence}")

    def list_assumptions(self, sentences: list[str]) -> None:
        """The trace's assumptions, for -v. The list itself is kept: later ones show too."""
        self.assumptions = sentences

    def result(self, message: str) -> None:
        self.results.append(message)

    def messages(self) -> list[str]:
        # Plain replacement, not str.format: file names may contain braces.
        return [
            k.template.replace("{count}", str(k.count)).replace("{first}", k.first)
            for k in self.kinds.values()
        ]

    def emit(self, stream=None, verbose: bool = False) -> None:
        stream = stream or sys.stderr
        for message in self.messages():
            print(f"et-convert: warning: {message}", file=stream)
        if verbose:
            for message in self.notes:
                print(f"et-convert: {message}", file=stream)
            for sentence in self.assumptions:
                if sentence not in self.number_changing:
                    print(f"et-convert: assumed: {sentence}", file=stream)
        for message in self.results:
            print(f"et-convert: {message}", file=stream)
