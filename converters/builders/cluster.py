"""The per-file phase on a Dask cluster (`--cluster local:N` or `--cluster tcp://host:8786`).

Optional: needs `pip install 'et-convert[cluster]'` (dask.distributed). Each file is surveyed
on a worker and its records stay there (a future); the client gathers only the small surveys,
makes the plan, and asks each file's build to run where its records are. The client merges
the parts exactly as a local run does, so the output is byte-identical.

Workers open the inputs by absolute path: on a remote cluster they must be on a path every
worker sees (a shared file system) under the same name.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..diagnostics import Diagnostics, InputError, UsageError
from ..model import ExecutionTrace
from ..options import Options

LOCAL = "local:"


def run(fmt, paths: list[Path], options: Options, diagnostics: Diagnostics) -> ExecutionTrace:
    client = connect(options.cluster)
    try:
        surveys_remote = client.map(_survey, [fmt] * len(paths), [str(p.resolve()) for p in paths],
                                    [str(p) for p in paths], [options] * len(paths), pure=False)
        small = client.map(_detached, surveys_remote, pure=False)
        surveys = [_result(future, path, options) for future, path in zip(small, paths)]
        for survey in surveys:
            diagnostics.merge(survey.diagnostics)
        plan = fmt.plan(surveys, paths, options, diagnostics)
        plan_remote = client.scatter(plan, broadcast=True)
        builds = client.map(_build, [fmt] * len(paths), surveys_remote, [plan_remote] * len(paths),
                            [options] * len(paths), pure=False)
        parts = [part for future, path in zip(builds, paths) for part in _result(future, path, options)]
    finally:
        _close(client)
    return fmt.merge(plan, parts, options, diagnostics)


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


def _survey(fmt, path: str, name: str, options: Options):
    return fmt.survey(Path(path), options, name)


def _detached(survey):
    """The survey without its records, to send to the client (the records stay on the worker)."""
    return replace(survey, records=None)


def _build(fmt, survey, plan, options: Options):
    return fmt.build(survey, plan, options)


def _result(future, path: Path, options: Options):
    """The task's result; bad input raises as it would locally, a lost worker as one clear error."""
    try:
        return future.result()
    except (InputError, UsageError):
        raise
    except Exception as e:  # KilledWorker, a closed connection, ...: the run cannot finish
        raise InputError(
            None,
            f"--cluster {options.cluster}: a worker was lost while reading {path} ({type(e).__name__}); nothing was written",
        ) from None
