"""The per-file phase on a Dask cluster (`--cluster local:N` or `--cluster tcp://host:8786`).

Optional: needs `pip install 'et-convert[cluster]'` (dask.distributed). Each file is surveyed
on a worker and its records stay there (a future); the client gathers only the small surveys,
makes the plan, and asks each file's build to run where its records are. For most outputs the
client merges the parts exactly as a local run does; a Chakra set is finished and written by
the workers (`converters/rank_files.py`). Either way the output is byte-identical.

Workers open the inputs by absolute path, and write rank files into a temporary folder beside
the output: on a remote cluster both must be on a path every worker sees (a shared file
system) under the same name, the output folder writable by the workers.
"""

from __future__ import annotations

import gc
import operator
from pathlib import Path

from ..diagnostics import InputError, UsageError
from ..gc_pause import paused_gc
from ..options import Options
from . import per_rank

LOCAL = "local:"


class DaskWorkers(per_rank.Workers):
    """Each file's state (survey, then parts, then finished ranks) is a future on some worker;
    a step maps over those futures, so it runs where the state is, and only its results (small,
    or what the caller asks for) come here."""

    def __init__(self, fmt, paths: list[Path], options: Options, streaming: bool = False, all_or_none: bool = False):
        self.fmt, self.options = fmt, options
        self.client = connect(options.cluster)
        workers = list(self.client.scheduler_info()["workers"].values())
        units = per_rank.units_of(fmt, paths, len(workers), streaming, cluster=True)
        self.paths = [unit.path for unit in units]  # (what messages name)
        count = len(units)
        remote = [per_rank.Unit(unit.path.resolve(), unit.share) for unit in units]  # workers elsewhere open these
        hold = self._hold(units, workers, streaming, all_or_none)
        self.holding = all(hold)
        self.state = self.client.map(_gc_paused, [per_rank.surveyed] * count, [fmt] * count, remote, [options] * count,
                                     [str(p) for p in self.paths], hold, pure=False)

    def _hold(self, units: list, workers: list, streaming: bool, all_or_none: bool = False) -> list[bool]:
        """Which files keep their parts: Dask chooses the worker of each, so the files in the
        order given while they fit in every worker's budget together (`all_or_none`: as
        per_rank.files_to_hold says)."""
        if not streaming:
            return [True] * len(units)
        memory = min((worker.get("memory_limit") or 0 for worker in workers), default=0)  # 0: no limit known
        # files, and shares let go of alone, when a worker's memory (not this machine's) would be short
        paths = list(dict.fromkeys(self.paths))
        budget = per_rank.hold_budget(self.fmt, memory, per_rank.too_big_for_one_process(paths, memory or None))
        alone = per_rank.let_go_alone(units, paths, memory or None)
        return per_rank.files_to_hold([per_rank.unit_bytes(unit) for unit in units], budget * max(1, len(workers)),
                                      alone, all_or_none)

    def surveys(self) -> list:
        small = self.client.map(per_rank.without_records, self.state, pure=False)
        return self._results(small, "reading")

    def start(self, step, arg, doing: str):
        count = len(self.paths)
        arg_remote = self.client.scatter(arg, broadcast=True) if arg is not None else None
        pairs = self.client.map(_gc_paused, [step] * count, [self.fmt] * count, [self.options] * count, self.state,
                                [arg_remote] * count, pure=False)
        self.state = self.client.map(operator.itemgetter(0), pairs, pure=False)
        results = self.client.map(operator.itemgetter(1), pairs, pure=False)
        return lambda arrived=None: self._results(results, doing, arrived)

    def _results(self, futures: list, doing: str, arrived=None) -> list:
        results, errors = [], {}
        for i, (future, path) in enumerate(zip(futures, self.paths)):
            try:
                results.append(_result(future, path, self.options, doing))
            except InputError as e:
                errors[i] = e  # another share of the file may have an earlier bad line
            else:
                if arrived is not None:  # (outside the try: its own errors are not this file's)
                    arrived(results[-1])
            _collect_young()
        if errors:
            raise per_rank.first_error(errors, self.paths)
        return results

    def close(self) -> None:
        _close(self.client)


def _gc_paused(task, *args):
    """`task(*args)` on a worker with the cyclic GC paused, as local workers run (forked from a
    process that paused it: `api._collector_paused`). A survey or a step makes objects that
    live until the next step and form no cycles; with the collector on, a Dask worker spent 40%
    of a profiler trace's survey rescanning them. The worker's event loop runs meanwhile; its
    cycles made during the task go to the oldest generation with the rest (`paused_gc`) and are
    freed by the next full collection."""
    with paused_gc():
        return task(*args)


def _collect_young() -> None:
    """Collect the two young generations, also while the client's collector is paused
    (`api._collector_paused`). Dask's event loop, here in the client (and a local cluster's
    scheduler), makes about 86 objects of cyclic garbage per task, which would pile up for the
    whole run; collected after each result, they are freed, and any other object is looked at
    at most twice (what survives moves to the oldest generation, not collected while paused)."""
    gc.collect(1)


def connect(address: str | None):
    """A client for `local:N` (a LocalCluster of N worker processes here) or a scheduler address."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise UsageError("--cluster needs Dask: pip install 'et-convert[cluster]'") from None
    if address.startswith(LOCAL):
        count = address[len(LOCAL):]
        if not count.isdigit() or int(count) < 1:
            raise UsageError(f"--cluster {address}: expected local:N with N >= 1 workers, or tcp://host:port")
        # no dashboard; the scheduler's HTTP server (always started) on a free local port, not 8787,
        # which another Dask on this machine may hold (Dask then warns on stderr)
        cluster = LocalCluster(n_workers=int(count), threads_per_worker=1, processes=True,
                               dashboard_address=None, scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
                               silence_logs=50)
        return Client(cluster)
    try:
        return Client(address, timeout=10)
    except (OSError, TimeoutError) as e:
        raise UsageError(f"--cluster {address}: cannot reach the Dask scheduler ({e})") from None


def _close(client) -> None:
    cluster = client.cluster if hasattr(client, "cluster") else None
    client.close()
    if cluster is not None:  # a LocalCluster we started
        cluster.close()


def _result(future, path: Path, options: Options, doing: str):
    """The task's result; bad input raises as it would locally, a lost worker as one clear error."""
    try:
        return future.result()
    except (InputError, UsageError):
        raise
    except Exception as e:  # KilledWorker, a closed connection, ...: the run cannot finish
        raise InputError(
            None,
            f"--cluster {options.cluster}: a worker was lost while {doing} {path} ({type(e).__name__}); nothing was written",
        ) from None
