"""The library API: everything the CLI does, callable from Python.

    import converters as etc
    trace = etc.read("samples/simai_tp8_pp16_1024gpu.txt")
    timeline = etc.schedule(trace)
    findings = etc.validate(trace)
    etc.write(trace, "out/w", to="chakra")
    etc.convert("samples/megatron_rank4_pp_tp2.log", "rank4.json")
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import os
import threading
from dataclasses import replace
from pathlib import Path
from typing import Iterable

from . import exiting, progress
from .builders.one_rank import demote_one_rank_collectives, warn_if_kept
from .diagnostics import Diagnostics, UsageError
from .formats import detect, expand_inputs, input_format, output_format, refuse_overwriting_inputs, resolve
from .gc_pause import paused_gc
from .model import ExecutionTrace
from .options import Options, check

# Sets read as they are, so that `validate` sees what a simulator would; a Chakra set written
# from a Chakra set is repaired in `write`, a restored et-json dump is not (it stays verbatim).
VERBATIM_FORMATS = ("chakra", "et-json")


def _as_paths(inputs: str | Path | Iterable[str | Path]) -> list[Path]:
    if isinstance(inputs, (str, Path)):
        inputs = [inputs]
    return expand_inputs(list(inputs))


def read(
    inputs: str | Path | Iterable[str | Path],
    fmt: str = "auto",
    options: Options | None = None,
    diagnostics: Diagnostics | None = None,
    **option_values,
) -> ExecutionTrace:
    """Read one input (files or a directory) into the model. `fmt="auto"` detects the format."""
    options = replace(options or Options(), **option_values)
    check(options)
    diagnostics = diagnostics if diagnostics is not None else Diagnostics()
    paths = _as_paths(inputs)
    name = detect(paths) if fmt in (None, "auto") else input_format(fmt).name
    _note_reading(paths, name, diagnostics)
    # no thread beside --jobs or --cluster reading: their workers are forked while it would run
    hashing = _HashOnAThread(paths) if name != "chakra" and options.jobs is None and not options.cluster else None
    with progress.bar(f"reading {paths[0].name}{f' and {len(paths) - 1} more' if len(paths) > 1 else ''} as {name}"), \
            _collector_paused(options):
        trace = resolve(input_format(name).load)(paths, options, diagnostics)
    if hashing is not None and not trace.source.sha256:
        trace.source.sha256 = hashing.result()
    _after_load(trace, name, paths, diagnostics)
    exiting.keep_until_exit(trace)
    return trace


class _HashOnAThread:
    """`sha256_of(paths)` on a thread while the reader parses the files: file reads and hashlib
    (on blocks above 2 KB) release the GIL, so on a second core the hash costs the reading nothing
    (it was 5% of reading benchmark 7's logs). The Chakra reader hashes the bytes it reads."""

    def __init__(self, paths: list[Path]):
        self.paths = paths
        self.digest: str | None = None
        self.thread = threading.Thread(target=self._run, name="et-convert sha256", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with contextlib.suppress(OSError):  # the reader reports an unreadable file itself
            self.digest = sha256_of(self.paths)

    def result(self) -> str:
        self.thread.join()
        return self.digest if self.digest is not None else sha256_of(self.paths)


def _note_reading(paths: list[Path], name: str, diagnostics: Diagnostics) -> None:
    diagnostics.note(f"reading {', '.join(p.name for p in paths[:3])}{' ...' if len(paths) > 3 else ''} as {name}")


def _after_load(trace: ExecutionTrace, name: str, paths: list[Path], diagnostics: Diagnostics,
                demote: bool = True) -> None:
    if demote and name not in VERBATIM_FORMATS:
        demote_one_rank_collectives(trace)
    trace.source.format = trace.source.format or name
    if not trace.source.files:
        trace.source.files = [p.name for p in paths]
    if not trace.source.sha256:
        trace.source.sha256 = sha256_of(paths)
    diagnostics.list_assumptions(trace.assumptions)  # shown with -v


class _AfterWorkersLoad:
    """`_after_load` for a model the workers read (rank_files, rank_timelines), but the
    one-member-collective pass (the workers run it). `workers_started()` hashes the inputs on a
    thread while the workers read them: only once they run, as a thread must not be running
    while workers are forked."""

    def __init__(self, name: str, paths: list[Path], diagnostics: Diagnostics):
        self.name, self.paths, self.diagnostics = name, paths, diagnostics
        self.hashing: _HashOnAThread | None = None

    def workers_started(self) -> None:
        self.hashing = _HashOnAThread(self.paths)

    def __call__(self, trace: ExecutionTrace) -> None:
        if self.hashing is not None and not trace.source.sha256:
            trace.source.sha256 = self.hashing.result()
        _after_load(trace, self.name, self.paths, self.diagnostics, demote=False)


def sha256_of(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def schedule(trace: ExecutionTrace, options: Options | None = None):
    """A timeline for every node: measured times when the input has them, else the scheduler's."""
    from .timeline import timeline_for

    return timeline_for(trace, options or Options())


def validate(trace: ExecutionTrace, options: Options | None = None):
    """Findings about the trace (the checks and their codes: the package `converters/validate/`)."""
    from .validate import run_checks

    return run_checks(trace, options or Options())


def write(
    trace: ExecutionTrace,
    output: str | Path,
    to: str | None = None,
    options: Options | None = None,
    diagnostics: Diagnostics | None = None,
) -> None:
    """Write the trace; `to` defaults from the output name (.json, .json.gz, .pftrace).

    A Chakra set never carries a collective of a one-member group (ASTRA-sim would stall on it):
    such collectives of the trace are turned into compute first (see `builders/one_rank.py`),
    except when an et-json dump is restored: that is written as the dump held it, or refused.
    """
    output = Path(output)
    fmt = output_format(to, output)
    options = options or Options()
    diagnostics = diagnostics if diagnostics is not None else Diagnostics()
    if fmt.name == "chakra":
        if not trace.metadata.get("chakra.verbatim"):
            demote_one_rank_collectives(trace)
            warn_if_kept(trace, diagnostics)

        def gate() -> None:  # run by the writer: while its workers write, when it has any
            with progress.bar("checking the set before writing it"):
                _gate_chakra_set(trace, options, diagnostics)

        with progress.bar(f"writing {output} ({fmt.name})"):
            resolve(fmt.write)(trace, output, options, diagnostics, check=gate)
        return
    with progress.bar(f"writing {output} ({fmt.name})"):
        resolve(fmt.write)(trace, output, options, diagnostics)


def _gate_chakra_set(trace: ExecutionTrace, options: Options, diagnostics: Diagnostics) -> None:
    """Refuse to write a Chakra set a simulator would stall on (unless --force).

    A set restored from an et-json dump is gated like any other input: a faulty dump is
    restored, faults included, only with --force.
    """
    from .validate import gate

    gate(trace, options, diagnostics)


def convert(
    inputs: str | Path | Iterable[str | Path],
    output: str | Path,
    to: str | None = None,
    fmt: str = "auto",
    options: Options | None = None,
    diagnostics: Diagnostics | None = None,
    **option_values,
) -> ExecutionTrace:
    """Read `inputs` and write `output` in one call; returns the model that was written.

    An unusable output name or option value, or an output that would replace an input, fails
    before any reading. A Chakra set from per-rank logs or profiler traces with `jobs` > 1 or
    `cluster`, or of 32 MB of them or more, is written by the workers
    (`converters/rank_files.py`): the model returned then holds each rank's
    communication skeleton (its sends, receives and collectives as `rank_files.SkeletonNode`s, with
    only the args the cross-rank checks read, read-only), not its compute. A timeline
    of per-rank logs or profiler traces with `jobs` > 1 or `cluster`, or of 32 MB of them or
    more, is drawn by the workers (`converters/rank_timelines.py`): the model returned then
    holds the ranks without their nodes.
    """
    options = replace(options or Options(), **option_values)
    check(options)  # a bad option fails before any input is read, whatever the output
    diagnostics = diagnostics if diagnostics is not None else Diagnostics()
    paths = _as_paths(inputs)
    refuse_overwriting_inputs(paths, Path(output), output_format(to, Path(output)))
    with _collector_paused(options):
        return _convert(paths, output, to, fmt, options, diagnostics)


def _collector_paused(options: Options):
    """The cyclic GC paused for a reading or a conversion in this process (and its --jobs
    workers, forked): the model is made of objects that live until the output is written and
    form no cycles, and the collector would only rescan them (0.9 s of a 5 s conversion of
    benchmark 7's logs to Chakra; the peak memory is the same without it). Also with
    --cluster, where the client then collects the young generations after each result it
    receives (`cluster._collect_young`), as Dask's event loop makes cyclic garbage all along.
    """
    return paused_gc()


def _convert(paths: list[Path], output: str | Path, to: str | None, fmt: str, options: Options,
             diagnostics: Diagnostics) -> ExecutionTrace:
    by_workers = _written_by_workers(paths, fmt, to, Path(output), options)
    if by_workers is not None:
        name, per_rank_format, written, options = by_workers
        _note_reading(paths, name, diagnostics)
        finish_read = _AfterWorkersLoad(name, paths, diagnostics)
        if written == "chakra":
            from . import rank_files

            return rank_files.convert(per_rank_format, paths, Path(output), options, diagnostics, finish_read)
        from . import rank_timelines

        return rank_timelines.convert(per_rank_format, paths, Path(output), written, options, diagnostics, finish_read)
    trace = read(paths, fmt, options, diagnostics)
    write(trace, output, to, options, diagnostics)
    return trace


# Outputs the workers (--jobs, --cluster) of per-rank inputs write where the ranks are.
WRITTEN_BY_WORKERS = ("chakra", "chrome", "perfetto")
# Without --jobs, per-rank files of at least this many bytes in all (or one log of several ranks,
# which they share) are read and written by one worker per core, so that no process holds every
# rank. A timeline: benchmark 7, 46 MB: 1.9 -> 1.8 s and 217 -> 141 MB for the biggest process.
# A Chakra set, where the client checks the ranks' communication skeletons across ranks while the
# workers write their files (2026-11-28, processes together, PSS): benchmark 7 381 -> 246 MB
# (5.3 -> 5.5 s), benchmark 8 1,430 -> 615 MB (23.1 -> 24.4 s), benchmark 6 840 -> 567 MB
# (17.0 -> 15.7 s); profiler traces 2 x 105 MB 10.9 -> 8.3 s.
WORKERS_MIN_BYTES = 32 << 20


def _written_by_workers(paths: list[Path], fmt: str, to: str | None, output: Path, options: Options):
    """(input format name, per-rank format, output format name, options) when workers write a
    Chakra set's rank files or draw a timeline's ranks, or None. The options returned carry the
    default --jobs of a big input (`WORKERS_MIN_BYTES`)."""
    written = output_format(to, output).name
    if written not in WRITTEN_BY_WORKERS:
        return None
    from .builders import per_rank  # (multiprocessing: imported only when it may be used)

    big = options.jobs is None and not options.cluster and _big_input(paths)
    if not big and not options.cluster and per_rank.reading_jobs(options) < 2:
        return None
    name = detect(paths) if fmt in (None, "auto") else input_format(fmt).name
    found = getattr(importlib.import_module(input_format(name).load.partition(":")[0]), "PER_RANK_FORMAT", None)
    if found is None or not found.parts_stay_with_workers:
        return None
    if big:
        options = replace(options, jobs=os.cpu_count() or 1)
    if not options.cluster and per_rank.reading_jobs(options) < 2:
        return None
    if not per_rank.uses_workers(options, paths, found, streaming=True):
        return None  # one file, of a format whose files workers cannot share
    return name, found, written, options


def _big_input(paths: list[Path]) -> bool:
    """WORKERS_MIN_BYTES or more of input in all (one file of several ranks is then
    shared by the workers: `per_rank.units_of`)."""
    total = 0
    for path in paths:
        with contextlib.suppress(OSError):  # the reader reports an unreadable file itself
            total += path.stat().st_size
    return total >= WORKERS_MIN_BYTES


def simulate(
    inputs: str | Path | Iterable[str | Path],
    astra_sim: str | Path,
    fmt: str = "auto",
    options: Options | None = None,
    diagnostics: Diagnostics | None = None,
    keep: str | Path | None = None,
    timeout_s: float = 300.0,
    **option_values,
):
    """Run ASTRA-sim (`astra_sim`: its analytical congestion-unaware binary) on a Chakra set, or on
    any input written as one first, with configuration files matching our network model; returns
    a `converters.simulate.Simulation`: per-rank finish times beside our own prediction, `ok`,
    `verdict`, `stuck` ranks. `keep`: a directory that keeps the configs and the transcript."""
    from .simulate import simulate as run_simulator

    options = replace(options or Options(), **option_values)
    return run_simulator(inputs, astra_sim, fmt, options, diagnostics, keep, timeout_s)


def report(
    inputs: str | Path | Iterable[str | Path],
    output: str | Path,
    fmt: str = "auto",
    options: Options | None = None,
    diagnostics: Diagnostics | None = None,
    compare: str | Path | Iterable[str | Path] | None = None,
    compare_network: str | Path | None = None,
    sweep: list[str] | None = None,
    **option_values,
) -> list[dict]:
    """Write one self-contained HTML page about `inputs` (see `converters/report/`); returns
    the data of each run shown. `compare`: a second input shown beside it; `compare_network`:
    the same input on a second network; `sweep`: `["tp.bandwidth_gbps=100,200", ...]`."""
    from .report import build_runs, input_label, write_page
    from .sweep import parse_sweep, sweep as run_sweep

    options = replace(options or Options(), **option_values)
    diagnostics = diagnostics if diagnostics is not None else Diagnostics()
    named = [inputs] if isinstance(inputs, (str, Path)) else list(inputs)
    compared = ([compare] if isinstance(compare, (str, Path)) else list(compare)) if compare else []
    if compared and compare_network is not None:
        raise UsageError("give --compare or --compare-network, not both")
    paths, compared_paths = _as_paths(named), _as_paths(compared) if compared else []
    output = Path(output)
    refuse_overwriting_inputs(paths + compared_paths, output, output_format("report", output))
    grid = parse_sweep(sweep or [])
    # The collector paused throughout, as for a conversion: the model, its schedules and the
    # page's data live until the page is written (it rescanned them: 12-15% of a report's time)
    with _collector_paused(options):
        trace = read(paths, fmt, options, diagnostics)
        other = None
        if compared:
            other = (read(compared_paths, fmt, options, diagnostics), input_label(compared))
        with progress.bar("scheduling and checking for the report"):
            runs = build_runs(trace, input_label(named), options, other,
                              Path(compare_network) if compare_network else None)
        swept = None
        if grid:
            with progress.bar("scheduling the sweep"):
                swept = {**run_sweep(trace, grid, options), "keys": [k for k, _ in grid]}
        with progress.bar(f"writing {output} (report)"):
            write_page(output, runs, swept)
    return runs


def stats_for(
    inputs: str | Path | Iterable[str | Path],
    fmt: str = "auto",
    options: Options | None = None,
    diagnostics: Diagnostics | None = None,
    **option_values,
) -> dict:
    """What `et-convert stats --json` prints for `inputs`: the iteration time, per rank compute,
    exposed communication and idle, traffic per group kind, the critical path (scheduled) or
    per group collectives and the slowest ones (measured). A Chakra set written from a measured
    run is summed from its node columns, without a Node per message (`converters/stats.py`)."""
    from .stats import stats_for as compute

    options = replace(options or Options(), **option_values)
    with _collector_paused(options):
        return compute(inputs, fmt, options, diagnostics if diagnostics is not None else Diagnostics())


def sweep(trace: ExecutionTrace, grid: dict[str, list] | list[str], options: Options | None = None) -> dict:
    """Re-schedule `trace` for every point of a grid of network keys:
    `sweep(trace, {"tp.bandwidth_gbps": [100, 200]})` -> {"sweep": [{..., "iteration_time_ns": ...}], "basis": ...}."""
    from .sweep import parse_sweep, sweep as run_sweep

    if isinstance(grid, dict):
        grid = [f"{key}={','.join(map(str, values))}" for key, values in grid.items()]
    return run_sweep(trace, parse_sweep(grid), options)
