"""The Chakra writer: what ASTRA-sim needs, what mlc-chakra reads, shared graphs, round trips."""

from __future__ import annotations

import io
import json
from pathlib import Path

from chakra.schema.protobuf import et_def_pb2 as ref
from chakra.src.third_party.utils.protolib import decodeMessage, encodeMessage, openFileRd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import SAMPLES, run_cli
from converters._proto.wire import KEPT_ARGS
from converters.diagnostics import Diagnostics, InputError
from converters.model import CollType, ExecutionTrace, Group, Node, NodeKind, Rank, WireAttr
from converters.options import Options
from converters.readers import chakra as reader
from converters.writers import chakra as writer


def read_with_reference(path: Path):
    """(GlobalMetadata, [Node]) exactly as mlc-chakra's reader sees the file."""
    with openFileRd(str(path)) as f:
        meta = ref.GlobalMetadata()
        assert decodeMessage(f, meta)
        nodes = []
        while True:
            node = ref.Node()
            if not decodeMessage(f, node):
                return meta, nodes
            nodes.append(node)


def attrs_of(node) -> dict:
    return {a.name: (a.WhichOneof("value"), getattr(a, a.WhichOneof("value"))) for a in node.attr}


def write(trace: ExecutionTrace, prefix: Path, diagnostics: Diagnostics | None = None) -> Path:
    writer.write(trace, prefix, Options(), diagnostics or Diagnostics())
    return prefix


def small_trace() -> ExecutionTrace:
    """Two ranks: compute, a TP all-gather, a send/recv pair, a memory load, odd ids and ctrl_deps."""
    trace = ExecutionTrace()
    trace.source.format, trace.source.files, trace.source.sha256 = "test", ["w.txt"], "ab" * 32
    trace.units = {"time": "ns"}
    tp = trace.add_group("tp", [0, 1])
    trace.add_group("dp", [0])  # used by no node: not written
    trace.assume("backward time = 2 x forward")
    for r in (0, 1):
        p2p = NodeKind.SEND if r == 0 else NodeKind.RECV
        nodes = [
            Node(10, "fwd", NodeKind.COMPUTE, duration_ns=1500, microbatch=0),
            Node(20, "ag", NodeKind.COLLECTIVE, deps=[10], coll=CollType.ALL_GATHER, size=4096, group=tp.id),
            Node(30, "p2p", p2p, deps=[20], size=256, peer=1 - r, tag=7),
            Node(40, "load", NodeKind.MEM_LOAD, deps=[30], ctrl_deps=[10], size=64),
            Node(50, "tiny", NodeKind.COMPUTE, duration_ns=0, deps=[40, 99],
                 attrs=[WireAttr("num_ops", "uint64_val", 12), WireAttr("note", "string_val", "kept")]),
        ]
        trace.ranks[r] = Rank(r, nodes, coords={"tp": r, "pp": 0})
    return trace


def test_astra_sim_attribute_kinds_and_rules(tmp_path):
    diagnostics = Diagnostics()
    write(small_trace(), tmp_path / "w", diagnostics)
    assert json.loads((tmp_path / "w.comm_group.json").read_text()) == {"1": [0, 1]}
    for r in (0, 1):
        meta, nodes = read_with_reference(tmp_path / f"w.{r}.et")
        assert meta.version == "0.0.4"
        assert [n.id for n in nodes] == [0, 1, 2, 3, 4]
        fwd, ag, p2p, load, tiny = nodes
        assert fwd.duration_micros == 2  # 1500 ns rounds up
        assert tiny.duration_micros == 1  # compute lasts at least 1 µs
        assert attrs_of(fwd) == {"microbatch": ("int64_val", 0)}
        assert attrs_of(ag) == {"comm_type": ("int64_val", ref.ALL_GATHER), "comm_size": ("int64_val", 4096),
                                "pg_name": ("string_val", "1"), "is_cpu_op": ("bool_val", False)}
        own, other = ("comm_src", "comm_dst") if r == 0 else ("comm_dst", "comm_src")
        a = attrs_of(p2p)
        assert a[own] == ("int32_val", r) and a[other] == ("int32_val", 1 - r)
        assert a["comm_tag"] == ("int32_val", 7) and a["comm_size"] == ("int64_val", 256)
        assert a["is_cpu_op"] == ("bool_val", False)
        assert attrs_of(load) == {"tensor_size": ("uint64_val", 64)}
        # ctrl_deps folded into data_deps; the dependency on a missing node is dropped
        assert list(load.data_deps) == [2, 0] and not load.ctrl_deps
        assert list(tiny.data_deps) == [3]
        # re-emitted attributes: num_ops moved to the kind ASTRA-sim reads, unknown names kept
        assert attrs_of(tiny) == {"num_ops": ("int64_val", 12), "note": ("string_val", "kept")}
    assert any("dropped 2 dependencies" in m for m in diagnostics.messages())


def test_metadata_names_the_tool_source_and_assumptions(tmp_path):
    write(small_trace(), tmp_path / "w")
    meta, _ = read_with_reference(tmp_path / "w.1.et")
    a = attrs_of(meta)
    assert a["et_convert.version"][0] == "string_val" and a["et_convert.version"][1]
    assert a["source.format"] == ("string_val", "test")
    assert list(a["source.files"][1].values) == ["w.txt"]
    assert a["source.sha256"] == ("string_val", "ab" * 32)
    assert a["source.ranks"] == ("string_val", "0-1")  # what the validator needs to tell a lost file
    assert a["units.time"] == ("string_val", "ns")
    assert a["timing"] == ("string_val", "none")
    assert list(a["assumptions"][1].values) == ["backward time = 2 x forward"]
    assert a["rank"] == ("int64_val", 1) and a["coords.tp"] == ("int64_val", 1)
    assert list(a["group_kinds"][1].values) == ["1=tp"]


def test_rewrite_of_a_sample_normalises_ids_and_mlc_chakra_reads_it(tmp_path):
    out = tmp_path / "copy" / "workload"
    result = run_cli(SAMPLES / "chakra_model", "--from", "chakra", "--to", "chakra", "-o", out)
    assert result.code == 0, result.stderr
    for r in range(4):
        original = read_with_reference(SAMPLES / "chakra_model" / f"workload.{r}.et")[1]
        meta, nodes = read_with_reference(out.parent / f"workload.{r}.et")
        assert meta.version == "0.0.4"
        assert "input_file" not in attrs_of(meta)  # never the whole input text
        assert attrs_of(meta)["source.format"] == ("string_val", "chakra")
        assert [n.id for n in nodes] == list(range(len(original)))
        shift = original[0].id
        assert [[d - shift for d in o.data_deps] for o in original] == [list(n.data_deps) for n in nodes]
        assert [(n.name, n.type, n.duration_micros) for n in nodes] == [
            (o.name, o.type, o.duration_micros) for o in original]
        for o, n in zip(original, nodes):
            if n.type == ref.COMM_COLL_NODE:
                assert attrs_of(n) == {**attrs_of(o), "is_cpu_op": ("bool_val", False)}


def test_mlc_chakra_nodes_read_back_with_identical_fields(tmp_path):
    """The reverse direction: nodes made and framed by mlc-chakra, read by us, written back by us."""
    node = ref.Node(
        id=5, name="all", type=ref.COMM_COLL_NODE, ctrl_deps=[3], data_deps=[4], start_time_micros=0,
        duration_micros=17, inputs=ref.IOInfo(values="v", shapes="s", types="t"), outputs=ref.IOInfo(),
        attr=[ref.AttributeProto(name="comm_type", int64_val=ref.ALL_TO_ALL),
              ref.AttributeProto(name="comm_size", int64_val=1 << 40),
              ref.AttributeProto(name="involved_dim", bool_list=ref.BoolList(values=[True, False])),
              ref.AttributeProto(name="x", doc_string="d", double_val=0.5)],
    )
    deps = [ref.Node(id=i, name=f"d{i}", type=ref.COMP_NODE, duration_micros=1) for i in (3, 4)]
    buffer = io.BytesIO()
    encodeMessage(buffer, ref.GlobalMetadata(version="0.0.4"))
    for n in (*deps, node):
        encodeMessage(buffer, n)
    (tmp_path / "r.0.et").write_bytes(buffer.getvalue())
    ours = reader.load([tmp_path / "r.0.et"], Options(), Diagnostics()).ranks[0].nodes[2]
    assert (ours.id, ours.name, int(ours.kind), ours.ctrl_deps, ours.deps) == (5, "all", 7, [3], [4])
    assert (ours.duration_ns, ours.inputs, ours.outputs) == (17_000, ("v", "s", "t"), ("", "", ""))
    assert [(a.name, a.kind, a.value, a.doc) for a in ours.attrs] == [
        ("comm_type", "int64_val", 6, ""), ("comm_size", "int64_val", 1 << 40, ""),
        ("involved_dim", "bool_list", [True, False], ""), ("x", "double_val", 0.5, "d")]
    assert (ours.coll, ours.size) == (CollType.ALL_TO_ALL, 1 << 40)


def shared_and_copied(world: int = 4):
    """The same job twice: once with one shared node list and maps, once with a list per rank."""
    shared, copied = ExecutionTrace(), ExecutionTrace()
    for t in (shared, copied):
        for pair in ((0, 1), (2, 3)):
            t.groups[len(t.groups) + 1] = Group(len(t.groups) + 1, "tp", pair)
    def nodes_for(rank: int) -> list[Node]:
        group = 1 if rank < 2 else 2
        peer = rank ^ 1
        return [
            Node(0, "c", NodeKind.COMPUTE, duration_ns=5000),
            Node(1, "ar", NodeKind.COLLECTIVE, deps=[0], coll=CollType.ALL_REDUCE, size=100, group=group),
            Node(2, "s", NodeKind.SEND, deps=[1], size=8, peer=peer, tag=1),
            Node(3, "r", NodeKind.RECV, deps=[1], size=8, peer=peer, tag=1),
            Node(4, "c2", NodeKind.COMPUTE, duration_ns=1, deps=[2, 3]),
        ]
    common = nodes_for(0)
    for r in range(world):
        shared.ranks[r] = Rank(r, common, group_map={1: 1 if r < 2 else 2}, peer_map={1: r ^ 1})
        copied.ranks[r] = Rank(r, nodes_for(r))
    return shared, copied


def test_shared_node_lists_give_the_same_bytes_as_per_rank_lists(tmp_path):
    shared, copied = shared_and_copied()
    write(shared, tmp_path / "a" / "w")
    write(copied, tmp_path / "b" / "w")
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert names == ["w.0.et", "w.1.et", "w.2.et", "w.3.et", "w.comm_group.json"]
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    _, nodes = read_with_reference(tmp_path / "a" / "w.3.et")
    assert attrs_of(nodes[1])["pg_name"] == ("string_val", "2")
    assert attrs_of(nodes[2])["comm_dst"] == ("int32_val", 2) and attrs_of(nodes[3])["comm_src"] == ("int32_val", 2)


def test_output_does_not_depend_on_rank_insertion_order(tmp_path):
    _, forward = shared_and_copied()
    _, backward = shared_and_copied()
    backward.ranks = dict(reversed(list(backward.ranks.items())))
    write(forward, tmp_path / "f" / "w")
    write(backward, tmp_path / "b" / "w")
    for p in (tmp_path / "f").iterdir():
        assert p.read_bytes() == (tmp_path / "b" / p.name).read_bytes()


def test_rewriting_a_smaller_set_removes_stale_rank_files(tmp_path):
    shared, _ = shared_and_copied(4)
    write(shared, tmp_path / "w")
    smaller, _ = shared_and_copied(2)
    write(smaller, tmp_path / "w")
    assert sorted(p.name for p in tmp_path.glob("w.*.et")) == ["w.0.et", "w.1.et"]


# -- property: random valid models survive write -> read in every field Chakra carries ---------

KINDS = [NodeKind.COMPUTE, NodeKind.COLLECTIVE, NodeKind.SEND, NodeKind.RECV, NodeKind.MEM_LOAD,
         NodeKind.MEM_STORE, NodeKind.METADATA]


@st.composite
def models(draw, measured: bool | None = None, least_nodes: int = 0):
    """Random models; `measured`: with a run's times (True), without (False) or either; each rank
    has at least `least_nodes` nodes."""
    world = draw(st.integers(1, 3))
    trace = ExecutionTrace()
    if draw(st.booleans()) if measured is None else measured:  # a run's measured times (whole µs, as Chakra keeps them; the first at 0)
        trace.timing, trace.time_origin_ns = "measured", draw(st.integers(0, 1 << 50))
        if draw(st.booleans()):  # a scaling-mode log's: no timeline across ranks
            trace.metadata["scaling_mode"] = True
    for members in ((0,), tuple(range(world))):
        trace.add_group("tp", members)
    for r in range(world):
        nodes = []
        for i in range(draw(st.integers(least_nodes, 12))):
            kind = draw(st.sampled_from(KINDS))
            node = Node(i, draw(st.text(max_size=12)), kind,
                        duration_ns=1000 * draw(st.integers(1 if kind == NodeKind.COMPUTE else 0, 10**6)),
                        deps=sorted(draw(st.sets(st.integers(0, i - 1), max_size=3))) if i else [],
                        microbatch=draw(st.none() | st.integers(0, 64)))
            if node.is_comm:
                node.size = draw(st.integers(1, 1 << 40))
                if kind == NodeKind.COLLECTIVE:
                    node.coll = draw(st.sampled_from(list(CollType)))
                    node.group = draw(st.none() | st.sampled_from(sorted(trace.groups)))
                else:
                    node.peer = draw(st.integers(0, world - 1))
                    node.tag = draw(st.integers(0, 1 << 30))
            elif kind in (NodeKind.MEM_LOAD, NodeKind.MEM_STORE):
                node.size = draw(st.integers(0, 1 << 62))
            if trace.timing == "measured":
                node.start_ns = 1000 * draw(st.integers(0, 10**9))
                node.parent = draw(st.none() | st.integers(0, i))  # (itself: a step of its own)
                node.stream = draw(st.sampled_from(["", "cpu", "stream 7"]))
                if node.kind in (NodeKind.SEND, NodeKind.RECV) and draw(st.booleans()):
                    node.args["fused"] = draw(st.sampled_from(["send_forward_recv_backward", "x"]))
                if node.kind == NodeKind.RECV and draw(st.booleans()):
                    node.args["wait_ns"] = draw(st.integers(0, 1 << 40))
            nodes.append(node)
        trace.ranks[r] = Rank(r, nodes)
    return trace


def carried(node: Node) -> tuple:
    return (node.id, node.name, node.kind, node.duration_ns, node.deps, node.coll, node.size,
            node.group, node.peer, node.tag if node.kind in (NodeKind.SEND, NodeKind.RECV) else None,
            node.microbatch, node.start_ns, node.parent, node.stream, [node.args.get(key) for key in KEPT_ARGS])


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(trace=models())
def test_random_models_round_trip_through_et_files(trace, tmp_path_factory):
    out = tmp_path_factory.mktemp("prop")
    write(trace, out / "w")
    files = sorted(out.glob("w.*.et"))
    back = reader.load(files, Options(), Diagnostics())
    assert sorted(back.ranks) == sorted(trace.ranks)
    # a measured set reads back measured, even with a node at 0 µs, which protobuf leaves out
    measured = trace.timing == "measured" and trace.node_count() > 0
    assert (back.timing, back.time_origin_ns) == (("measured", trace.time_origin_ns) if measured else ("none", 0))
    assert back.metadata.get("scaling_mode") == (trace.metadata.get("scaling_mode") if measured else None)
    for r, rank in trace.ranks.items():
        assert [carried(n) for n in back.ranks[r].nodes] == [carried(n) for n in rank.nodes]
    used = {n.group for rank in trace.ranks.values() for n in rank.nodes if n.group is not None}
    assert {g: back.groups[g].members for g in back.groups} == {g: trace.groups[g].members for g in used}
    assert all(back.groups[g].kind == "tp" for g in used)


# -- reading back: ranks with the same graph share one node list --------------------------------


def test_ranks_with_the_same_graph_are_read_into_one_shared_list(tmp_path):
    shared, copied = shared_and_copied()
    write(shared, tmp_path / "w")
    back = reader.load(sorted(tmp_path.glob("w.*.et")), Options(), Diagnostics())
    assert all(back.ranks[r].nodes is back.ranks[0].nodes for r in range(4))
    for r, rank in copied.ranks.items():
        got = back.ranks[r]
        assert [(got.group_of(n), got.peer_of(n)) for n in got.nodes] == [(n.group, n.peer) for n in rank.nodes]


def test_a_shared_read_dumps_and_rewrites_byte_identical(tmp_path):
    from converters.readers import et_json as json_reader
    from converters.writers import et_json as json_writer

    shared, _ = shared_and_copied()
    write(shared, tmp_path / "a" / "w")
    back = reader.load(sorted((tmp_path / "a").glob("w.*.et")), Options(), Diagnostics())
    json_writer.write(back, tmp_path / "d.json", Options(), Diagnostics())
    again = json_reader.load([tmp_path / "d.json"], Options(), Diagnostics())
    writer.write(again, tmp_path / "b" / "w", Options(), Diagnostics())
    for r in range(4):
        assert (tmp_path / "b" / f"w.{r}.et").read_bytes() == (tmp_path / "a" / f"w.{r}.et").read_bytes()


def test_files_whose_own_rank_values_are_off_keep_their_own_lists(tmp_path):
    """A send whose comm_src is not its rank cannot be rebuilt from a shared list: no sharing."""
    for r in (0, 1):
        buffer = io.BytesIO()
        encodeMessage(buffer, ref.GlobalMetadata(version="0.0.4"))
        encodeMessage(buffer, ref.Node(id=0, name="s", type=ref.COMM_SEND_NODE, attr=[
            ref.AttributeProto(name="comm_size", int64_val=8), ref.AttributeProto(name="comm_src", int32_val=7),
            ref.AttributeProto(name="comm_dst", int32_val=1 - r)]))
        (tmp_path / f"x.{r}.et").write_bytes(buffer.getvalue())
    back = reader.load(sorted(tmp_path.glob("x.*.et")), Options(), Diagnostics())
    assert back.ranks[0].nodes is not back.ranks[1].nodes
    assert [back.ranks[r].peer_of(back.ranks[r].nodes[0]) for r in (0, 1)] == [1, 0]


def test_jobs_do_not_change_bytes_or_warnings(tmp_path):
    trace = small_trace()
    outputs = {}
    for jobs in (1, 3):
        diagnostics = Diagnostics()
        writer.write(trace, tmp_path / f"j{jobs}" / "w", Options(jobs=jobs), diagnostics)
        files = {p.name: p.read_bytes() for p in sorted((tmp_path / f"j{jobs}").iterdir())}
        outputs[jobs] = (files, diagnostics.messages())
    assert outputs[1] == outputs[3]
    assert len(outputs[1][0]) == 3


def test_a_workers_rank_file_job_writes_each_rank_as_an_encoder_of_its_own(tmp_path):
    # the job is one object on a worker: its ranks share one encoder (converters/rank_files.py)
    from dataclasses import replace

    trace = small_trace()
    for rank in trace.ranks.values():  # something to count on each rank: a size-0 send or receive
        rank.nodes.append(Node(60, "empty", rank.nodes[2].kind, deps=[50], size=0, peer=1 - rank.rank, tag=8))
    job = writer.rank_file_job(trace, tmp_path / "out" / "w", tmp_path)
    common = writer.common_metadata_attrs(trace)
    for r, rank in sorted(trace.ranks.items()):
        counts = writer.write_rank_file(rank, job)
        alone = writer.RankEncoder(replace(trace, ranks={r: rank}), Diagnostics(), common)
        assert (tmp_path / f"w.{r}.et").read_bytes() == b"".join(alone.rank_chunks(rank))
        assert counts == alone.counts() == (1, 1, 0, 0)  # the dependency on 99, the size-0 node
    assert not job[0].templates and not job[0].local_groups  # no rank kept alive by the shared encoder


def test_a_set_with_rank_gaps_is_refused_unless_forced(tmp_path):
    import converters

    trace = ExecutionTrace()
    trace.ranks[4] = Rank(4, [Node(0, "c", NodeKind.COMPUTE, duration_ns=1000)])
    with pytest.raises(InputError, match=r"refusing to write a Chakra set .* 4 validation errors: E023 missing rank · rank 0 is missing; present: 4"):
        converters.write(trace, tmp_path / "w", to="chakra")
    assert list(tmp_path.iterdir()) == []
    diagnostics = Diagnostics()
    converters.write(trace, tmp_path / "w", to="chakra", options=Options(force=True), diagnostics=diagnostics)
    assert [p.name for p in tmp_path.glob("w.*.et")] == ["w.4.et"]
    assert diagnostics.messages() == [
        "validate error (written anyway, --force): E023 missing rank · rank 0 is missing; present: 4 (4 like it)"]
