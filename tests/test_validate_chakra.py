"""The validator on Chakra sets written by our writer and read back: clean sets pass, broken files fail.

Mutations are made in the files themselves (deleted rank file, edited comm_group.json, an
attribute re-encoded with another oneof kind) or in the model before writing.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest

import converters as etc
from converters._proto import et_def_pb2 as pb
from converters._proto.wire import frames, varint
from converters.diagnostics import Diagnostics
from converters.options import Options
from converters.validate import run_checks, validate_trace
from converters.writers.chakra import write as write_chakra
from validate_cases import codes, find, only, pipeline_model

from conftest import SAMPLES, run_cli


@pytest.fixture(scope="module")
def clean_set(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("chakra") / "clean"
    write_chakra(pipeline_model(tp=2, dp=2, pp=2, microbatches=2), directory / "w", Options(), Diagnostics())
    return directory


@pytest.fixture(scope="module")
def simai_set(tmp_path_factory) -> Path:
    """The SimAI sample's block on 16 ranks (TP 8, PP 2), converted to Chakra."""
    directory = tmp_path_factory.mktemp("simai")
    text = (SAMPLES / "simai_tp8_pp16_1024gpu.txt").read_text()
    head, _, rest = text.partition("\n")
    small = directory / "w.txt"
    small.write_text(head.replace("pp: 16", "pp: 2").replace("all_gpus: 1024", "all_gpus: 16") + "\n" + rest)
    trace = etc.read(small, fmt="simai")
    write_chakra(trace, directory / "out" / "w", Options(), Diagnostics())
    return directory / "out"


def copy_set(source: Path, tmp_path: Path) -> Path:
    target = tmp_path / "set"
    shutil.copytree(source, target)
    return target


def read(directory: Path):
    return etc.read(directory, fmt="chakra")


def rewrite_first(path: Path, node_type: int, change) -> str:
    """Re-encode `path` with `change(node)` applied to the first node of `node_type`; return its name."""
    data = path.read_bytes()
    out, changed = [], None
    for index, (_, start, end) in enumerate(frames(data)):
        body = data[start:end]
        if index > 0 and changed is None:
            node = pb.Node.FromString(body)
            if node.type == node_type:
                change(node)
                changed = node.name
                body = node.SerializeToString()
        out.append(varint(len(body)) + body)
    path.write_bytes(b"".join(out))
    assert changed is not None
    return changed


def test_clean_sets_give_no_findings(clean_set, simai_set):
    for directory in (clean_set, simai_set):
        report = validate_trace(read(directory))
        assert [f.text() for f in report.findings] == []
        assert {"graph", "attributes", "collectives", "p2p", "deadlock"} <= set(report.checks)


def test_missing_rank_file(clean_set, tmp_path):
    directory = copy_set(clean_set, tmp_path)
    (directory / "w.5.et").unlink()
    findings = run_checks(read(directory))
    e023 = only(findings, "E023")
    assert e023.ranks == [5]
    assert e023.message.startswith("rank 5 is missing (no w.5.et); present: 0-4,6,7")


def test_pg_name_missing_from_group_file(clean_set, tmp_path):
    directory = copy_set(clean_set, tmp_path)
    table_path = directory / "w.comm_group.json"
    table = orjson.loads(table_path.read_bytes())
    gone = sorted(table, key=int)[0]
    del table[gone]
    table_path.write_bytes(orjson.dumps(table))
    e020 = only(run_checks(read(directory)), "E020")
    assert f"in pg_name {gone} (" in e020.message and "the group file does not define it" in e020.message


def test_comm_size_stored_as_uint64(clean_set, tmp_path):
    directory = copy_set(clean_set, tmp_path)

    def to_uint64(node):
        for attr in node.attr:
            if attr.name == "comm_size":
                attr.uint64_val = attr.int64_val

    name = rewrite_first(directory / "w.3.et", pb.COMM_COLL_NODE, to_uint64)
    findings = run_checks(read(directory))
    e010 = only(findings, "E010")
    assert e010.ranks == [3] and e010.node["name"] == name
    assert "comm_size is stored as uint64_val on 1 node; ASTRA-sim reads only int64_val and sees 0" in e010.message
    assert "w.3.et" in e010.source


def test_size_changed_in_one_file(simai_set, tmp_path):
    directory = copy_set(simai_set, tmp_path)

    def halve(node):
        for attr in node.attr:
            if attr.name == "comm_size":
                attr.int64_val //= 2

    name = rewrite_first(directory / "w.13.et", pb.COMM_COLL_NODE, halve)
    findings = run_checks(read(directory))
    e042 = only(findings, "E042")
    assert e042.ranks == [13] and e042.node["name"] == name
    assert e042.group["members"] == list(range(8, 16))
    assert "seq 0 · rank 13: " in e042.message and "ranks 8-12,14,15: " in e042.message


def test_dropped_receive_in_model_then_written(tmp_path):
    trace = pipeline_model(tp=1, dp=1, pp=2, microbatches=2)
    nodes = trace.ranks[1].nodes
    recv = find(trace, 1, "recv act mb1")
    nodes.remove(recv)
    for node in nodes:
        node.deps = [d if d != recv.id else recv.deps[0] for d in node.deps]
    write_chakra(trace, tmp_path / "w", Options(), Diagnostics())
    e034 = only(run_checks(read(tmp_path)), "E034")
    assert e034.message.startswith("rank 0 (stage 0) -> rank 1 (stage 1) · no recv on rank 1 with tag 2")


def test_cli_exit_codes_and_json(clean_set, tmp_path):
    ok = run_cli("validate", clean_set)
    assert ok.code == 0, ok.stderr
    assert ok.stdout.startswith("validate: 0 errors, 0 warnings · 8 ranks · ")
    directory = copy_set(clean_set, tmp_path)
    (directory / "w.5.et").unlink()
    bad = run_cli("validate", directory, "--format", "json", "--max-per-check", "1")
    assert bad.code == 1
    document = orjson.loads(bad.stdout)
    assert document["summary"]["errors"] >= 1
    assert document["findings"][0]["code"] == "E023"
    garbage = tmp_path / "notes.et"
    garbage.write_bytes(b"\xff\xff\xff\xff\xff")
    unusable = run_cli("validate", garbage, "--from", "chakra")
    assert unusable.code == 2 and unusable.stderr.startswith("et-convert: error: ")


def test_groups_option_replaces_the_group_file(clean_set, tmp_path):
    directory = copy_set(clean_set, tmp_path)
    table = orjson.loads((directory / "w.comm_group.json").read_bytes())
    (directory / "w.comm_group.json").unlink()
    assert "E020" in codes(run_checks(read(directory)))
    elsewhere = tmp_path / "groups.json"
    elsewhere.write_bytes(orjson.dumps(table))
    result = run_cli("validate", directory, "--groups", elsewhere)
    assert result.code == 0, result.stdout


def test_last_rank_file_missing_is_found_from_the_metadata(clean_set, tmp_path):
    directory = copy_set(clean_set, tmp_path)
    (directory / "w.7.et").unlink()
    e023 = only(run_checks(read(directory)), "E023")
    assert e023.message.startswith("rank 7 is missing (no w.7.et); present: 0-6")


# ---------------------------------------------------------------- the mutation suite on the SimAI set


def rewrite_nodes(path: Path, change) -> None:
    """Re-encode `path` after `change(nodes)` edits its list of pb.Node (metadata kept)."""
    data = path.read_bytes()
    messages = [data[start:end] for _, start, end in frames(data)]
    nodes = [pb.Node.FromString(body) for body in messages[1:]]
    change(nodes)
    bodies = [messages[0]] + [n.SerializeToString() for n in nodes]
    path.write_bytes(b"".join(varint(len(b)) + b for b in bodies))


def first_of(nodes, node_type: int, name_part: str = ""):
    return next(n for n in nodes if n.type == node_type and name_part in n.name)


def attr(node, name: str):
    return next(a for a in node.attr if a.name == name)


def drop(nodes, victim) -> None:
    """Remove `victim`; whatever depended on it depends on its dependencies instead."""
    nodes.remove(victim)
    for n in nodes:
        if victim.id in n.data_deps:
            kept = [d for d in n.data_deps if d != victim.id]
            del n.data_deps[:]
            n.data_deps.extend(kept + [d for d in victim.data_deps if d not in kept])


def mutate_drop_collective(nodes):
    drop(nodes, first_of(nodes, pb.COMM_COLL_NODE))


def mutate_type(nodes):
    attr(first_of(nodes, pb.COMM_COLL_NODE, "ALLGATHER"), "comm_type").int64_val = 0  # ALL_REDUCE


def mutate_reorder(nodes):
    colls = [n for n in nodes if n.type == pb.COMM_COLL_NODE]
    a, b = next((x, y) for x, y in zip(colls, colls[1:]) if attr(x, "comm_type").int64_val != attr(y, "comm_type").int64_val
                and attr(x, "pg_name").string_val == attr(y, "pg_name").string_val)
    for name in ("comm_type", "comm_size"):
        va, vb = attr(a, name).int64_val, attr(b, name).int64_val
        attr(a, name).int64_val, attr(b, name).int64_val = vb, va


def mutate_tag(nodes):
    attr(first_of(nodes, pb.COMM_SEND_NODE), "comm_tag").int32_val += 1000


def mutate_drop_recv(nodes):
    drop(nodes, first_of(nodes, pb.COMM_RECV_NODE))


def mutate_dangling(nodes):
    nodes[5].data_deps.append(10**9)


def mutate_cycle(nodes):
    nodes[2].data_deps.append(nodes[6].id)


SIMAI_MUTATIONS = {
    # rank whose file is edited (rank 13: stage 1, TP group 8-15), mutation, expected code
    "drop one collective": (13, mutate_drop_collective, "E040"),
    "change one type": (13, mutate_type, "E041"),
    "reorder two collectives": (13, mutate_reorder, "E044"),
    "wrong tag": (5, mutate_tag, "E034"),
    "drop a receive": (13, mutate_drop_recv, "E034"),
    "dangling dependency": (13, mutate_dangling, "E002"),
    "cycle": (13, mutate_cycle, "E004"),
}


@pytest.mark.parametrize("mutation", sorted(SIMAI_MUTATIONS))
def test_mutations_of_the_simai_set(simai_set, tmp_path, mutation):
    rank, change, expected = SIMAI_MUTATIONS[mutation]
    directory = copy_set(simai_set, tmp_path)
    rewrite_nodes(directory / f"w.{rank}.et", change)
    findings = run_checks(read(directory))
    errors = [f for f in findings if f.severity == "error"]
    assert expected in codes(errors), [f.text() for f in findings]
    assert rank in only(errors, expected).ranks
    assert not [f for f in findings if f.severity == "warning"]


def test_edges_only_in_ctrl_deps_are_a_warning(clean_set, tmp_path):
    directory = copy_set(clean_set, tmp_path)

    def to_ctrl_deps(node):
        node.ctrl_deps.extend(node.data_deps)
        del node.data_deps[:]

    name = rewrite_first(directory / "w.0.et", pb.COMM_SEND_NODE, to_ctrl_deps)
    findings = run_checks(read(directory))
    assert codes(findings) == ["W006"]
    assert findings[0].ranks == [0] and findings[0].node["name"] == name
    assert "only through ctrl_deps, which ASTRA-sim's old feeder ignores" in findings[0].message
    result = run_cli("validate", directory)
    assert result.code == 0 and "W006 edge only in ctrl_deps · rank 0: node " in result.stdout
