"""The et-json dump: valid JSON, every value exact, and `.et -> et-json -> .et` byte-identical."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest
from chakra.schema.protobuf import et_def_pb2 as ref
from chakra.src.third_party.utils.protolib import encodeMessage

from conftest import SAMPLES, run_cli
from converters.diagnostics import Diagnostics, InputError
from converters.options import Options
from converters.readers import et_json as json_reader

U64_MAX = (1 << 64) - 1


def strict_json(path: Path):
    def no_constants(name):
        raise AssertionError(f"non-standard JSON constant {name}")

    return json.loads(path.read_text(encoding="utf-8"), parse_constant=no_constants)


def every_kind_attrs() -> list:
    A = ref.AttributeProto
    return [
        A(name="d", double_val=-0.0), A(name="dn", double_val=math.nan), A(name="di", double_val=-math.inf),
        A(name="dl", double_list=ref.DoubleList(values=[1e308, 5e-324, math.inf])),
        A(name="f", float_val=0.1), A(name="fl", float_list=ref.FloatList(values=[3.4e38, -1.5])),
        A(name="i32", int32_val=-(1 << 31)), A(name="i32l", int32_list=ref.Int32List(values=[-1, 2])),
        A(name="i64", int64_val=-(1 << 63)), A(name="i64l", int64_list=ref.Int64List(values=[(1 << 63) - 1])),
        A(name="u32", uint32_val=(1 << 32) - 1), A(name="u32l", uint32_list=ref.Uint32List(values=[])),
        A(name="u64", uint64_val=U64_MAX), A(name="u64l", uint64_list=ref.Uint64List(values=[U64_MAX, 0])),
        A(name="s32", sint32_val=-5), A(name="s32l", sint32_list=ref.Sint32List(values=[-7])),
        A(name="s64", sint64_val=-(1 << 60)), A(name="s64l", sint64_list=ref.Sint64List(values=[1, -1])),
        A(name="x32", fixed32_val=7), A(name="x32l", fixed32_list=ref.Fixed32List(values=[8])),
        A(name="x64", fixed64_val=U64_MAX), A(name="x64l", fixed64_list=ref.Fixed64List(values=[9])),
        A(name="y32", sfixed32_val=-3), A(name="y32l", sfixed32_list=ref.Sfixed32List(values=[-4])),
        A(name="y64", sfixed64_val=-(1 << 62)), A(name="y64l", sfixed64_list=ref.Sfixed64List(values=[-6])),
        A(name="b", bool_val=True), A(name="bl", bool_list=ref.BoolList(values=[False, True])),
        A(name="s", string_val="ünï\n\"code\""), A(name="sl", string_list=ref.StringList(values=["a", ""])),
        A(name="by", bytes_val=b"\x00\xff\x80"), A(name="byl", bytes_list=ref.BytesList(values=[b"", b"\x01"])),
        A(name="none", doc_string="no value set"),
    ]


def odd_set(directory: Path) -> list[Path]:
    """Two ranks by another producer: huge ids, ctrl_deps, IOInfo, start times, every attribute kind."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank in (0, 1):
        buffer = io.BytesIO()
        encodeMessage(buffer, ref.GlobalMetadata(version="", attr=every_kind_attrs()[:6]))
        base = U64_MAX - 10 if rank else 1 << 60
        nodes = [
            ref.Node(id=base, name="first", type=ref.COMP_NODE, start_time_micros=U64_MAX, duration_micros=U64_MAX,
                     inputs=ref.IOInfo(values="[[1]]", shapes="[[2,3]]", types="['Tensor(float)']"),
                     outputs=ref.IOInfo(), attr=every_kind_attrs()),
            ref.Node(id=base + 1, name="coll", type=ref.COMM_COLL_NODE, ctrl_deps=[base], data_deps=[base, base],
                     attr=[ref.AttributeProto(name="comm_size", uint64_val=(1 << 53) + 1),
                           ref.AttributeProto(name="comm_type", int32_val=ref.BROADCAST)]),
            ref.Node(id=3, name="", type=ref.METADATA_NODE),
        ]
        for node in nodes:
            encodeMessage(buffer, node)
        path = directory / f"odd.{rank}.et"
        path.write_bytes(buffer.getvalue())
        paths.append(path)
    return paths


@pytest.mark.parametrize("sample", ["chakra_data", "chakra_model"])
def test_sample_sets_round_trip_byte_identical_through_the_cli(sample, tmp_path):
    dump = tmp_path / "dump.json"
    result = run_cli(*sorted((SAMPLES / sample).glob("*.et")), "--from", "chakra", "--to", "et-json", "-o", dump)
    assert result.code == 0, result.stderr
    doc = strict_json(dump)
    assert doc["format"] == "et-convert.et-json" and doc["version"] == 1
    assert sorted(doc["ranks"]) == ["0", "1", "2", "3"]
    assert doc["ranks"]["2"]["file"] == "workload.2.et"
    result = run_cli(dump, "--from", "et-json", "--to", "chakra", "-o", tmp_path / "again" / "workload")
    assert result.code == 0, result.stderr
    for original in sorted((SAMPLES / sample).glob("*.et")):
        assert (tmp_path / "again" / original.name).read_bytes() == original.read_bytes(), original.name


def test_every_value_kind_survives_the_dump_exactly(tmp_path):
    originals = odd_set(tmp_path / "in")
    dump = tmp_path / "odd.json"
    assert run_cli(*originals, "--from", "chakra", "--to", "et-json", "-o", dump).code == 0
    doc = strict_json(dump)
    node = doc["ranks"]["1"]["nodes"][0]
    assert node["id"] == str(U64_MAX - 10) and node["duration_micros"] == str(U64_MAX)
    attrs = {a["name"]: a for a in node["attr"]}
    assert attrs["u64"] == {"name": "u64", "kind": "uint64_val", "value": str(U64_MAX)}
    assert attrs["by"]["value"] == "AP+A" and attrs["byl"]["value"] == ["", "AQ=="]
    assert attrs["dn"]["value"] == "nan" and attrs["di"]["value"] == "-inf"
    assert attrs["i32"]["value"] == -(1 << 31)
    assert attrs["none"] == {"name": "none", "doc_string": "no value set"}
    assert doc["ranks"]["0"]["nodes"][1]["ctrl_deps"] == [str(1 << 60)]
    again = tmp_path / "again" / "odd"
    # attributes in kinds ASTRA-sim cannot read are validation errors: restored only with --force
    result = run_cli(dump, "--from", "et-json", "--to", "chakra", "-o", again, "--force")
    assert result.code == 0, result.stderr
    assert "validate error (written anyway, --force): E010 unreadable attribute kind" in result.stderr
    for original in originals:
        assert (again.parent / original.name).read_bytes() == original.read_bytes()
    # and the dump of the copy is the same dump
    dump2 = tmp_path / "odd2.json"
    assert run_cli(dump, "--from", "et-json", "--to", "et-json", "-o", dump2).code == 0
    assert strict_json(dump2)["ranks"] == doc["ranks"]


def test_dump_of_a_model_is_what_the_chakra_writer_writes(tmp_path):
    from test_chakra_writer import small_trace

    from converters.writers import chakra, et_json

    trace = small_trace()
    et_json.write(trace, tmp_path / "m.json", Options(), Diagnostics())
    chakra.write(trace, tmp_path / "direct" / "w", Options(), Diagnostics())
    back = json_reader.load([tmp_path / "m.json"], Options(), Diagnostics())
    assert back.groups[1].kind == "tp" and back.groups[1].members == (0, 1)
    chakra.write(back, tmp_path / "via" / "w", Options(), Diagnostics())
    for r in (0, 1):
        assert (tmp_path / "via" / f"w.{r}.et").read_bytes() == (tmp_path / "direct" / f"w.{r}.et").read_bytes()


def test_sniff_needs_the_format_key():
    assert json_reader.sniff(b'{"format":"et-convert.et-json","version":1}', Path("d.json"))
    assert json_reader.sniff(b' {\n  "format": "et-convert.et-json"', Path("d.json"))
    assert not json_reader.sniff(b'{"metadata": {"format": "et-convert.et-json"}}', Path("t.json"))
    assert not json_reader.sniff(b'{"traceEvents": [], "displayTimeUnit": "ms"}', Path("t.json"))
    assert not json_reader.sniff((SAMPLES / "chakra_model" / "workload.0.et").read_bytes(), Path("w.0.et"))


BAD = [
    ({"format": "et-convert.et-json", "version": 1, "ranks": []}, "$.ranks: expected an object of ranks, found a list"),
    ({"format": "et-convert.et-json", "version": 2, "ranks": {}}, "$.version: this et-convert reads version 1"),
    ({"format": "et-convert.et-json", "version": 1, "ranks": {"0": {"nodes": [{"type": "COMP_NODE", "data_deps": ["x"]}]}}},
     "$.ranks.0.nodes[0].data_deps[0]: expected an integer (or its decimal string), found string 'x'"),
    ({"format": "et-convert.et-json", "version": 1, "ranks": {"0": {"nodes": [{"type": "BOGUS"}]}}},
     "$.ranks.0.nodes[0].type: unknown node type 'BOGUS'"),
    ({"format": "et-convert.et-json", "version": 1, "ranks": {"0": {"nodes": [
        {"type": "COMP_NODE", "attr": [{"name": "a", "kind": "int32_val", "value": 1 << 40}]}]}}},
     "$.ranks.0.nodes[0].attr[0].value: 1099511627776 is out of range"),
    ({"format": "et-convert.et-json", "version": 1, "ranks": {"0": {"metadata": {"attr": [
        {"name": "b", "kind": "bytes_val", "value": "!!"}]}}}}, "$.ranks.0.metadata.attr[0].value: expected a base64 string"),
    ({"format": "et-convert.et-json", "version": 1, "ranks": {"0": {"nodes": [
        {"type": "COMP_NODE", "attr": [{"name": "b", "kind": "bool_val", "value": 1}]}]}}},
     "$.ranks.0.nodes[0].attr[0].value: expected true or false, found number 1"),
]


@pytest.mark.parametrize("doc,message", BAD)
def test_wrong_json_types_name_their_json_path(doc, message, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError) as caught:
        json_reader.load([path], Options(), Diagnostics())
    assert str(caught.value).startswith(f"{path}: {message}"), str(caught.value)


def test_wrong_json_type_through_the_cli_is_exit_2_without_output(tmp_path):
    doc, message = BAD[2]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    result = run_cli(path, "--from", "et-json", "--to", "chakra", "-o", tmp_path / "out" / "w")
    assert result.code == 2
    assert result.stderr.strip() == f"et-convert: error: {path}: {message}"
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_broken_json_is_an_input_error(tmp_path):
    path = tmp_path / "cut.json"
    path.write_text('{"format": "et-convert.et-json", "version": 1, "ranks": {')
    result = run_cli(path, "--from", "et-json", "--to", "chakra", "-o", tmp_path / "w")
    assert result.code == 2 and "not valid JSON" in result.stderr and "Traceback" not in result.stderr


def test_non_canonical_nodes_are_read_and_the_dump_warns(tmp_path):
    """A node with a field this schema does not know keeps its values; the dump says bytes will differ."""
    from converters.readers import chakra as chakra_reader
    from converters.writers import et_json

    meta = ref.GlobalMetadata(version="0.0.4").SerializeToString()
    node = ref.Node(id=1, name="x", type=ref.COMP_NODE, duration_micros=2).SerializeToString() + b"\x78\x01"
    path = tmp_path / "u.0.et"
    path.write_bytes(bytes([len(meta)]) + meta + bytes([len(node)]) + node)
    trace = chakra_reader.load([path], Options(), Diagnostics())
    assert [(n.name, n.duration_ns) for n in trace.ranks[0].nodes] == [("x", 2000)]
    diagnostics = Diagnostics()
    et_json.write(trace, tmp_path / "u.json", Options(), diagnostics)
    assert any("1 distinct messages are not in protobuf's own encoding" in m for m in diagnostics.messages())


# -- reading a dump in the writer's layout one rank at a time ------------------------------------


def sample_dump(tmp_path: Path) -> Path:
    from converters.readers import chakra as chakra_reader
    from converters.writers import et_json

    trace = chakra_reader.load(sorted((SAMPLES / "chakra_model").glob("*.et")), Options(), Diagnostics())
    dump = tmp_path / "dump.json"
    et_json.write(trace, dump, Options(), Diagnostics())
    return dump


def node_values(trace) -> dict:
    return {r: [(n.id, n.name, n.kind, n.deps, n.ctrl_deps, n.size, n.group, n.peer, n.attrs) for n in rank.nodes]
            for r, rank in trace.ranks.items()}


def test_a_dump_read_rank_by_rank_equals_the_dump_read_whole(tmp_path, monkeypatch):
    dump = sample_dump(tmp_path)
    pretty = tmp_path / "pretty.json"  # another layout: parsed whole
    pretty.write_text(json.dumps(json.loads(dump.read_text()), indent=1))
    parsed_whole = []
    original = json_reader.Dump.trace
    monkeypatch.setattr(json_reader.Dump, "trace", lambda self, doc: parsed_whole.append(1) or original(self, doc))
    by_rank = json_reader.load([dump], Options(), Diagnostics())
    assert parsed_whole == []
    whole = json_reader.load([pretty], Options(), Diagnostics())
    assert parsed_whole == [1]
    assert node_values(by_rank) == node_values(whole) and len(by_rank.ranks) == 4
    assert sorted(by_rank.groups) == sorted(whole.groups)
    assert [r.wire_metadata for r in by_rank.ranks.values()] == [r.wire_metadata for r in whole.ranks.values()]


def test_repeated_nodes_share_their_attributes_but_not_their_deps(tmp_path):
    trace = json_reader.load([write_node_named(tmp_path, "plain")], Options(), Diagnostics())
    first, second = trace.ranks[0].nodes[0], trace.ranks[1].nodes[0]
    assert (first.id, first.name, first.deps, first.attrs) == (second.id, second.name, second.deps, second.attrs)
    assert first.attrs is second.attrs and first.deps is not second.deps and first is not second
    assert first.deps == [0] and [(a.name, a.value) for a in first.attrs] == [("num_ops", 5)]


def test_what_looks_like_the_next_rank_inside_a_rank_does_not_cut_it(tmp_path, monkeypatch):
    # JSON strings cannot hold `},"` (the quote would end them), but an object can have a
    # numbered key: the reader ignores it, and the rank goes on after it.
    path = write_node_named(tmp_path, "first")
    data = path.read_bytes()
    assert data.count(b'"metadata":{"version":"","attr":[]}') == 2
    path.write_bytes(data.replace(b'"metadata":{"version":"","attr":[]}', b'"metadata":{"version":"","attr":[]},"7":{}', 1))
    monkeypatch.setattr(json_reader.Dump, "trace", None)  # read rank by rank, not parsed whole
    trace = json_reader.load([path], Options(), Diagnostics())
    assert [[n.name for n in rank.nodes] for rank in trace.ranks.values()] == [["first"], ["plain"]]


def write_node_named(tmp_path: Path, name: str) -> Path:
    """A two-rank dump in the writer's layout whose rank 0 holds one node called `name`."""
    def rank(node_name):
        return {"file": "", "metadata": {"version": "", "attr": []},
                "nodes": [{"id": 1, "name": node_name, "type": "COMP_NODE", "data_deps": [0],
                           "attr": [{"name": "num_ops", "kind": "int64_val", "value": 5}]}]}

    doc = {"format": "et-convert.et-json", "version": 1, "ranks": {"0": rank(name), "1": rank("plain")}, "groups": {}}
    path = tmp_path / "named.json"
    path.write_bytes(json.dumps(doc, separators=(",", ":")).encode())
    return path


def test_a_cut_dump_in_the_writer_layout_is_an_input_error(tmp_path):
    dump = sample_dump(tmp_path)
    data = dump.read_bytes()
    cut = tmp_path / "cut.json"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="not valid JSON"):
        json_reader.load([cut], Options(), Diagnostics())


def test_a_wrong_type_in_the_writer_layout_names_its_json_path(tmp_path):
    path = write_node_named(tmp_path, "x")
    path.write_bytes(path.read_bytes().replace(b'"id":1,"name":"plain"', b'"id":-1,"name":"plain"'))
    with pytest.raises(InputError, match=r"\$\.ranks\.1\.nodes\[0\]\.id: -1 is out of range"):
        json_reader.load([path], Options(), Diagnostics())


def test_a_dump_with_validation_errors_is_restored_only_with_force(tmp_path):
    from validate_cases import find, pipeline_model

    from converters.writers import chakra

    trace = pipeline_model(tp=2, dp=1, pp=1, microbatches=1)
    find(trace, 1, "tp all_reduce fwd mb0").size = 123
    chakra.write(trace, tmp_path / "bad" / "w", Options(), Diagnostics())  # the writer itself does not gate
    dump = tmp_path / "dump.json"
    assert run_cli(tmp_path / "bad", "--to", "et-json", "-o", dump).code == 0
    refused = run_cli(dump, "--to", "chakra", "-o", tmp_path / "g" / "w")
    assert refused.code == 2 and not (tmp_path / "g").exists()
    assert refused.stderr.startswith("et-convert: error: refusing to write a Chakra set that ASTRA-sim would stall "
                                     "on: 1 validation error: E042 collective size mismatch")
    assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
    forced = run_cli(dump, "--to", "chakra", "-o", tmp_path / "g" / "w", "--force")
    assert forced.code == 0
    assert "et-convert: warning: validate error (written anyway, --force): E042 collective size mismatch" in forced.stderr
    for r in (0, 1):  # written as the dump held it, faults included
        assert (tmp_path / "g" / f"w.{r}.et").read_bytes() == (tmp_path / "bad" / f"w.{r}.et").read_bytes()
