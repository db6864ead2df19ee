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

import copy
import multiprocessing
from multiprocessing import connection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..diagnostics import Diagnostics, InputError
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
    return _run_in_processes(fmt, paths, options, diagnostics, jobs)


def reading_jobs(options: Options) -> int:
    """--jobs for reading; 1 (this process) unless asked."""
    if options.jobs is None or "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return max(1, options.jobs)


def _run_in_processes(fmt: PerRankFormat, paths: list[Path], options: Options, diagnostics: Diagnostics,
                      jobs: int) -> ExecutionTrace:
    """Worker k surveys files k, k + jobs, ... and keeps their records; after the plan it builds
    them there, so each file is read once. Results are taken in file order, whoever sent them."""
    context = multiprocessing.get_context("fork")
    links, workers = [], []
    for k in range(jobs):
        mine, theirs = context.Pipe()
        files = [(i, paths[i]) for i in range(k, len(paths), jobs)]
        worker = context.Process(target=_worker, args=(fmt, options, files, theirs), daemon=True)
        worker.start()
        theirs.close()
        links.append(mine)
        workers.append(worker)
    try:
        surveys = _collect(links, paths, "surveying")
        for survey in surveys:
            diagnostics.merge(survey.diagnostics)
        plan = fmt.plan(surveys, paths, options, diagnostics)
        for link in links:
            link.send(plan)
        parts = [part for file_parts in _collect(links, paths, "building") for part in file_parts]
    finally:
        for worker in workers:
            worker.kill()
            worker.join()
    return fmt.merge(plan, parts, options, diagnostics)


def _worker(fmt: PerRankFormat, options: Options, files: list[tuple[int, Path]], link) -> None:
    """Survey this worker's files (sending each survey without its records), then build them."""
    kept = {}
    index = -1
    try:
        for index, path in files:
            kept[index] = fmt.survey(path, options, str(path))
            link.send((index, _without_records(kept[index]), None))
        plan = link.recv()
        for index in list(kept):
            link.send((index, fmt.build(kept.pop(index), plan, options), None))
    except InputError as e:
        link.send((index, None, e))
    except EOFError:
        pass  # the parent stopped: an error in another worker's file


def _without_records(survey):
    light = copy.copy(survey)
    light.records = None
    return light


def _collect(links: list, paths: list[Path], doing: str) -> list:
    """Each file's result, in file order. A bad file stops its worker; the error of the first
    bad file in the order given is raised, as reading them one by one would."""
    results: dict[int, Any] = {}
    errors: dict[int, InputError] = {}
    jobs = len(links)
    left = {k: len(range(k, len(paths), jobs)) for k in range(jobs)}
    while left:
        for link in connection.wait([links[k] for k in left]):
            k = links.index(link)
            try:
                index, value, error = link.recv()
            except EOFError:
                raise InputError(None, f"a --jobs worker process died while {doing} {paths[k]} or a file after it") from None
            if error is not None:
                errors[index] = error
                del left[k]
                continue
            results[index] = value
            left[k] -= 1
            if not left[k]:
                del left[k]
    if errors:
        raise errors[min(errors)]
    return [results[i] for i in range(len(paths))]


def _merged(survey, diagnostics: Diagnostics):
    diagnostics.merge(survey.diagnostics)
    return survey
