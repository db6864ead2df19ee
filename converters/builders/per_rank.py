"""Measured inputs, one rank (or a few) per file: the per-file phase in parallel, a small merge.

A format whose files each hold whole ranks (Megatron op logs; profiler traces) is four functions
(`PerRankFormat`):

    survey(path, options, name) -> survey   read one file; what the other ranks need to know (small)
    plan(surveys, paths, options, diagnostics) -> plan    across ranks, before any node: layout, clocks
    build(survey, plan, options) -> [part]  that file's ranks as model parts (nodes, groups used, warnings)
    merge(plan, parts, options, diagnostics) -> ExecutionTrace    the parts, in rank order, into one model

`run` calls them in this process, over `--jobs` processes, or on a Dask cluster (`--cluster`);
the result is the same model, so outputs are byte-identical whichever runs them.

A survey has two attributes the runner uses: `diagnostics` (the file's warnings, merged here in
file order) and `records` (the parsed file, kept for `build` in the process that read it; set to
None before a survey crosses processes, and `build` then reads the file again). `name` is the
path as the user gave it (what messages and sources say); `path` may be absolute (what a worker
elsewhere opens).
"""

from __future__ import annotations

import multiprocessing
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable

from ..diagnostics import Diagnostics
from ..model import ExecutionTrace
from ..options import Options


@dataclass(frozen=True)
class PerRankFormat:
    survey: Callable[[Path, Options, str], Any]
    plan: Callable[[list, list[Path], Options, Diagnostics], Any]
    build: Callable[[Any, Any, Options], list]
    merge: Callable[[Any, list, Options, Diagnostics], ExecutionTrace]


def run(fmt: PerRankFormat, paths: list[Path], options: Options, diagnostics: Diagnostics) -> ExecutionTrace:
    """Read `paths` with `fmt`: in this process, over --jobs processes, or on --cluster."""
    if options.cluster:
        from . import cluster  # dask is an optional extra: imported only when asked for

        return cluster.run(fmt, paths, options, diagnostics)
    jobs = min(reading_jobs(options), len(paths))
    if jobs <= 1:
        surveys = [_merged(fmt.survey(path, options, str(path)), diagnostics) for path in paths]
        plan = fmt.plan(surveys, paths, options, diagnostics)
        parts = [part for survey in surveys for part in fmt.build(survey, plan, options)]
        return fmt.merge(plan, parts, options, diagnostics)
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        work = [(path, str(path)) for path in paths]
        surveys = [_merged(s, diagnostics) for s in pool.imap(partial(_detached_survey, fmt, options), work)]
        plan = fmt.plan(surveys, paths, options, diagnostics)
        parts = [part for file_parts in pool.imap(partial(fmt.build, plan=plan, options=options), surveys)
                 for part in file_parts]
    return fmt.merge(plan, parts, options, diagnostics)


def reading_jobs(options: Options) -> int:
    """--jobs for reading; 1 (this process) unless asked: on a busy machine a second process
    reads each file twice (its survey and its build), which costs more than it saves."""
    if options.jobs is None or "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return max(1, options.jobs)


def _detached_survey(fmt: PerRankFormat, options: Options, work: tuple[Path, str]):
    """A survey made in a worker, without its records (they stay behind; build reads the file again)."""
    path, name = work
    survey = fmt.survey(path, options, name)
    survey.records = None
    return survey


def _merged(survey, diagnostics: Diagnostics):
    diagnostics.merge(survey.diagnostics)
    return survey
