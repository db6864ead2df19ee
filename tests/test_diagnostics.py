"""What `Diagnostics.emit` prints: warnings, -v notes and assumptions, results."""

from __future__ import annotations

import io

from converters.diagnostics import Diagnostics

ALL_GATHER = "ALL_GATHER sizes are the per-rank input: the gathered bytes divided by the group size."
LAYOUT = "Rank layout is Megatron's (tp fastest)."


def emitted(diagnostics: Diagnostics, verbose: bool) -> list[str]:
    stream = io.StringIO()
    diagnostics.emit(stream, verbose=verbose)
    return stream.getvalue().splitlines()


def filled() -> Diagnostics:
    diagnostics = Diagnostics()
    diagnostics.note("reading w.txt as simai")
    assumptions = [ALL_GATHER, LAYOUT]
    diagnostics.list_assumptions(assumptions)
    for _ in range(3):  # one per collective: still one warning
        diagnostics.warn_assumption(ALL_GATHER, "w.txt")
    assumptions.append("Made while writing.")  # the trace's own list: later assumptions show too
    diagnostics.result("iteration 1.000 s (scheduled; ...)")
    return diagnostics


def test_number_changing_assumptions_are_warned_once_without_verbose():
    assert emitted(filled(), verbose=False) == [
        f"et-convert: warning: w.txt: assumed: {ALL_GATHER}",
        "et-convert: iteration 1.000 s (scheduled; ...)",
    ]


def test_verbose_lists_the_other_assumptions_after_the_notes():
    assert emitted(filled(), verbose=True) == [
        f"et-convert: warning: w.txt: assumed: {ALL_GATHER}",
        "et-convert: reading w.txt as simai",
        f"et-convert: assumed: {LAYOUT}",
        "et-convert: assumed: Made while writing.",
        "et-convert: iteration 1.000 s (scheduled; ...)",
    ]
