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
    assert f"bad.0.et: byte" in line and "truncated Node message (wanted" in line and "bytes, " in line
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


def test_a_plain_set_leaves_the_parallel_layout_unknown_unless_told():
    files = sorted((SAMPLES / "chakra_data").glob("*.et"))
    assert load(files).parallel.world == 0
    told = chakra.load(files, Options(dp=4), Diagnostics()).parallel
    assert (told.world, told.dp, told.tp) == (4, 4, 1)
