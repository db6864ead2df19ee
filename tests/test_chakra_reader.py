"""The Chakra reader: sample sets, other producers' habits, gzip, groups, and clear errors."""

from __future__ import annotations

import gzip
import io
import json
import shutil
from pathlib import Path

import pytest
from chakra.schema.protobuf import et_def_pb2 as ref
from chakra.src.third_party.utils.protolib import encodeMessage

from conftest import SAMPLES, run_cli
from converters import api
from converters.diagnostics import Diagnostics, InputError
from converters.model import CollType, NodeKind
from converters.options import Options
from converters.readers import chakra


def write_with_reference(path: Path, metadata, nodes) -> Path:
    """A Chakra file framed and encoded by mlc-chakra's own helpers (not our writer)."""
    buffer = io.BytesIO()
    encodeMessage(buffer, metadata)
    for node in nodes:
        encodeMessage(buffer, node)
    path.write_bytes(buffer.getvalue())
    return path


def attr(name: str, **value) -> ref.AttributeProto:
    return ref.AttributeProto(name=name, **value)


def load(paths) -> "chakra.ExecutionTrace":
    return chakra.load([Path(p) for p in paths], Options(), Diagnostics())


# ---------------------------------------------------------------------------------------------


def test_reads_the_reference_model_sample_as_written():
    files = sorted((SAMPLES / "chakra_model").glob("*.et"))
    trace = load(files)
    assert sorted(trace.ranks) == [0, 1, 2, 3]
    assert trace.timing == "none"
    rank1 = trace.ranks[1]
    assert len(rank1.nodes) == 14
    # chakra_converter numbers nodes with one counter over all ranks: rank 1 starts at 14
    assert [n.id for n in rank1.nodes] == list(range(14, 28))
    first, gather = rank1.nodes[0], rank1.nodes[1]
    assert (first.kind, first.name, first.duration_ns) == (NodeKind.COMPUTE, "COMP_NODE_attention_column_FWD", 4_000_000)
    assert (gather.kind, gather.coll, gather.size, gather.deps) == (NodeKind.COLLECTIVE, CollType.ALL_GATHER, 4194304, [14])
    assert gather.group is None
    assert [(a.name, a.kind, a.value) for a in gather.attrs] == [
        ("comm_type", "int64_val", 2), ("comm_size", "int64_val", 4194304)]
    version, meta = rank1.wire_metadata
    assert version == "" and [a.name for a in meta] == ["schema", "input_file"]
    assert rank1.nodes[9].deps == [22, 21]  # order of data_deps kept


def test_reads_the_data_sample_collectives():
    trace = load(sorted((SAMPLES / "chakra_data").glob("*.et")))
    colls = [n for n in trace.ranks[3].nodes if n.kind == NodeKind.COLLECTIVE]
    assert [n.size for n in colls] == [8388608, 33554432, 16777216, 8388608]
    assert all(n.coll == CollType.ALL_REDUCE for n in colls)


def test_gzip_files_read_like_plain_ones(tmp_path):
    plain = SAMPLES / "chakra_model" / "workload.2.et"
    zipped = tmp_path / "workload.2.et"
    zipped.write_bytes(gzip.compress(plain.read_bytes(), mtime=0))
    also = tmp_path / "other.2.et.gz"
    shutil.copy(zipped, also)
    expected = load([plain]).ranks[2].nodes
    assert load([zipped]).ranks[2].nodes == expected
    assert load([also]).ranks[2].nodes == expected
    assert chakra.sniff(zipped.read_bytes()[:65536], zipped)


def test_comm_group_json_and_pg_name_give_groups(tmp_path):
    meta = ref.GlobalMetadata(version="0.0.4")
    for rank in (0, 1):
        nodes = [ref.Node(id=7, name="ar", type=ref.COMM_COLL_NODE, attr=[
            attr("comm_type", int64_val=ref.REDUCE_SCATTER), attr("comm_size", int64_val=64),
            attr("pg_name", string_val="3")])]
        write_with_reference(tmp_path / f"w.{rank}.et", meta, nodes)
    (tmp_path / "w.comm_group.json").write_text(json.dumps({"3": [0, 1], "5": [1]}))
    trace = load([tmp_path / "w.0.et", tmp_path / "w.1.et"])
    assert sorted(trace.groups) == [3, 5] and trace.groups[3].members == (0, 1)
    node = trace.ranks[1].nodes[0]
    assert (node.group, node.coll, node.size) == (3, CollType.REDUCE_SCATTER, 64)


def test_plain_comm_group_json_is_found_too(tmp_path):
    write_with_reference(tmp_path / "w.0.et", ref.GlobalMetadata(version="x"), [])
    (tmp_path / "comm_group.json").write_text('{"1": [0]}')
    assert load([tmp_path / "w.0.et"]).groups[1].members == (0,)


def test_other_integer_kinds_are_read_and_their_kinds_kept(tmp_path):
    nodes = [
        ref.Node(id=100, name="s", type=ref.COMM_SEND_NODE, attr=[
            attr("comm_size", uint64_val=4096), attr("comm_src", int64_val=0), attr("comm_dst", uint32_val=1),
            attr("comm_tag", sint32_val=9)]),
        ref.Node(id=101, name="r", type=ref.COMM_RECV_NODE, data_deps=[100], ctrl_deps=[100], attr=[
            attr("comm_size", int32_val=4096), attr("comm_src", fixed32_val=1), attr("comm_dst", int32_val=0),
            attr("comm_tag", int64_val=9)]),
        ref.Node(id=102, name="load", type=ref.MEM_LOAD_NODE, attr=[attr("tensor_size", int64_val=512)]),
    ]
    write_with_reference(tmp_path / "p.0.et", ref.GlobalMetadata(version="0.0.4"), nodes)
    send, recv, mem = load([tmp_path / "p.0.et"]).ranks[0].nodes
    assert (send.kind, send.size, send.peer, send.tag) == (NodeKind.SEND, 4096, 1, 9)
    assert (recv.kind, recv.size, recv.peer, recv.tag) == (NodeKind.RECV, 4096, 1, 9)
    assert recv.ctrl_deps == [100] and recv.deps == [100]
    assert [a.kind for a in send.attrs] == ["uint64_val", "int64_val", "uint32_val", "sint32_val"]
    assert (mem.kind, mem.size) == (NodeKind.MEM_LOAD, 512)


def test_io_info_and_start_times_are_kept(tmp_path):
    nodes = [ref.Node(id=i, name=f"n{i}", type=ref.COMP_NODE, start_time_micros=10 + i, duration_micros=3,
                      inputs=ref.IOInfo(values="[1]", shapes="[[2]]", types="['f']")) for i in range(2)]
    write_with_reference(tmp_path / "t.0.et", ref.GlobalMetadata(version="0.0.4"), nodes)
    trace = load([tmp_path / "t.0.et"])
    assert trace.timing == "measured"
    assert [n.start_ns for n in trace.ranks[0].nodes] == [10_000, 11_000]
    assert trace.ranks[0].nodes[0].inputs == ("[1]", "[[2]]", "['f']")
    assert trace.ranks[0].nodes[0].outputs is None


def test_a_measured_set_of_ours_takes_back_only_what_its_writer_writes(tmp_path, cli):
    # our metadata says measured: a node without a start began at 0, and the attributes the
    # writer keeps are taken back only in the kind it writes them (others stay attributes)
    ours = ref.GlobalMetadata(version="0.0.4", attr=[attr("timing", string_val="measured"),
                                                     attr("time_origin_ns", int64_val=7)])
    nodes = [ref.Node(id=0, name="step", type=ref.COMP_NODE, duration_micros=9, attr=[attr("stream", string_val="cpu")]),
             ref.Node(id=1, name="sub", type=ref.COMP_NODE, start_time_micros=2, duration_micros=3,
                      attr=[attr("parent", int64_val=0), attr("wait_ns", string_val="soon"),
                            attr("fused", string_val="send_forward_recv_backward")])]
    write_with_reference(tmp_path / "t.0.et", ours, nodes)
    trace = load([tmp_path / "t.0.et"])
    step, sub = trace.ranks[0].nodes
    assert (trace.timing, trace.time_origin_ns) == ("measured", 7)
    assert (step.start_ns, step.stream, step.parent) == (0, "cpu", None)
    assert (sub.start_ns, sub.parent, sub.args) == (2000, 0, {"fused": "send_forward_recv_backward"})
    assert cli("stats", tmp_path).code == 0
    # another tool's file: the same attributes mean nothing, and no start means no times
    write_with_reference(tmp_path / "t.0.et", ref.GlobalMetadata(version="0.0.4"), nodes)
    trace = load([tmp_path / "t.0.et"])
    step, sub = trace.ranks[0].nodes
    assert trace.timing == "none" and (step.start_ns, step.stream, sub.parent, sub.args) == (None, "", None, {})


def test_rank_comes_from_the_name(tmp_path):
    write_with_reference(tmp_path / "w.12.et", ref.GlobalMetadata(version="v"), [])
    assert list(load([tmp_path / "w.12.et"]).ranks) == [12]
    write_with_reference(tmp_path / "trace.et", ref.GlobalMetadata(version="v"), [])
    assert list(load([tmp_path / "trace.et"]).ranks) == [0]
    with pytest.raises(InputError, match="cannot tell the rank"):
        load([tmp_path / "w.12.et", tmp_path / "trace.et"])
    shutil.copy(tmp_path / "w.12.et", tmp_path / "x.12.et")
    with pytest.raises(InputError, match="rank 12 is given twice"):
        load([tmp_path / "w.12.et", tmp_path / "x.12.et"])


def test_unknown_node_type_and_comm_type_are_input_errors(tmp_path):
    path = write_with_reference(tmp_path / "b.0.et", ref.GlobalMetadata(version="v"), [ref.Node(id=1, name="x", type=0)])
    with pytest.raises(InputError, match=r"byte \d+: node 1 'x' has type 0"):
        load([path])
    bad_coll = ref.Node(id=2, name="c", type=ref.COMM_COLL_NODE, attr=[attr("comm_type", int64_val=42)])
    path = write_with_reference(tmp_path / "c.0.et", ref.GlobalMetadata(version="v"), [bad_coll])
    with pytest.raises(InputError, match="comm_type 42 is not a CollectiveCommType"):
        load([path])


def test_sniff_tells_chakra_from_the_other_samples():
    assert chakra.sniff((SAMPLES / "chakra_data" / "workload.0.et").read_bytes(), Path("x"))
    for name in ("chakra_data_workload.txt", "simai_tp8_pp16_1024gpu.txt", "neusight_gpt2_block.tsv",
                 "megatron_rank4_pp_tp2.log", "optimusprime_llama1b_pp8.log"):
        assert not chakra.sniff((SAMPLES / name).read_bytes()[:65536], Path(name)), name
    assert not chakra.sniff(b'{\n  "format": "et-convert.et-json"}', Path("d.json"))


# -- errors through the CLI: exit 2, one line with the byte offset, no output --------------------


def run_bad(tmp_path: Path, data: bytes):
    bad = tmp_path / "bad.0.et"
    bad.write_bytes(data)
    out = tmp_path / "out" / "w"
    result = run_cli(bad, "--from", "chakra", "--to", "chakra", "-o", out)
    assert result.code == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert not out.parent.exists() or not any(out.parent.iterdir())
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    return lines[0]


def test_truncated_file_names_the_byte(tmp_path):
    data = (SAMPLES / "chakra_model" / "workload.0.et").read_bytes()
    line = run_bad(tmp_path, data[:-30])
    assert line.startswith("et-convert: error: ")
    assert "bad.0.et: byte" in line and "truncated Node message (wanted" in line and "bytes, " in line
    offset = int(line.split("byte ")[1].split(":")[0])
    assert 0 < offset < len(data) - 30


def test_garbage_bytes_are_an_input_error(tmp_path):
    line = run_bad(tmp_path, b"\x05\xff\xff\xff\xff\xff" + bytes(range(256)))
    assert "bad.0.et: byte 0: cannot decode GlobalMetadata message" in line


def test_text_given_as_et_is_an_input_error(tmp_path):
    text = (SAMPLES / "chakra_data_workload.txt").read_bytes()
    line = run_bad(tmp_path, text)
    assert "bad.0.et: byte " in line


def test_empty_file_is_an_input_error(tmp_path):
    (tmp_path / "e.0.et").write_bytes(b"")
    with pytest.raises(InputError, match="file is empty"):
        load([tmp_path / "e.0.et"])


def test_sniff_reads_past_the_head_for_a_big_metadata(tmp_path):
    """chakra_converter copies its whole input into the metadata: it may not fit the sniffed head."""
    from converters.formats import detect

    big = ref.GlobalMetadata(attr=[attr("input_file", string_val="DATA\n" + "x" * 200_000)])
    path = write_with_reference(tmp_path / "w.0.et", big, [ref.Node(id=0, name="c", type=ref.COMP_NODE)])
    assert chakra.sniff(path.read_bytes()[:65536], path)
    zipped = tmp_path / "z.0.et"
    zipped.write_bytes(gzip.compress(path.read_bytes(), mtime=0))
    assert chakra.sniff(zipped.read_bytes()[:65536], zipped)
    assert detect([path]) == "chakra"


def test_a_plain_set_has_one_rank_per_file_and_the_rest_data_parallel_unless_told():
    """A set without our metadata does not say its world size, but a simulator runs one rank per
    .et file, so the world is the rank count (not 0, which would read as "unknown" downstream);
    dp fills what --tp/--pp leave so that world = tp · dp · pp, and the assumption says so."""
    files = sorted((SAMPLES / "chakra_data").glob("*.et"))
    trace = load(files)
    assert (trace.parallel.world, trace.parallel.dp, trace.parallel.tp) == (4, 4, 1)
    assert trace.assumptions == [
        "world = 4 ranks, one per .et file up to the highest rank (the set does not say its layout); "
        "dp = 4, what tp 1 · cp 1 · pp 1 leave"]
    told = chakra.load(files, Options(tp=2), Diagnostics())
    assert (told.parallel.world, told.parallel.dp, told.parallel.tp) == (4, 2, 2)
    assert told.assumptions == [
        "world = 4 ranks, one per .et file up to the highest rank (the set does not say its layout); "
        "dp = 2, what tp 2 · cp 1 · pp 1 leave"]
    told = chakra.load(files, Options(dp=4), Diagnostics())
    assert (told.parallel.world, told.parallel.dp, told.parallel.tp, told.assumptions) == (4, 4, 1, [])
    odd = chakra.load(files, Options(tp=3), Diagnostics())  # does not divide: left for the validator (E022)
    assert (odd.parallel.world, odd.parallel.dp, odd.parallel.tp, odd.assumptions) == (4, 1, 3, [])
    gap = chakra.load([f for f in files if not f.name.endswith(".2.et")], Options(), Diagnostics())
    assert (gap.parallel.world, sorted(gap.ranks)) == (4, [0, 1, 3])  # rank 2 is missing, not the world 3


def test_our_own_set_keeps_the_world_its_metadata_records(tmp_path):
    out = tmp_path / "w"
    api.write(api.read(SAMPLES / "workloads" / "astra_data.txt", num_npus=8), out, to="chakra")
    trace = load(sorted(tmp_path.glob("w.*.et"))[:3])
    assert (trace.parallel.world, len(trace.ranks)) == (8, 3)


# -- ranks of one role share one node list ------------------------------------------------------


def role_nodes(rank: int, group: int, to: int, frm: int, name: str = "mb0", src: int | None = None):
    """One pipeline rank: a collective in `group`, a send to `to` and a receive from `frm`."""
    return [
        ref.Node(id=1, name="c", type=ref.COMP_NODE, duration_micros=5),
        ref.Node(id=2, name="ar", type=ref.COMM_COLL_NODE, data_deps=[1], attr=[
            attr("comm_type", int64_val=ref.ALL_REDUCE), attr("comm_size", int64_val=64),
            attr("pg_name", string_val=str(group)), attr("is_cpu_op", bool_val=False)]),
        ref.Node(id=3, name=f"send {name}", type=ref.COMM_SEND_NODE, data_deps=[2], attr=[
            attr("comm_size", int64_val=32), attr("comm_src", int32_val=rank if src is None else src),
            attr("comm_dst", int32_val=to), attr("comm_tag", int32_val=4)]),
        ref.Node(id=4, name="recv", type=ref.COMM_RECV_NODE, data_deps=[1], attr=[
            attr("comm_size", int64_val=32), attr("comm_src", int32_val=frm),
            attr("comm_dst", int32_val=rank), attr("comm_tag", int32_val=4)]),
    ]


def write_role_set(directory: Path, world: int, group_of, **changes) -> list[Path]:
    """`world` ranks in a ring (send to r+1, receive from r-1); `changes[r]` replaces rank r's nodes."""
    paths = []
    for r in range(world):
        meta = ref.GlobalMetadata(version="0.0.4", attr=[attr("rank", int64_val=r)])
        nodes = changes.get(f"r{r}") or role_nodes(r, group_of(r), (r + 1) % world, (r - 1) % world)
        paths.append(write_with_reference(directory / f"w.{r}.et", meta, nodes))
    return paths


def resolved(rank) -> list[tuple]:
    """What a rank's nodes mean for that rank, whatever list it holds."""
    return [(n.id, n.name, n.kind, n.deps, n.size, n.tag, rank.group_of(n), rank.peer_of(n)) for n in rank.nodes]


def alone(path: Path, rank_id: int):
    """The rank read from its file alone (nothing to share with)."""
    return load([path]).ranks[rank_id]


def test_ranks_of_one_role_share_a_list_and_keep_their_own_groups_and_peers(tmp_path):
    # Group ids of 1, 2 and 3 digits and peers beyond 127 (2-byte varints): the files differ in length.
    world = 140
    paths = write_role_set(tmp_path, world, lambda r: [7, 42, 120][r % 3])
    trace = load(paths)
    assert len({id(rank.nodes) for rank in trace.ranks.values()}) == 1
    for r in (0, 1, 2, 126, 127, 128, 139):
        rank = trace.ranks[r]
        assert resolved(rank) == resolved(alone(paths[r], r))
        coll, send, recv = rank.nodes[1:]
        assert (rank.group_of(coll), rank.peer_of(send), rank.peer_of(recv)) == ([7, 42, 120][r % 3], (r + 1) % world, (r - 1) % world)


def test_shared_ranks_dump_their_own_files_byte_for_byte(tmp_path):
    from converters.readers import et_json as et_json_reader
    from converters.writers import chakra as chakra_writer
    from converters.writers import et_json as et_json_writer

    paths = write_role_set(tmp_path, 12, lambda r: 3 + r // 4)
    trace = load(paths)
    assert len({id(rank.nodes) for rank in trace.ranks.values()}) == 1
    et_json_writer.write(trace, tmp_path / "d.json", Options(), Diagnostics())
    back = et_json_reader.load([tmp_path / "d.json"], Options(), Diagnostics())
    chakra_writer.write(back, tmp_path / "out" / "w", Options(), Diagnostics())
    for path in paths:
        assert (tmp_path / "out" / path.name).read_bytes() == path.read_bytes(), path.name


def test_files_given_in_any_order_give_the_same_ranks_and_the_hash_of_the_given_order(tmp_path):
    from converters.api import sha256_of

    paths = write_role_set(tmp_path, 12, lambda r: 3 + r % 2)
    forward, backward = load(paths), load(paths[::-1])
    assert list(backward.ranks) == list(range(12))
    for r in range(12):
        assert resolved(backward.ranks[r]) == resolved(forward.ranks[r])
    assert backward.source.sha256 == sha256_of(paths[::-1]) != forward.source.sha256 == sha256_of(paths)


def test_a_send_that_names_another_rank_keeps_its_own_list(tmp_path):
    odd = role_nodes(5, 3, 6, 4, src=9)  # comm_src must be the own rank (validator E016)
    paths = write_role_set(tmp_path, 8, lambda r: 3, r5=odd)
    trace = load(paths)
    lists = {id(rank.nodes) for rank in trace.ranks.values()}
    assert len(lists) == 2 and id(trace.ranks[5].nodes) != id(trace.ranks[4].nodes)
    send = trace.ranks[5].nodes[2]
    assert [(a.name, a.value) for a in send.attrs if a.name == "comm_src"] == [("comm_src", 9)]
    assert resolved(trace.ranks[6]) == resolved(alone(paths[6], 6))


def test_a_rank_that_needs_one_group_mapped_to_two_keeps_its_own_list(tmp_path):
    def two_collectives(r: int, second: int):
        return role_nodes(r, 3, (r + 1) % 4, (r - 1) % 4) + [ref.Node(id=5, name="ar2", type=ref.COMM_COLL_NODE, attr=[
            attr("comm_type", int64_val=ref.ALL_REDUCE), attr("comm_size", int64_val=64),
            attr("pg_name", string_val=str(second))])]

    # rank 0 issues both collectives in group 3; ranks 1-3 in group 3 and group 4 + r
    paths = write_role_set(tmp_path, 4, lambda r: 3, **{f"r{r}": two_collectives(r, 3 if r == 0 else 4 + r) for r in range(4)})
    trace = load(paths)
    assert trace.ranks[1].nodes is not trace.ranks[0].nodes
    assert trace.ranks[1].nodes is trace.ranks[2].nodes is trace.ranks[3].nodes
    for r in range(4):
        assert resolved(trace.ranks[r]) == resolved(alone(paths[r], r))


def test_per_rank_field_bytes_inside_a_name_do_not_fool_the_split(tmp_path):
    # The bytes of a `comm_src = r` attribute are plain ASCII, so a name can hold them.
    def fake(r: int) -> str:
        return f"x R\x0c\n\x08comm_src8{chr(r)} y"

    paths = write_role_set(tmp_path, 6, lambda r: 3, **{
        f"r{r}": role_nodes(r, 3, (r + 1) % 6, (r - 1) % 6, name=fake(r)) for r in range(6)})
    trace = load(paths)
    for r in range(6):
        assert trace.ranks[r].nodes[2].name == f"send {fake(r)}"
        assert resolved(trace.ranks[r]) == resolved(alone(paths[r], r))


def test_a_per_rank_field_without_a_role_keeps_its_value(tmp_path):
    def with_src_on_collective(r: int):
        nodes = role_nodes(r, 3, (r + 1) % 4, (r - 1) % 4)
        nodes[1].attr.append(attr("comm_src", int32_val=r))  # no role on a collective: each file's own value
        return nodes

    paths = write_role_set(tmp_path, 4, lambda r: 3, **{f"r{r}": with_src_on_collective(r) for r in range(4)})
    trace = load(paths)
    for r in range(4):
        assert [a.value for a in trace.ranks[r].nodes[1].attrs if a.name == "comm_src"] == [r]


def test_ranks_like_a_file_read_before_are_not_decoded_again(tmp_path, monkeypatch):
    decoded = []
    original = chakra.decode
    monkeypatch.setattr(chakra, "decode", lambda *a: decoded.append(a[4]) or original(*a))
    read_node = chakra.NodeDecoder.recipe
    monkeypatch.setattr(chakra.NodeDecoder, "recipe", lambda self, *a: decoded.append("Node") or read_node(self, *a))
    load(write_role_set(tmp_path, 8, lambda r: 3 + r % 2))
    assert decoded.count("GlobalMetadata") == 8
    assert decoded.count("Node") == 4  # the first file's; the others only differ in per-rank fields


def test_a_broken_length_inside_a_per_rank_field_is_still_an_input_error(tmp_path):
    paths = write_role_set(tmp_path, 4, lambda r: 3)
    data = paths[2].read_bytes()
    field = b"R\r\n\x07pg_name\xea\x01\x013"
    assert data.count(field) == 1
    paths[2].write_bytes(data.replace(field, b"R\x0c" + field[2:]))
    with pytest.raises(InputError, match=r"w\.2\.et: byte \d+: cannot decode Node message"):
        load(paths)


def test_a_per_rank_field_longer_than_its_message_says_is_still_an_input_error(tmp_path):
    paths = write_role_set(tmp_path, 4, lambda r: 3)
    data = paths[2].read_bytes()
    field = b"R\r\n\x07pg_name\xea\x01\x013"
    paths[2].write_bytes(data.replace(field, b"R\x0e\n\x07pg_name\xea\x01\x0213"))  # the node's length not updated
    with pytest.raises(InputError, match=r"w\.2\.et: byte \d+: "):
        load(paths)
