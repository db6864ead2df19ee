"""Timelines of per-rank logs drawn where the ranks were built (--jobs, --cluster;
converters/rank_timelines.py): the bytes of a local run, this process holding no rank's nodes,
and one clear error with nothing written when a worker fails."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

import converters as etc
from conftest import SAMPLES, run_cli
from converters import rank_timelines
from converters.diagnostics import Diagnostics, InputError
from converters.builders import megatron
from converters.model import NodeKind
from converters.rank_files import SkeletonNode
from converters.options import Options
from helpers.megatron_synth import replace_in_op, write_run

TIMELINES = ("t.json", "t.json.gz", "t.pftrace")
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def drawn(tmp_path: Path, paths: list[Path], name: str, *extra: str) -> tuple[dict[str, bytes], str]:
    """Every timeline output of `paths` (with `extra` options), and what the runs said."""
    out = tmp_path / name
    out.mkdir()
    said = ""
    for output in TIMELINES:
        result = run_cli(*paths, "-o", out / output, "-v", *extra)
        assert result.code == 0, result.stderr
        said += result.stderr.replace(str(out), "OUT")
    assert sorted(p.name for p in out.iterdir()) == sorted(TIMELINES)  # no part left behind
    return {output: (out / output).read_bytes() for output in TIMELINES}, said


def synthetic_logs(tmp_path: Path, **options) -> list[Path]:
    return write_run(tmp_path / "logs", stages=4, tp=2, microbatches=4, **options)


@pytest.mark.parametrize("where", [["--jobs", "2"], ["--cluster", "local:2"]], ids=["jobs", "cluster"])
@pytest.mark.parametrize("logs_of", ["sample", "synthetic", "profiler"])
def test_workers_draw_the_local_bytes(tmp_path, where, logs_of):
    if where[0] == "--cluster":
        pytest.importorskip("distributed", reason="dask.distributed is not installed (pip install 'et-convert[cluster]')")
    # 4 ranks (TP 1, PP 2, DP 2): one-member collectives turned into compute on the workers;
    # 8 ranks (TP 2, PP 4): tp all-reduces, sends and receives between stages; 4 ranks of
    # PyTorch profiler traces (NCCL): collectives, and drawn-only CPU spans (model.DisplaySpan)
    paths = {"sample": lambda: sorted((SAMPLES / "megatron_tp1_pp2_dp2").glob("*.log")),
             "synthetic": lambda: synthetic_logs(tmp_path),
             "profiler": lambda: sorted((FIXTURES / "kineto_nccl").iterdir())}[logs_of]()
    here, said_here = drawn(tmp_path, paths, "here")
    there, said_there = drawn(tmp_path, paths, "there", *where)
    assert here == there
    assert said_here == said_there
    assert b'"flow_out":true' in here["t.json"]  # arrows between the workers' ranks
    # through the API too: the workers drew the ranks, this process holds only their shells
    option = {"jobs": 2} if where[0] == "--jobs" else {"cluster": "local:2"}
    trace = etc.convert(paths, tmp_path / "new" / "api.json", diagnostics=Diagnostics(), **option)  # a new folder
    assert os.listdir(tmp_path / "new") == ["api.json"]
    assert (tmp_path / "new" / "api.json").read_bytes() == here["t.json"]
    assert sorted(trace.ranks) == list(range(len(paths)))
    assert all(not rank.nodes for rank in trace.ranks.values())


def test_a_subset_of_ranks_and_a_log_without_flows_give_the_local_bytes(tmp_path):
    paths = synthetic_logs(tmp_path)
    here, _ = drawn(tmp_path, paths, "here", "--ranks", "1,2,5")
    there, _ = drawn(tmp_path, paths, "there", "--ranks", "1,2,5", "--jobs", "3")
    assert here == there
    # scaling mode: each rank on its own clock, so no arrows; with --retime the scheduler times
    # the ranks, in this process (the workers send them here)
    scaling = write_run(tmp_path / "scaling", stages=2, tp=2, microbatches=2, scaling=True)
    for extra in ([], ["--retime"]):
        here, _ = drawn(tmp_path, scaling, f"s-here{len(extra)}", *extra)
        there, _ = drawn(tmp_path, scaling, f"s-there{len(extra)}", "--jobs", "2", *extra)
        assert here == there
        assert (b'"flow_out":true' in here["t.json"]) == bool(extra)


_real_write_parts = rank_timelines.write_parts


def _dying_printer(out, parts):
    if out.name.endswith("/6.part"):  # rank 5's process (pid = rank + 1)
        os._exit(1)  # the worker process dies after printing some ranks
    _real_write_parts(out, parts)


def _full_disk(out, parts):
    raise OSError(28, "No space left on device", out.name)


@pytest.mark.parametrize("printer", [_dying_printer, _full_disk], ids=["dies", "disk-full"])
def test_a_worker_that_fails_while_printing_leaves_no_output(tmp_path, monkeypatch, printer):
    paths = synthetic_logs(tmp_path)
    monkeypatch.setattr(rank_timelines, "write_parts", printer)  # the workers are forked with it
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(InputError) as caught:
        etc.convert(paths, out / "t.json", diagnostics=Diagnostics(), jobs=2)
    if printer is _dying_printer:
        expected = (rf"a worker process died while printing {tmp_path}/logs/rank\d\.log or a file after it: "
                    r"it exited with code 1")
    else:
        expected = (rf"{out}/t.json: cannot write rank 0's part of the timeline on a worker: No space left on device "
                    r"\(the output folder must be writable by every worker under this path\)")
    assert re.fullmatch(expected, str(caught.value))
    assert list(out.iterdir()) == []  # no output, no folder of parts


def test_without_jobs_a_big_set_is_drawn_by_workers_and_a_small_one_here(tmp_path, monkeypatch):
    from converters import api

    paths = synthetic_logs(tmp_path)
    local = etc.convert(paths, tmp_path / "local.json", diagnostics=Diagnostics(), jobs=1)
    small = etc.convert(paths, tmp_path / "small.json", diagnostics=Diagnostics())
    monkeypatch.setattr(api, "WORKERS_MIN_BYTES", sum(p.stat().st_size for p in paths))
    big = etc.convert(paths, tmp_path / "big.pftrace", diagnostics=Diagnostics())
    chakra = etc.convert(paths, tmp_path / "set" / "w", to="chakra", diagnostics=Diagnostics())
    assert all(rank.nodes for trace in (local, small) for rank in trace.ranks.values())
    assert all(not rank.nodes for rank in big.ranks.values())
    # a big Chakra set too goes through the workers: the model keeps each rank's skeleton
    assert all(rank.nodes for rank in chakra.ranks.values())
    assert {type(node) for rank in chakra.ranks.values() for node in rank.nodes} == {SkeletonNode}
    assert (tmp_path / "small.json").read_bytes() == (tmp_path / "local.json").read_bytes()
    etc.convert(paths, tmp_path / "local.pftrace", diagnostics=Diagnostics(), jobs=1)
    assert (tmp_path / "big.pftrace").read_bytes() == (tmp_path / "local.pftrace").read_bytes()


@pytest.mark.parametrize("fixture,where", [("kineto_nccl", "--jobs"), ("kineto_gloo", "--jobs"),
                                           ("kineto_nccl_old", "--jobs"), ("kineto_nccl", "--cluster")])
def test_profiler_traces_to_chakra_are_written_by_the_workers_with_the_local_bytes(tmp_path, monkeypatch, fixture, where):
    # compute joins the streams: each collective's skeleton depends on the latest communication
    # node of each stream (rank_files._latest_comm_per_stream), not on every earlier one
    from converters.writers import chakra

    if where == "--cluster":
        pytest.importorskip("distributed", reason="dask.distributed is not installed (pip install 'et-convert[cluster]')")
    workers = {"--jobs": ("--jobs", "2"), "--cluster": ("--cluster", "local:2")}[where]
    paths = sorted((FIXTURES / fixture).iterdir())
    here = run_cli(*paths, "--to", "chakra", "-v", "-o", tmp_path / "here" / "w")
    there = run_cli(*paths, "--to", "chakra", "-v", *workers, "-o", tmp_path / "there" / "w")
    assert here.code == there.code == 0 and here.stderr == there.stderr
    files = sorted(p.name for p in (tmp_path / "here").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "there").iterdir()) and len(files) == 5
    assert all((tmp_path / "here" / f).read_bytes() == (tmp_path / "there" / f).read_bytes() for f in files)
    written = []
    real_finish = chakra.finish_set
    monkeypatch.setattr(chakra, "finish_set", lambda *a: written.append(1) or real_finish(*a))
    option = {"jobs": 2} if where == "--jobs" else {"cluster": "local:2"}
    trace = etc.convert(paths, tmp_path / "api" / "w", to="chakra", diagnostics=Diagnostics(), **option)
    assert written == [1]  # the workers wrote the rank files: no local fallback
    assert sorted(trace.ranks) == [0, 1, 2, 3]
    assert all(node.kind is not NodeKind.COMPUTE for rank in trace.ranks.values() for node in rank.nodes)
    assert all((tmp_path / "api" / f).read_bytes() == (tmp_path / "here" / f).read_bytes() for f in files)


def test_a_big_profiler_set_to_chakra_is_written_by_the_workers_by_default(tmp_path, monkeypatch):
    # a big log set is not (test above): there the workers' checks cost more than they save
    from converters import api

    paths = sorted((FIXTURES / "kineto_nccl").iterdir())
    local = etc.convert(paths, tmp_path / "local" / "w", to="chakra", diagnostics=Diagnostics())
    monkeypatch.setattr(api, "WORKERS_MIN_BYTES", sum(p.stat().st_size for p in paths))
    big = etc.convert(paths, tmp_path / "big" / "w", to="chakra", diagnostics=Diagnostics())
    assert all(any(n.kind is NodeKind.COMPUTE for n in rank.nodes) for rank in local.ranks.values())
    assert all(n.kind is not NodeKind.COMPUTE for rank in big.ranks.values() for n in rank.nodes)  # skeletons
    files = sorted(p.name for p in (tmp_path / "local").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "big").iterdir())
    assert all((tmp_path / "local" / f).read_bytes() == (tmp_path / "big" / f).read_bytes() for f in files)


# ---------------------------------------------------------------- one log of several ranks, shared

def one_log(tmp_path: Path, **options) -> list[Path]:
    """The 8 ranks of `synthetic_logs` in one concatenated log."""
    return write_run(tmp_path / "one", stages=4, tp=2, microbatches=4, one_file=True, **options)


def shared_by_workers(monkeypatch) -> None:
    """The test's small log as one big enough for --jobs workers to share it."""
    from converters.builders import per_rank

    monkeypatch.setattr(per_rank, "SHARED_FILES_MIN_BYTES", 0)


def short_of_memory(monkeypatch) -> None:
    """This machine as one too small to draw the test's log in one process."""
    from converters.builders import per_rank

    monkeypatch.setattr(per_rank, "available_memory", lambda: 1 << 10)


def test_a_big_log_is_shared_by_the_workers_with_the_local_bytes(tmp_path, monkeypatch):
    # each worker reads the whole log and builds the ranks r with r % 2 == its share; the log's
    # own warning (its last line cut off) is said once, a rank's (an odd dtype on rank 3) by its builder
    edit = replace_in_op(3, "recv_forward", 1, "torch.float32", "torch.weird")
    paths = one_log(tmp_path, edit=edit, cut_last={7: 60})
    here, there = Diagnostics(), Diagnostics()
    for output in TIMELINES:
        etc.convert(paths, tmp_path / "here" / output, diagnostics=here, jobs=2)
    shared_by_workers(monkeypatch)
    for output in TIMELINES:
        trace = etc.convert(paths, tmp_path / "there" / output, diagnostics=there, jobs=2)
        assert sorted(trace.ranks) == list(range(8)) and not any(rank.nodes for rank in trace.ranks.values())
        assert (tmp_path / "there" / output).read_bytes() == (tmp_path / "here" / output).read_bytes()
    assert here.messages() == there.messages()
    assert sum("last line is cut off" in m for m in here.messages()) == 1  # (the same warnings merge into one)
    assert any("torch.weird" in m for m in here.messages())


def test_a_cluster_shares_one_log_among_its_workers_with_the_local_bytes(tmp_path):
    pytest.importorskip("distributed", reason="dask.distributed is not installed (pip install 'et-convert[cluster]')")
    paths = one_log(tmp_path, cut_last={7: 60})
    here, said_here = drawn(tmp_path, paths, "here")
    there, said_there = drawn(tmp_path, paths, "there", "--cluster", "local:2")
    assert here == there
    assert said_here == said_there and said_here.count("last line is cut off") == len(TIMELINES)
    trace = etc.convert(paths, tmp_path / "api.json", diagnostics=Diagnostics(), cluster="local:2")
    assert sorted(trace.ranks) == list(range(8)) and not any(rank.nodes for rank in trace.ranks.values())


def test_shared_ranks_let_go_of_are_built_one_at_a_time_with_the_local_bytes(tmp_path, monkeypatch):
    from converters.builders import per_rank

    paths = one_log(tmp_path)
    for name, to in (("t.json", {}), ("set/w", {"to": "chakra"})):
        etc.convert(paths, tmp_path / "here" / name, **to, diagnostics=Diagnostics(), jobs=1)
    shared_by_workers(monkeypatch)
    short_of_memory(monkeypatch)  # a worker's only share let go: its ranks built one by one
    monkeypatch.setattr(per_rank, "HOLD_BYTES_PER_WORKER", 0)
    with per_rank.start_workers(megatron.MEGATRON, paths, Options(jobs=2), streaming=True) as workers:
        workers.keep_parts(Diagnostics())
        assert workers.step(_pieces_kept, None, "probing") == [[[0], [2], [4], [6]], [[1], [3], [5], [7]]]
    for name, to in (("t.json", {}), ("set/w", {"to": "chakra"})):
        trace = etc.convert(paths, tmp_path / "there" / name, **to, diagnostics=Diagnostics(), jobs=2)
        assert sorted(trace.ranks) == list(range(8))
    assert sorted(p.name for p in (tmp_path / "there" / "set").iterdir()) == sorted(
        p.name for p in (tmp_path / "here" / "set").iterdir())
    for path in (tmp_path / "here").rglob("*"):
        if path.is_file():
            assert (tmp_path / "there" / path.relative_to(tmp_path / "here")).read_bytes() == path.read_bytes(), path


def _pieces_kept(fmt, options, kept, _):
    """The ranks of each piece a LetGo builds at a time."""
    return kept, [sorted(piece.ranks) for piece in kept.pieces]


def error_shared_as_here(tmp_path: Path, monkeypatch, edit, **there) -> str:
    """The error of one process reading `one_log(edit=edit)`, once the workers sharing that log
    (`there`: jobs=2, or a cluster) are seen to report the same and to write nothing."""
    paths = one_log(tmp_path, edit=edit)
    with pytest.raises(InputError) as here:
        etc.convert(paths, tmp_path / "here.json", diagnostics=Diagnostics(), jobs=1)
    if "cluster" not in there:  # (a cluster shares any log)
        shared_by_workers(monkeypatch)
    with pytest.raises(InputError) as caught:
        etc.convert(paths, tmp_path / "there.json", diagnostics=Diagnostics(), **there)
    assert str(caught.value) == str(here.value)
    assert not (tmp_path / "there.json").exists()
    return str(here.value)


def test_a_shared_log_reports_the_first_bad_line_of_the_file_as_one_process_does(tmp_path, monkeypatch):
    # rank 1 (share 1) changes stage on a later line than rank 0 (share 0) does: the error
    # names rank 0's line, the file's first
    def stage_moves(r, i, line):
        if (r, i) in ((0, 9), (1, 3)):
            return line.replace("stage_id=0,", "stage_id=1,")
        return line

    assert "logs stage_id 1 here but stage_id 0" in error_shared_as_here(tmp_path, monkeypatch, stage_moves, jobs=2)


def broken_at(*lines):
    """An edit that breaks the `batch_id` of the given (rank, op) lines."""
    return lambda r, i, line: line.replace("batch_id=", "batch_id=x", 1) if (r, i) in lines else line


@pytest.mark.parametrize("bad", [((1, 5), (2, 3)), ((0, 9), (1, 5))])
def test_a_shared_log_whose_shares_each_have_a_bad_line_reports_the_earliest(tmp_path, monkeypatch, bad):
    # each share parses only its own ranks' lines (the log holds rank 0's lines, then rank 1's, ...):
    # ranks 0 and 2 are share 0's, rank 1 share 1's; the run reports the earlier bad line of the
    # file, as one process does, whichever share found it
    assert "batch_id" in error_shared_as_here(tmp_path, monkeypatch, broken_at(*bad), jobs=2)


def test_a_cluster_reports_the_earliest_bad_line_of_a_shared_log(tmp_path, monkeypatch):
    pytest.importorskip("distributed", reason="dask.distributed is not installed (pip install 'et-convert[cluster]')")
    # share 0 (ranks 0, 2, ...) fails too, on a later line
    assert "batch_id" in error_shared_as_here(tmp_path, monkeypatch, broken_at((1, 5), (2, 3)), cluster="local:2")


def test_a_share_parses_its_own_ranks_lines_the_last_line_and_lines_of_no_rank(tmp_path):
    from converters.readers import megatron_log

    [path] = one_log(tmp_path)
    lines = path.read_text().splitlines(keepends=True)
    lines[3] = "  " + lines[3]  # rank 0's, but not starting with rank:<r>: (every share reads it)
    path.write_text("".join(lines))
    every = megatron_log.read_file(path, Diagnostics())
    assert every[3].rank == 0 and every[-1].rank == 7
    shares = [megatron_log.read_file(path, Diagnostics(), share=(k, 2)) for k in (0, 1)]
    assert shares[0] == [record for record in every if record.rank % 2 == 0] + [every[-1]]
    assert shares[1] == [every[3]] + [record for record in every if record.rank % 2 == 1]


def test_one_big_log_is_shared_by_default_and_let_go_of_only_when_memory_is_short(tmp_path, monkeypatch):
    from converters import api
    from converters.builders import per_rank

    paths = one_log(tmp_path)
    here = etc.convert(paths, tmp_path / "here.json", diagnostics=Diagnostics())
    monkeypatch.setattr(api, "WORKERS_MIN_BYTES", paths[0].stat().st_size)
    monkeypatch.setattr(per_rank, "SHARED_FILES_MIN_BYTES", paths[0].stat().st_size)
    there = etc.convert(paths, tmp_path / "there.json", diagnostics=Diagnostics())
    assert all(rank.nodes for rank in here.ranks.values())  # small: read and drawn here
    assert not any(rank.nodes for rank in there.ranks.values())  # big: shared by the workers
    assert (tmp_path / "there.json").read_bytes() == (tmp_path / "here.json").read_bytes()
    # each worker's only share is kept, unless drawing the log here would not fit the memory
    monkeypatch.setattr(per_rank, "HOLD_BYTES_PER_WORKER", 0)
    for memory, kept in ((64 << 30, "list"), (1 << 10, "LetGo")):
        monkeypatch.setattr(per_rank, "available_memory", lambda: memory)
        with per_rank.start_workers(megatron.MEGATRON, paths, Options(jobs=2), streaming=True) as workers:
            workers.keep_parts(Diagnostics())
            assert workers.step(_kept_as, None, "probing") == [kept, kept]


def _kept_as(fmt, options, kept, _):
    return kept, type(kept).__name__


def test_a_worker_lets_go_of_a_placed_ranks_template_and_times(tmp_path, monkeypatch):
    # a worker places its ranks one at a time (`_placer`): a log's rank, with a node list of its
    # own, leaves nothing in the planner for the next one (its layout was about 12 MB a rank
    # on benchmark 6, kept until the step ended); its process keeps what it needs
    import gc
    import weakref
    from dataclasses import replace

    from converters.writers import layout_chrome

    made = []
    real = layout_chrome._Template.__init__

    def recording(self, *args, **kwargs):
        real(self, *args, **kwargs)
        made.append(weakref.ref(self))

    monkeypatch.setattr(layout_chrome._Template, "__init__", recording)
    trace = etc.read(synthetic_logs(tmp_path))
    ranks = [trace.ranks[r] for r in sorted(trace.ranks)]
    shell = replace(trace, ranks={rank.rank: replace(rank, nodes=[]) for rank in ranks})
    shift = min(node.start_ns for rank in ranks for node in rank.nodes)
    mine, place = rank_timelines._placer(ranks[:3], (shell, shift, frozenset(r.rank for r in ranks[:3])))
    for k, rank in enumerate(mine):
        process = place(rank, [])
        assert len(made) == k + 1 and made[k]() is not None  # the process holds its template
        del process
        gc.collect()
        assert made[k]() is None


def test_a_worker_short_of_memory_holds_one_built_rank_at_a_time(tmp_path, monkeypatch):
    # a let-go share builds its ranks again one at a time for each step; the placing step also
    # kept each to its end, and the loops over the ranks kept the last one while the next was
    # built: a worker held all its ranks' nodes at once again (benchmark 6: 220 MB a worker;
    # 155 MB once it holds one). Each worker notes, as it starts building a rank, how many
    # built ranks it holds: none.
    from converters.builders import per_rank

    paths = one_log(tmp_path)
    counts = ranks_held_at_each_build(tmp_path, monkeypatch)
    shared_by_workers(monkeypatch)
    short_of_memory(monkeypatch)
    monkeypatch.setattr(per_rank, "HOLD_BYTES_PER_WORKER", 0)
    etc.convert(paths, tmp_path / "t.json", diagnostics=Diagnostics(), jobs=2)
    # 8 ranks built for their summaries, to measure them, to place them and to print them
    assert counts.read_text().split() == ["0"] * 32
    counts.unlink()
    etc.convert(paths, tmp_path / "set" / "w", to="chakra", diagnostics=Diagnostics(), jobs=2)
    assert set(counts.read_text().split()) == {"0"}


def ranks_held_at_each_build(tmp_path: Path, monkeypatch) -> Path:
    """The file to which each forked worker appends, as it starts building a log's rank, how
    many built ranks it holds."""
    import gc

    from converters.model import Rank

    counts = tmp_path / "counts"
    real = megatron._RankBuilder.build

    def counting(self, *args):
        gc.collect()
        with open(counts, "a") as out:
            out.write(f"{sum(1 for o in gc.get_objects() if isinstance(o, Rank) and o.nodes)}\n")
        return real(self, *args)

    monkeypatch.setattr(megatron._RankBuilder, "build", counting)
    return counts


def test_the_user_s_memory_limit_makes_workers_build_ranks_one_at_a_time_with_the_same_bytes(tmp_path, monkeypatch):
    # --memory on a machine with memory to spare (a shared login node): the workers plan with the
    # limit, not the machine's 64 GiB, and let go of their shares as when memory is short
    from converters.builders import per_rank

    paths = one_log(tmp_path)
    shared_by_workers(monkeypatch)
    monkeypatch.setattr(per_rank, "available_memory", lambda: 64 << 30)
    monkeypatch.setattr(per_rank, "HOLD_BYTES_PER_WORKER", 0)
    etc.convert(paths, tmp_path / "free.json", diagnostics=Diagnostics(), jobs=2)
    counts = ranks_held_at_each_build(tmp_path, monkeypatch)
    etc.convert(paths, tmp_path / "held.json", diagnostics=Diagnostics(), jobs=2)
    assert counts.read_text().split() != ["0"] * 32  # the memory to spare: the workers keep their ranks
    counts.unlink()
    etc.convert(paths, tmp_path / "capped.json", diagnostics=Diagnostics(), jobs=2, memory=1 << 20)
    assert counts.read_text().split() == ["0"] * 32
    assert (tmp_path / "capped.json").read_bytes() == (tmp_path / "free.json").read_bytes()
