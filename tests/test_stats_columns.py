"""`stats` of a Chakra set every rank of which declares measured times, from its nodes as
columns (readers/chakra.load_measured_columns, the numbers in C: converters/_stats.c), equals
`stats` of the same set read as Nodes (stats_of over measured_timeline), number for number;
and every set the columns cannot stand for is declined, so that `stats` reads Nodes."""

from __future__ import annotations

import gzip
import shutil
from array import array
from pathlib import Path

import pytest
from conftest import LOG_SETS, SAMPLES
from helpers.scheduler_synth import coll, compute, recv, send, trace_of
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from test_chakra_writer import models, write

from converters import api, stats
from converters._proto import et_def_pb2 as pb
from converters._proto.wire import frames, varint
from converters.diagnostics import Diagnostics
from converters.model import CollType
from converters.options import Options
from converters.readers.chakra import NodeDecoder, load_measured_columns
from converters.timeline import timeline_for

needs_c = pytest.mark.skipif(stats._numbers is None, reason="converters/_stats.c was not built")


def by_columns(path: Path) -> dict | None:
    return stats.measured_set_stats([path], "auto", Options(), Diagnostics())


def by_nodes(path: Path) -> dict:
    trace = api.read(path)
    return stats.stats_of(trace, timeline_for(trace))


def chakra_set_of(source: Path, folder: Path, *layout: str) -> Path:
    options = dict(zip(layout[::2], map(int, layout[1::2])))
    api.convert(source, folder / "w", to="chakra", **{k.lstrip("-"): v for k, v in options.items()})
    return folder


@pytest.fixture(scope="module")
def measured_sets(tmp_path_factory) -> dict[str, Path]:
    """Chakra sets et-convert writes from the samples' measured runs: Megatron log sets, a
    one-file Megatron log and PyTorch profiler traces of 4 gloo ranks."""
    from helpers.megatron_synth import write_run

    sets = {name: chakra_set_of(SAMPLES / name, tmp_path_factory.mktemp(name), *layout)
            for name, layout in LOG_SETS.items()}
    sets["megatron_rank4_pp_tp2.log"] = chakra_set_of(SAMPLES / "megatron_rank4_pp_tp2.log", tmp_path_factory.mktemp("one"))
    sets["pytorch_gloo_4rank"] = chakra_set_of(SAMPLES / "pytorch_gloo_4rank", tmp_path_factory.mktemp("kineto"))
    logs = write_run(tmp_path_factory.mktemp("synth_logs"), stages=4, tp=2, microbatches=8)
    sets["synthetic 1F1B"] = chakra_set_of(logs, tmp_path_factory.mktemp("synth"), "--tp", "2", "--pp", "4")
    return sets


@needs_c
@pytest.mark.parametrize("name", [*LOG_SETS, "megatron_rank4_pp_tp2.log", "pytorch_gloo_4rank", "synthetic 1F1B"])
def test_a_measured_set_gives_the_same_stats_by_columns_as_by_nodes(measured_sets, name):
    path = measured_sets[name]
    found = by_columns(path)
    assert found is not None and found == by_nodes(path)
    assert stats.render(found) == stats.render(by_nodes(path))
    assert found["slowest_collectives"] or name == "megatron_rank4_pp_tp2.log"  # (the names are read back)
    trace, columns = load_measured_columns(sorted(path.glob("*.et")), Options())
    assert all(not rank.nodes for rank in trace.ranks.values())
    assert sum(map(len, (c.start_ns for c in columns.ranks.values()))) == api.read(path).node_count()


@needs_c
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(trace=models(measured=True, least_nodes=1) | models())
def test_random_measured_sets_give_the_same_stats_by_columns_as_by_nodes(trace, tmp_path_factory):
    folder = tmp_path_factory.mktemp("random")
    write(trace, folder / "w")
    found = by_columns(folder)
    # declined as well: a rank none of whose first messages has a start time (all at 0 µs, which
    # protobuf leaves out), which the reader of Nodes reads by another route (and may share)
    lookahead = NodeDecoder.MEASURED_LOOKAHEAD
    readable = (trace.timing == "measured" and not trace.metadata.get("scaling_mode") and trace.node_count()
                and all(any(node.start_ns for node in rank.nodes[:lookahead]) for rank in trace.ranks.values()))
    assert (found is not None) == bool(readable)
    event("read as columns" if found is not None else "declined")
    if found is not None:
        assert found == by_nodes(folder)


@st.composite
def close_runs(draw):
    """Measured runs whose times are a few µs apart, so that members of an instance often start
    or end together (ties decide which rank is named) and steps overlap their communication."""
    world = draw(st.integers(2, 4))
    programs = {}
    for r in range(world):
        nodes = []
        for i in range(draw(st.integers(1, 10))):
            kind = draw(st.sampled_from(["compute", "world", "tp", "dp", "send", "recv"]))
            if kind == "compute":
                node = compute(i, 0)
            elif kind in ("send", "recv"):
                node = (send if kind == "send" else recv)(i, (r + 1) % world, draw(st.integers(1, 9)))
                if kind == "recv" and draw(st.booleans()):
                    node.args["wait_ns"] = 1000 * draw(st.integers(0, 3))
            else:
                node = coll(i, CollType.ALL_REDUCE, draw(st.integers(1, 9)), group={"world": None, "tp": 1, "dp": 2}[kind])
            node.start_ns, node.duration_ns = 1000 * draw(st.integers(1, 4)), 1000 * draw(st.integers(0, 3))
            node.parent = draw(st.none() | st.integers(0, i))
            nodes.append(node)
        programs[r] = nodes
    trace = trace_of(programs)
    trace.add_group("tp", (0, 1))
    trace.add_group("dp", tuple(range(world)))
    trace.timing = "measured"
    return trace


@needs_c
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(trace=close_runs(), limit=st.integers(1, 3))
def test_close_runs_give_the_same_stats_by_columns_as_by_nodes(trace, limit, tmp_path_factory):
    folder = tmp_path_factory.mktemp("close")
    write(trace, folder / "w")
    found = by_columns(folder)
    assert found is not None and found == by_nodes(folder)
    # fewer slowest instances than tie: the first in order are kept, as heapq.nsmallest keeps them
    read = api.read(folder)
    slowest = stats.slowest_collectives(read, timeline_for(read), limit=limit)
    assert stats.columns_stats(*load_measured_columns(sorted(folder.glob("*.et")), Options()),
                               limit=limit)["slowest_collectives"] == slowest


def test_the_library_gives_what_the_command_prints(measured_sets, cli):
    """etc.stats_for: `et-convert stats --json`'s object, for a measured set (by columns where
    _stats.c was built) and for a workload (scheduled)."""
    import orjson

    import converters as etc

    for path in (measured_sets["megatron_tp2_pp2_dp1"], SAMPLES / "workloads" / "astra_data.txt"):
        printed = cli("stats", path, "--json", *(["--num-npus", "8"] if path.suffix else []))
        assert printed.code == 0, printed.stderr
        kwargs = {"num_npus": 8} if path.suffix else {}
        assert etc.stats_for(path, **kwargs) == orjson.loads(printed.stdout)
    assert etc.stats_for(path, num_npus=8)["timing"] == "scheduled"


@needs_c
def test_a_gzipped_set_reads_as_columns_too(measured_sets, tmp_path):
    for path in measured_sets["megatron_tp2_pp2_dp1"].iterdir():
        if path.suffix == ".et":
            (tmp_path / (path.name + ".gz")).write_bytes(gzip.compress(path.read_bytes()))
        else:
            shutil.copy(path, tmp_path / path.name)
    assert by_columns(tmp_path) == by_nodes(measured_sets["megatron_tp2_pp2_dp1"])


def rewritten(source: Path, folder: Path, rank: int, change) -> Path:
    """A copy of a set whose rank's file has its node messages changed by change(messages)."""
    shutil.copytree(source, folder, dirs_exist_ok=True)
    path = next(folder.glob(f"*.{rank}.et"))
    data = path.read_bytes()
    messages = [data[start:end] for _, start, end in frames(data)]
    path.write_bytes(b"".join(varint(len(m)) + m for m in [messages[0], *change(messages[1:])]))
    return folder


@needs_c
def test_sets_the_columns_cannot_stand_for_are_declined(measured_sets, tmp_path):
    source = measured_sets["megatron_tp2_pp2_dp1"]
    assert by_columns(SAMPLES / "chakra_data") is None  # another tool's set: no times declared
    scaling = chakra_set_of(SAMPLES / "megatron_rank2_moe_scaling.log", tmp_path / "scaling")
    assert by_nodes(scaling)["timing"] == "measured" and by_columns(scaling) is None
    # a message with inputs (IOInfo): the scan takes attributes only; the numbers are the same
    with_inputs = pb.Node(id=10_000, name="x", type=4, start_time_micros=5, duration_micros=2,
                          inputs=pb.IOInfo(values="[1]")).SerializeToString()
    bent = rewritten(source, tmp_path / "bent", 1, lambda messages: [*messages, with_inputs])
    assert by_columns(bent) is None and by_nodes(bent)["ranks"]["1"]["finish_ns"] >= 0
    # a rank whose metadata does not declare the times (another run's file): read as Nodes,
    # where its first node, at 0 µs (protobuf leaves it out), has no start time: scheduled
    plain = pb.GlobalMetadata(version="0.0.4").SerializeToString()
    mixed = tmp_path / "mixed"
    shutil.copytree(source, mixed)
    path = next(mixed.glob("*.2.et"))
    data = path.read_bytes()
    nodes_at = next(frames(data))[2]
    path.write_bytes(varint(len(plain)) + plain + data[nodes_at:])
    assert by_columns(mixed) is None and by_nodes(mixed)["timing"] == "scheduled"
    # a node with an error: the reader of Nodes says what is wrong
    bad = pb.Node(id=10_000, name="ar", type=7, start_time_micros=3,
                  attr=[pb.AttributeProto(name="comm_type", int64_val=42)]).SerializeToString()
    broken = rewritten(source, tmp_path / "broken", 0, lambda messages: [*messages, bad])
    assert by_columns(broken) is None
    with pytest.raises(Exception, match="comm_type 42 is not a CollectiveCommType"):
        by_nodes(broken)


@needs_c
def test_without_the_c_numbers_stats_reads_nodes(measured_sets, monkeypatch):
    path = measured_sets["megatron_tp1_pp2_dp2"]
    expected = by_columns(path)
    monkeypatch.setattr(stats, "_numbers", None)
    assert by_columns(path) is None and by_nodes(path) == expected


@needs_c
def test_the_python_scan_gives_the_same_columns(measured_sets, monkeypatch):
    """Without _head.c the columns come from wire.python_measured_columns: the same numbers."""
    from converters._proto import wire
    from converters.readers import chakra

    path = measured_sets["megatron_tp1_pp4_dp1"]
    expected = by_columns(path)
    monkeypatch.setattr(chakra, "measured_columns", wire.python_measured_columns)
    assert by_columns(path) == expected


@needs_c
def test_values_beyond_64_bits_are_left_to_python(measured_sets):
    trace, columns = load_measured_columns(sorted(measured_sets["megatron_tp2_pp2_dp1"].glob("*.et")), Options())
    kind, size, group, wait = columns.facts[0]
    columns.facts[0] = (kind, 1 << 63, group, wait)
    assert stats.columns_stats(trace, columns) is None
    # a start and a duration whose end is past 64 bits
    one = array("q", [(1 << 63) - 10]), array("q", [20]), array("q", [-1]), array("q", [0])
    table = array("q", [0])
    assert stats._numbers([tuple(map(memoryview, one))], b"\x01", table, array("q", [-1]), array("q", [-1]),
                          table, 0, 0, 5) is None


@needs_c
def test_the_numbers_check_their_arguments():
    q = array("q", [0])
    column = memoryview(q)
    rank = (column, column, column, column)
    with pytest.raises(TypeError):
        stats._numbers([rank], b"\x00", q, q, q)
    with pytest.raises(ValueError, match="wrong length"):
        stats._numbers([rank], b"\x00\x00", q, q, q, q, 0, 0, 5)
    with pytest.raises(ValueError, match="out of range"):
        stats._numbers([rank], b"\x02", q, array("q", [-1]), array("q", [-1]), q, 0, 0, 5)  # a send with no row
    with pytest.raises(ValueError, match="template out of range"):
        stats._numbers([(column, column, column, memoryview(array("q", [3])))], b"\x00", q, array("q", [-1]),
                       array("q", [-1]), q, 0, 0, 5)
    with pytest.raises(TypeError, match="int64"):
        stats._numbers([(memoryview(b"12345678"), column, column, column)], b"\x00", q, array("q", [-1]),
                       array("q", [-1]), q, 0, 0, 5)
    assert stats._numbers([], b"", array("q"), array("q"), array("q"), array("q"), 0, 0, 5) == ([], [], [])
