"""`et-convert report`: one self-contained HTML page per run, for people who look before they read.

    et-convert report INPUT... -o report.html [--compare INPUT2 | --compare-network net2.toml] [--sweep KEY=V1,V2]

Like every writer it reads the model, its timeline (the scheduler's summary for untimed
inputs) and the validator's findings, never an input file. `data.py` gathers the numbers,
`svg.py` draws them, `page.py` lays the page out.

Why SVG drawn in Python and no JavaScript charting library: the page must open offline from a
laptop's disk or a CI artifact, stay small for 1024 ranks, read well as it is, and be the same
bytes for the same input. Inline SVG needs nothing at open time, prints and screenshots as
drawn, puts each bar's exact numbers in the DOM (`data-*`) for people and tests alike, and
costs a few hundred bytes per bar; hover text is the SVG `<title>`. A vendored library
(uPlot ~50 KB, Chart.js ~200 KB, Vega ~800 KB) would add interaction we do not need, a
version to keep up to date, and a page that shows nothing where scripts are blocked. The
charts here are two shapes (stacked bars, lanes), so the code stays small.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ..diagnostics import Diagnostics
from ..options import Options
from .data import run_data
from .page import render_page

__all__ = ["build_runs", "input_label", "render_page", "run_data", "write", "write_page"]


def write(trace, output: Path, options: Options | None = None, diagnostics: Diagnostics | None = None) -> None:
    """The writer for `-o report.html` (OUTPUT_FORMATS): the page of one run."""
    write_page(output, [_plain_run(trace, options or Options())])


def write_page(output: Path, runs: list[dict[str, Any]], sweep: dict[str, Any] | None = None) -> None:
    from .. import __version__
    from ..writers.atomic import atomic_file

    html = render_page(runs, sweep, __version__)
    with atomic_file(Path(output)) as f:
        f.write(html.encode("utf-8"))


def build_runs(trace, label: str, options: Options, compare: tuple[Any, str] | None = None,
               compare_network: Path | None = None) -> list[dict[str, Any]]:
    """The data of the base run and, when asked, of the run it is compared with.

    `compare` is (trace, label) of a second input. `compare_network` re-schedules the same trace
    on a second network; a measured input is then re-scheduled on both networks (from its
    measured compute), so the difference is the network's alone.
    """
    if compare_network is None:
        runs = [_plain_run(trace, options, label)]
    else:
        report = _validated(trace, options, dry_run=False)  # both schedules below are the dry run
        runs = [_rescheduled(trace, options, report, label, options.network),
                _rescheduled(trace, replace(options, network=compare_network), report, label, compare_network)]
    if compare:
        runs.append(_plain_run(compare[0], options, compare[1]))
    return runs


def input_label(names: list) -> str:
    """What the user named: `chakra_data`, `w.txt`, or `w.0.et and 3 more`."""
    first = Path(names[0]).name
    return first if len(names) == 1 else f"{first} and {len(names) - 1} more"


def _plain_run(trace, options: Options, label: str = "") -> dict[str, Any]:
    """The run as the input timed it, or as the scheduler times it."""
    from ..timeline import timeline_for

    timeline = timeline_for(trace, options)
    # A schedule that completed is the validator's deadlock dry run already done.
    return run_data(trace, timeline, _validated(trace, options, dry_run=timeline.kind != "scheduled"), label=label)


def _rescheduled(trace, options: Options, report, label: str, network: Path | None) -> dict[str, Any]:
    from ..scheduler import schedule
    from ..sweep import basis_of, check_reschedulable

    check_reschedulable(trace)
    label = f"{label} on {Path(network).name if network else 'the default network'}"
    return run_data(trace, schedule(trace, options), report, label=label, basis=basis_of(trace))


def _validated(trace, options: Options, dry_run: bool):
    from ..validate import validate_trace

    return validate_trace(trace, options, dry_run=dry_run)
