"""PyTorch profiler (Kineto) traces: reading, groups, clocks, Chrome and Chakra output, validate, stats.

Fixtures (tests/fixtures/): `kineto_gloo` are real traces of a 4-rank CPU job (torch 2.13,
gloo; `make_torch_traces.py`); `kineto_nccl` (newer field form) and `kineto_nccl_old` (older
form) are written by `make_nccl_traces.py`, which the tests also call for variants.
"""

from __future__ import annotations

import gzip
import os
import json
import sys
from collections import Counter
from pathlib import Path

import pytest

from chakra_ref import collective_sequence, p2p_keys, rank_files, read_groups, read_rank
from conftest import ROOT, run_cli

FIXTURES = ROOT / "tests" / "fixtures"
GLOO, NCCL, NCCL_OLD = FIXTURES / "kineto_gloo", FIXTURES / "kineto_nccl", FIXTURES / "kineto_nccl_old"
sys.path.insert(0, str(FIXTURES))
import make_nccl_traces  # noqa: E402

import converters as etc  # noqa: E402
from converters.diagnostics import Diagnostics, InputError  # noqa: E402
from converters.model import CollType, NodeKind  # noqa: E402

SEND, RECV = 5, 6


def members_of(trace, node_rank, node):
    return trace.groups[node_rank.group_of(node)].members


# ---------------------------------------------------------------- reading and building

def test_format_is_detected_from_content_for_plain_and_gzip_traces():
    from converters.formats import detect

    assert detect(sorted(GLOO.iterdir())) == "kineto"  # .json.gz
    assert detect(sorted(NCCL.iterdir())) == "kineto"  # .json


def test_nccl_newer_form_groups_sizes_peers_and_dependencies():
    trace = etc.read(NCCL)
    assert trace.source.format == "kineto" and trace.timing == "measured"
    assert sorted(trace.ranks) == [0, 1, 2, 3]
    assert sorted((g.label, g.members) for g in trace.groups.values()) == [
        ("default_pg#0", (0, 1, 2, 3)), ("dp#3", (0, 2)), ("dp#4", (1, 3)), ("tp#1", (0, 1)), ("tp#2", (2, 3))]
    p = trace.parallel
    assert (p.world, p.tp, p.dp, p.pp) == (4, 2, 2, 1)
    rank0 = trace.ranks[0]
    colls = [n for n in rank0.nodes if n.kind == NodeKind.COLLECTIVE]
    assert [(n.coll, n.size, members_of(trace, rank0, n)) for n in colls[:5]] == [
        (CollType.ALL_REDUCE, 2 * (1 << 20), (0, 1)),     # 1 Mi bf16 elements in the TP pair
        (CollType.ALL_GATHER, 2 * (1 << 18), (0, 1)),     # the per-rank input, as ASTRA-sim reads it
        (CollType.ALL_REDUCE, 2 * (1 << 22), (0, 2)),     # the DP group
        (CollType.ALL_REDUCE, 4 * 1024, (0, 1, 2, 3)),    # the world, float
        (CollType.ALL_REDUCE, 2 * (1 << 20), (0, 1)),     # step 1
    ]
    sends = [n for n in rank0.nodes if n.kind == NodeKind.SEND]
    assert [(n.peer, n.tag, n.size) for n in sends] == [(2, 0, 131072), (2, 1, 131072)]
    recvs = [n for n in trace.ranks[2].nodes if n.kind == NodeKind.RECV]
    assert [(n.peer, n.tag) for n in recvs] == [(0, 0), (0, 1)]
    # stream order and the cuda_sync waits: the TP all-reduce waits for the GEMM before it
    by_id = {n.id: n for n in rank0.nodes}
    first_ar = colls[0]
    assert [by_id[d].stream for d in first_ar.deps] == ["stream 7"]
    # clocks: each rank's host is 1.5 s later in the fixture; the first world all-reduce ends together
    assert trace.metadata["clock_alignment"]["offsets_ns"] == {"0": 0, "1": 1_500_000_000, "2": 3_000_000_000,
                                                               "3": 4_500_000_000}
    assert trace.metadata["clock_alignment"]["max_disagreement_ns"] == 0


def test_merge_compute_joins_consecutive_kernels_of_a_stream_and_names_them():
    merged = etc.read(NCCL)
    single = etc.read(NCCL, merge_compute=False)
    count = lambda t: sum(1 for n in t.ranks[0].nodes if n.kind == NodeKind.COMPUTE)  # noqa: E731
    assert count(single) == 6  # three GEMMs per step
    assert count(merged) == 6  # each GEMM is followed by a point another stream waits at
    gloo_merged, gloo_single = etc.read(GLOO), etc.read(GLOO, merge_compute=False)
    assert count(gloo_merged) < count(gloo_single)
    merged_nodes = [n for n in gloo_merged.ranks[0].nodes if n.args.get("merged")]
    assert merged_nodes and all("aten::" in n.args["merged_names"] for n in merged_nodes)


def test_real_gloo_traces_resolve_every_collective_to_its_group():
    diagnostics = Diagnostics()
    trace = etc.read(GLOO, diagnostics=diagnostics)
    assert trace.metadata["backend"] == "gloo"
    for r in range(4):
        rank = trace.ranks[r]
        seq = [(n.coll, n.size, members_of(trace, rank, n)) for n in rank.nodes if n.kind == NodeKind.COLLECTIVE]
        tp = (0, 1) if r < 2 else (2, 3)
        dp = (r % 2, r % 2 + 2)
        step = [(CollType.ALL_REDUCE, 64 * 64 * 4, tp), (CollType.ALL_GATHER, 256 * 4, tp),
                (CollType.ALL_REDUCE, 1024 * 4, dp), (CollType.ALL_REDUCE, 8 * 4, (0, 1, 2, 3))]
        assert seq == step + step, f"rank {r}"
    sends = [(n.peer, n.tag, n.args["user_tag"]) for n in trace.ranks[1].nodes if n.kind == NodeKind.SEND]
    assert sends == [(3, 0, 0), (3, 1, 1)]
    assert any("worker thread" in a for a in trace.assumptions)
    # one host: one clock, nothing shifted
    assert trace.metadata["clock_alignment"]["method"] == "one host: one clock"
    assert set(trace.metadata["clock_alignment"]["offsets_ns"].values()) == {0}


def test_step_option_keeps_one_profiler_step():
    whole = etc.read(GLOO)
    one = etc.read(GLOO, step=1)
    colls = lambda t: sum(1 for n in t.ranks[0].nodes if n.kind == NodeKind.COLLECTIVE)  # noqa: E731
    assert (colls(whole), colls(one)) == (8, 4)
    with pytest.raises(InputError, match=r"no ProfilerStep#5 in this trace \(steps: 0, 1\)"):
        etc.read(GLOO, step=5)


def test_older_nccl_form_takes_sizes_from_annotations_and_says_peers_are_unknown():
    diagnostics = Diagnostics()
    trace = etc.read(NCCL_OLD, diagnostics=diagnostics)
    rank0 = trace.ranks[0]
    colls = [(n.coll, n.size) for n in rank0.nodes if n.kind == NodeKind.COLLECTIVE]
    assert colls[:3] == [(CollType.ALL_REDUCE, 4 << 20), (CollType.ALL_GATHER, 2 << 18), (CollType.ALL_REDUCE, 4096)]
    assert not any(n.kind in (NodeKind.SEND, NodeKind.RECV) for n in rank0.nodes)
    assert any(n.name == "send to ? (peer unknown)" for n in rank0.nodes)
    warned = [k.template for k in diagnostics.kinds.values()]
    assert any("send/recv kernel(s) name no peer rank" in w for w in warned)


def test_older_form_with_several_groups_and_no_pg_config_is_an_error_naming_the_candidates(tmp_path):
    make_nccl_traces.write_set(tmp_path, "old", groups_job=True)
    result = run_cli(tmp_path, "-o", tmp_path / "x.json")
    assert result.code == 2
    assert result.stderr.startswith(f"et-convert: error: {tmp_path}/rank-0.pt.trace.json.gz: cannot tell which "
                                    "process group rank 0's collectives on stream ")
    assert "candidates default_pg#0 [0, 1, 2, 3], unknown groups (no pg_config) []" in result.stderr
    assert not (tmp_path / "x.json").exists()


def test_rank_from_the_file_name_is_an_assumption(tmp_path):
    for r in range(2):
        data = json.loads((NCCL / f"rank-{r}.json").read_text())
        del data["distributedInfo"]["rank"]
        (tmp_path / f"trace_rank{r}.json").write_text(json.dumps(data))
    trace = etc.read(tmp_path)
    assert sorted(trace.ranks) == [0, 1]
    assert "rank of trace_rank0.json read from its file name (no distributedInfo.rank)" in trace.assumptions


def _outputs(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def _converted(tmp_path: Path, fixture: Path, name: str, *runner: str) -> tuple[dict[str, bytes], str]:
    """Chrome JSON and a Chakra set of `fixture`, named relative to the project (as a user types
    it; a Dask worker opens the absolute path); the outputs' bytes and what was said on stderr."""
    out = tmp_path / name
    said = ""
    for args in (["-o", out / "t.json"], ["--to", "chakra", "-o", out / "set" / "w"]):
        result = run_cli(fixture.relative_to(ROOT), *args, *runner)
        assert result.code == 0, result.stderr
        said += result.stderr
    return _outputs(out), said


def _needs_dask() -> None:
    pytest.importorskip("distributed", reason="dask.distributed is not installed (pip install 'et-convert[cluster]')")


@pytest.mark.parametrize("runner", [("--jobs", "2"), ("--cluster", "local:2")], ids=["jobs", "cluster"])
@pytest.mark.parametrize("fixture", [GLOO, NCCL, NCCL_OLD], ids=lambda p: p.name)
def test_jobs_and_a_local_cluster_give_the_local_bytes(fixture, runner, tmp_path):
    if runner[0] == "--cluster":
        _needs_dask()
    here, said_here = _converted(tmp_path, fixture, "here")
    there, said_there = _converted(tmp_path, fixture, "there", *runner)
    assert len(here) == 1 + 4 + 1  # t.json, 4 rank files and comm_group.json
    assert here == there
    assert said_here == said_there
    name = f'"source":"{fixture.relative_to(ROOT)}/rank-0'.encode()
    assert name in here["t.json"] and str(ROOT).encode() not in here["t.json"]  # the files as the user named them


@pytest.mark.parametrize("runner", [("--jobs", "2"), ("--cluster", "local:2")], ids=["jobs", "cluster"])
def test_a_bad_file_read_by_a_worker_is_one_error_at_its_byte(runner, tmp_path):
    if runner[0] == "--cluster":
        _needs_dask()
    traces = tmp_path / "traces"
    traces.mkdir()
    for path in GLOO.iterdir():
        (traces / path.name).write_bytes(path.read_bytes())
    cut = traces / "rank-2.pt.trace.json.gz"
    cut.write_bytes(cut.read_bytes()[:3000])
    result = run_cli("traces", "-o", "x.json", *runner, cwd=tmp_path)
    assert (result.code, result.stderr) == (2, "et-convert: error: traces/rank-2.pt.trace.json.gz: byte 3000: gzip "
                                                "data cut off (the file is truncated)\n")
    assert not (tmp_path / "x.json").exists()


def test_a_rank_whose_survey_left_its_items_behind_is_read_again_with_the_same_nodes():
    from converters.builders import kineto
    from converters.options import Options

    paths = sorted(GLOO.iterdir())
    surveys = [kineto.survey_file(p, Options(), str(p)) for p in paths]
    plan = kineto.plan(surveys, paths, Options(), Diagnostics())
    [kept] = kineto.build_file(surveys[1], plan, Options())
    assert surveys[1].records is None  # built: its items are freed
    [again] = kineto.build_file(surveys[1], plan, Options())  # as on a worker that did not survey it
    assert again.rank.nodes == kept.rank.nodes and len(kept.rank.nodes) > 10
    assert any(n.kind == NodeKind.COLLECTIVE for n in again.rank.nodes)


# ---------------------------------------------------------------- bad files

def _bad(tmp_path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_truncated_gzip_is_one_line_at_its_byte(tmp_path):
    whole = (GLOO / "rank-0.pt.trace.json.gz").read_bytes()
    path = _bad(tmp_path, "rank-0.pt.trace.json.gz", whole[:2000])
    result = run_cli("--from", "kineto", path, "-o", tmp_path / "x.json")
    assert (result.code, result.stderr) == (2, f"et-convert: error: {path}: byte 2000: gzip data cut off (the file "
                                                "is truncated)\n")
    assert not (tmp_path / "x.json").exists()


def test_json_that_is_not_a_trace_is_one_line(tmp_path):
    path = _bad(tmp_path, "rank-0.json", b'{"distributedInfo": {"rank": 0}, "events": []}')
    result = run_cli("--from", "kineto", path, "-o", tmp_path / "x.json")
    assert (result.code, result.stderr) == (2, f"et-convert: error: {path}: expected a PyTorch profiler trace: a "
                                                "JSON object with a traceEvents array\n")


def test_broken_json_is_reported_at_line_and_column(tmp_path):
    path = _bad(tmp_path, "rank-0.json", b'{"traceEvents": [\n  {"ph": "X",,}\n]}')
    result = run_cli("--from", "kineto", path, "-o", tmp_path / "x.json")
    assert result.code == 2
    assert result.stderr.startswith(f"et-convert: error: {path}:2:")
    assert "not valid JSON" in result.stderr and result.stderr.count("\n") == 1


def test_one_rank_twice_is_an_error_naming_both_files(tmp_path):
    (tmp_path / "a.json").write_bytes((NCCL / "rank-1.json").read_bytes())
    (tmp_path / "b.json").write_bytes((NCCL / "rank-1.json").read_bytes())
    result = run_cli(tmp_path, "-o", tmp_path / "x.json")
    assert (result.code, result.stderr) == (2, f"et-convert: error: {tmp_path}/b.json: rank 1 (from its "
                                                f"distributedInfo) is also in {tmp_path}/a.json; give each rank's "
                                                "trace once\n")


def test_bad_event_times_name_the_event(tmp_path):
    data = json.loads((NCCL / "rank-0.json").read_text())
    data["traceEvents"][12]["dur"] = "long"
    path = _bad(tmp_path, "rank-0.json", json.dumps(data).encode())
    result = run_cli(path, "-o", tmp_path / "x.json")
    assert result.code == 2
    assert result.stderr.startswith(f"et-convert: error: {path}: event 12: ")
    assert "ts and dur must be numbers" in result.stderr


# ---------------------------------------------------------------- outputs

@pytest.mark.parametrize("fixture", [GLOO, NCCL, NCCL_OLD], ids=lambda p: p.name)
def test_chrome_output_is_clean_with_flows_for_every_instance_and_transfer(fixture, tmp_path):
    from converters.validate.chrome_rules import check_chrome_trace

    out = tmp_path / "t.json"
    result = run_cli(fixture, "-o", out, "-q")
    assert result.code == 0, result.stderr
    doc = json.loads(out.read_text())
    assert check_chrome_trace(doc) == []
    trace = etc.read(fixture)
    instances = Counter()
    for rank in trace.ranks.values():
        for n in rank.nodes:
            if n.kind == NodeKind.COLLECTIVE:
                instances[rank.group_of(n)] += 1
    expected = sum(count // len(trace.groups[g].members) for g, count in instances.items())
    expected += sum(1 for rank in trace.ranks.values() for n in rank.nodes if n.kind == NodeKind.SEND)
    flows = {e["bind_id"] for e in doc["traceEvents"] if "bind_id" in e}
    assert len(flows) == expected
    coll = next(e for e in doc["traceEvents"] if e.get("ph") == "X" and "group" in e["args"])
    assert {"bytes", "group", "members", "dtype"} <= set(coll["args"])
    assert "sequence" in coll["args"] or fixture != NCCL  # only the newer form writes Seq
    assert doc["metadata"]["source.format"] == "kineto"
    assert "offsets_ns" in doc["metadata"]["details"]["clock_alignment"]


@pytest.mark.parametrize("fixture", [GLOO, NCCL, NCCL_OLD], ids=lambda p: p.name)
def test_chakra_output_validates_pairs_sends_and_keeps_the_process_groups(fixture, tmp_path):
    prefix = tmp_path / "w"
    result = run_cli(fixture, "--to", "chakra", "-o", prefix, "-q")
    assert result.code == 0, result.stderr
    files = rank_files(prefix)
    assert sorted(files) == [0, 1, 2, 3]
    groups = read_groups(prefix)
    configs = {tuple(e["ranks"]) for p in fixture.iterdir() for e in _pg_config(p)}
    assert not configs or {tuple(m) for m in groups.values()} == configs
    ranks = {r: read_rank(path) for r, path in files.items()}
    sends = Counter(k for rank in ranks.values() for k in p2p_keys(rank, SEND))
    recvs = Counter(k for rank in ranks.values() for k in p2p_keys(rank, RECV))
    assert sends == recvs
    for pg, members in groups.items():
        sequences = [collective_sequence(ranks[m], pg) for m in members]
        assert all(s == sequences[0] for s in sequences), pg
    check = run_cli("validate", prefix.parent)
    assert check.code == 0, check.stdout


def _pg_config(path: Path) -> list[dict]:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return json.loads(data).get("distributedInfo", {}).get("pg_config", [])


def test_stats_give_per_group_traffic_and_the_last_rank_of_the_slowest_collectives():
    result = run_cli("stats", NCCL, "--json")
    assert result.code == 0, result.stderr
    stats = json.loads(result.stdout)
    assert stats["timing"] == "measured"
    assert stats["groups"]["tp#1"] == {"instances": 4, "bytes": 2 * (2 << 20) + 2 * (2 << 18), "span_ns": 455_000}
    slowest = stats["slowest_collectives"][0]
    assert (slowest["group"], slowest["seq"], slowest["last_rank"], slowest["span_ns"], slowest["wait_ns"]) == (
        "dp#3", 0, 2, 427_500, 27_500)
    for row in stats["ranks"].values():
        assert row["compute_ns"] > 0 and row["exposed_comm_ns"] > 0


# ---------------------------------------------------------------- validate

def test_validate_on_profiler_traces_is_clean_and_chrome_rules_do_not_cry_wolf():
    for fixture in (GLOO, NCCL, NCCL_OLD):
        result = run_cli("validate", fixture)
        assert result.code == 0, result.stdout
        assert "4 ranks" in result.stdout
        as_chrome = run_cli("validate", "--from", "chrome", fixture)
        assert as_chrome.code == 0, as_chrome.stdout
        assert as_chrome.stdout.startswith("validate: 0 errors, 0 warnings")


def test_chrome_rules_still_catch_what_breaks_a_profiler_trace_import():
    from converters.validate.chrome_rules import check_chrome_trace

    doc = {"schemaVersion": 1, "traceEvents": [
        {"ph": "X", "pid": 7, "tid": 7, "ts": 0, "dur": 5, "name": "main"},
        {"ph": "X", "pid": 7, "tid": 0, "ts": 10, "dur": 5, "name": "on tid 0"},
        {"ph": "X", "pid": 7, "tid": 8, "ts": 20, "dur": -1, "name": "negative"},
    ]}
    found = check_chrome_trace(doc)
    assert found == [
        "dur: event 2 (pid 7, tid 8, 'negative'): negative dur -1",
        "tid: event 1 (pid 7, tid 0, 'on tid 0'): slices on tid 0 and on tid == pid share one track in Perfetto",
    ]


def test_one_rank_missing_a_collective_is_exit_1_naming_that_rank(tmp_path):
    make_nccl_traces.write_set(tmp_path, "new")
    path = tmp_path / "rank-3.json"
    data = json.loads(path.read_text())
    # drop the DP all-reduce of the second step: its record_param_comms op and its kernel
    doomed = [e for e in data["traceEvents"] if e.get("args", {}).get("Process Group Name") == "4"][-2:]
    data["traceEvents"] = [e for e in data["traceEvents"] if e not in doomed]
    path.write_text(json.dumps(data))
    result = run_cli("validate", tmp_path)
    assert result.code == 1
    e040 = [line.strip() for line in result.stdout.splitlines() if line.strip().startswith("E040")]
    assert e040 and "dp#4" in e040[0] and "rank 3" in e040[0]


def test_a_sampled_subset_of_a_large_job_validates(tmp_path):
    make_nccl_traces.write_set(tmp_path, "new", world=128, ranks=[0, 64])
    result = run_cli("validate", tmp_path)
    assert result.code == 0, result.stdout
    assert ("I024 partial rank set · the input holds ranks 0,64 of 128; cross-rank checks cover only these"
            in result.stdout)


def test_events_are_parsed_in_batches_with_cuts_inside_strings_retried(tmp_path, monkeypatch):
    from converters.readers import kineto

    data = json.loads((NCCL / "rank-0.json").read_text())
    data["traceEvents"][12]["name"] = 'gemm "}, {" kernel'  # a cut candidate inside a string
    path = tmp_path / "rank-0.json"
    path.write_text(json.dumps(data))
    whole = kineto.read_rank(path)
    monkeypatch.setattr(kineto, "BATCH_BYTES", 64)  # a batch every few events
    calls = []
    original = kineto._batch
    monkeypatch.setattr(kineto, "_batch", lambda *a: calls.append(1) or original(*a))
    batched = kineto.read_rank(path)
    assert len(calls) > 10
    assert batched.events == whole.events and batched.pg_config == whole.pg_config
    assert any(e.name == 'gemm "}, {" kernel' for e in batched.events)


# ---------------------------------------------------------------- robustness

_ODD_VALUES = [None, "x", "[0, 1", -1, 0, 2**70, 1e300, float("nan"), [], {}, True, [[1, "a"]], "[]"]


def _load_one(path: Path):
    from converters.builders.kineto import load
    from converters.options import Options

    try:
        return load([path], Options(), Diagnostics())
    except InputError as e:
        assert "\n" not in str(e)
        return None


def _gloo_rank0() -> dict:
    return json.loads(gzip.decompress((GLOO / "rank-0.pt.trace.json.gz").read_bytes()))


@pytest.mark.parametrize("source", ["nccl", "gloo"])
def test_odd_values_anywhere_give_an_input_error_or_a_model(source, tmp_path_factory):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    base = json.loads((NCCL / "rank-0.json").read_text()) if source == "nccl" else _gloo_rank0()

    examples = int(os.environ.get("KINETO_EXAMPLES", 60))

    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def run(data):
        doc = json.loads(json.dumps(base))
        for _ in range(data.draw(st.integers(1, 3))):
            where = data.draw(st.sampled_from(["event", "args", "info"]))
            value = data.draw(st.sampled_from(_ODD_VALUES))
            if where == "info":
                key = data.draw(st.sampled_from(["rank", "world_size", "pg_config", "backend"]))
                doc["distributedInfo"][key] = value
                continue
            event = data.draw(st.sampled_from(doc["traceEvents"]))
            if where == "event":
                event[data.draw(st.sampled_from(["ts", "dur", "name", "cat", "pid", "tid", "args", "ph"]))] = value
            elif isinstance(event.get("args"), dict) and event["args"]:
                event["args"][data.draw(st.sampled_from(sorted(event["args"])))] = value
        path = tmp_path_factory.mktemp("odd") / "rank-0.json"
        path.write_text(json.dumps(doc, allow_nan=True))
        _load_one(path)

    run()


def test_numbers_written_as_text_are_read_and_words_are_refused(tmp_path):
    """PyTorch writes a p2p peer and the sequence number with std::to_string."""
    data = json.loads((NCCL / "rank-0.json").read_text())
    for event in data["traceEvents"]:
        args = event.get("args", {})
        if "Dst Rank" in args:
            args["Dst Rank"], args["Seq"] = str(args["Dst Rank"]), str(args["Seq"])
    path = tmp_path / "rank-0.json"
    path.write_text(json.dumps(data))
    sends = [n for n in etc.read(path).ranks[0].nodes if n.kind == NodeKind.SEND]
    assert [n.peer for n in sends] == [2, 2]
    first = next(i for i, e in enumerate(data["traceEvents"]) if "Dst Rank" in e.get("args", {}))
    data["traceEvents"][first]["args"]["Dst Rank"] = "two"
    path.write_text(json.dumps(data))
    result = run_cli(path, "-o", tmp_path / "x.json")
    assert (result.code, result.stderr) == (2, f"et-convert: error: {path}: event {first}: arg 'Dst Rank' is 'two'; "
                                                "expected an integer\n")


def test_a_trace_without_events_and_a_bare_key_are_handled(tmp_path):
    from converters.readers.kineto import read_rank

    empty = _bad(tmp_path, "rank-0.json", b'{"distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": [ ]}')
    assert read_rank(empty).events == []
    bare = _bad(tmp_path, "rank-1.json", b'"traceEvents":[]')
    with pytest.raises(InputError, match=r"rank-1.json:1:14: not valid JSON \(unexpected content after document\)"):
        read_rank(bare)


def test_a_job_with_tp_groups_only_keeps_its_layout(tmp_path):
    """No DP group written: dp is the rest of the world (world / tp)."""
    make_nccl_traces.write_set(tmp_path, "new")
    for r in range(4):
        path = tmp_path / f"rank-{r}.json"
        data = json.loads(path.read_text())
        info = data["distributedInfo"]
        info["pg_config"] = [g for g in info["pg_config"] if g["pg_desc"] != "dp"]
        data["traceEvents"] = [e for e in data["traceEvents"]
                               if e.get("args", {}).get("Process Group Description") != "dp"]
        path.write_text(json.dumps(data))
    trace = etc.read(tmp_path)
    assert (trace.parallel.tp, trace.parallel.dp) == (2, 2)
    assert sorted(g.kind for g in trace.groups.values()) == ["tp", "tp", "world"]


# ---------------------------------------------------------------- display-only spans

@pytest.mark.parametrize("fixture", [NCCL, NCCL_OLD], ids=lambda p: p.name)
def test_cpu_ops_that_launch_nccl_kernels_are_drawn_but_never_nodes(fixture, tmp_path):
    trace = etc.read(fixture)
    rank0 = trace.ranks[0]
    launcher = "record_param_comms" if fixture == NCCL else "nccl:"
    kernels = {n.id: n for n in rank0.nodes if n.is_comm or "peer unknown" in n.name}
    assert kernels and len(rank0.display) == 2 * len(kernels)  # the launching op and its cudaLaunchKernel
    assert {s.node for s in rank0.display} == set(kernels)
    assert {s.thread for s in rank0.display} == {"cpu thread 4000"}
    assert all(s.name.startswith(launcher) or s.name == "cudaLaunchKernel" for s in rank0.display)
    for span in rank0.display:  # the launch ends before its kernel starts
        assert span.start_ns + span.duration_ns <= kernels[span.node].start_ns
    assert not any(n.name.startswith((launcher, "cudaLaunch")) for n in rank0.nodes)

    js, pf = tmp_path / "t.json", tmp_path / "t.pftrace"
    assert run_cli(fixture, "-o", js, "-q").code == 0 and run_cli(fixture, "-o", pf, "-q").code == 0
    doc = json.loads(js.read_text())
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert [name for (pid, _), name in sorted(threads.items()) if pid == 1][0] == "cpu thread 4000"  # above the streams
    cpu = [e for e in doc["traceEvents"] if e["ph"] == "X" and threads[(e["pid"], e["tid"])].startswith("cpu thread")]
    assert len(cpu) == sum(len(r.display) for r in trace.ranks.values())
    assert min(e["ts"] for e in doc["traceEvents"] if e["ph"] == "X") == 0  # the first launch sets the origin
    by_node = {(e["pid"], e["args"]["node"]): e for e in doc["traceEvents"] if e["ph"] == "X" and "node" in e["args"]}
    for e in cpu:
        kernel = by_node[(e["pid"], e["args"]["launched_node"])]
        assert e["args"]["launched"].startswith(kernel["name"].split(" ")[0]) and e["ts"] < kernel["ts"]
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    packets = pb.Trace.FromString(pf.read_bytes()).packet
    pf_threads = {(p.track_descriptor.thread.pid, p.track_descriptor.thread.tid): p.track_descriptor.thread.thread_name
                  for p in packets if p.HasField("track_descriptor") and p.track_descriptor.HasField("thread")}
    assert pf_threads == threads
    begins = sum(1 for p in packets if p.HasField("track_event") and p.track_event.type == 1)
    assert begins == sum(1 for e in doc["traceEvents"] if e["ph"] == "X")


def test_display_spans_leave_chakra_output_validation_and_stats_unchanged(tmp_path):
    from converters.stats import stats_of
    from converters.timeline import timeline_for

    with_spans, without = etc.read(NCCL), etc.read(NCCL)
    for rank in without.ranks.values():
        rank.display = []
    assert sum(len(rank.display) for rank in with_spans.ranks.values()) == 80
    for name, trace in (("a", with_spans), ("b", without)):
        etc.write(trace, tmp_path / name / "w", to="chakra")
    for a in sorted((tmp_path / "a").iterdir()):
        assert a.read_bytes() == (tmp_path / "b" / a.name).read_bytes(), a.name
    assert stats_of(with_spans, timeline_for(with_spans)) == stats_of(without, timeline_for(without))
    assert etc.validate(with_spans) == etc.validate(without)


# ---------------------------------------------------------------- cross-stream waits

def _deps_by_name(trace) -> dict[int, list[tuple]]:
    """Per rank, every node as (name, stream, the (name, stream) of what it waits for)."""
    out = {}
    for r, rank in trace.ranks.items():
        by_id = {n.id: n for n in rank.nodes}
        out[r] = [(n.name, n.stream, sorted((by_id[d].name, by_id[d].stream) for d in n.deps)) for n in rank.nodes]
    return out


def _cross_stream_deps(trace) -> int:
    return sum(1 for rank in trace.ranks.values() for n in rank.nodes for d in n.deps
               if rank.nodes[d].stream != n.stream)


def test_event_record_and_wait_calls_place_cross_stream_waits_in_host_order(tmp_path):
    # newer Kineto: the wait's cuda_sync event at its cudaStreamWaitEvent call (host time), naming
    # the cudaEventRecord call; the host runs 1 ms ahead of the GPU, so GPU times alone mislead
    recorded = tmp_path / "recorded"
    make_nccl_traces.write_set(recorded, "new", sync="record", lag=1000.0)
    expected = _deps_by_name(etc.read(NCCL))
    assert _deps_by_name(etc.read(recorded)) == expected
    assert _cross_stream_deps(etc.read(recorded)) == 64
    without_calls = tmp_path / "without_calls"  # the same traces with the record/wait calls taken out
    without_calls.mkdir()
    for path in recorded.iterdir():
        doc = json.loads(path.read_text())
        doc["traceEvents"] = [e for e in doc["traceEvents"]
                              if e.get("name") not in ("cudaEventRecord", "cudaStreamWaitEvent")]
        (without_calls / path.name).write_text(json.dumps(doc))
    assert _deps_by_name(etc.read(without_calls)) != expected
    # in the Chakra output: rank 0's first TP all-reduce waits for the GEMM on the compute stream before it
    prefix = tmp_path / "chakra" / "w"
    assert run_cli(recorded, "--to", "chakra", "-o", prefix, "-q").code == 0
    nodes = read_rank(rank_files(prefix)[0]).nodes
    by_id = {n.id: n for n in nodes}
    first_allreduce = next(n for n in nodes if n.name.startswith("allreduce"))
    assert [by_id[d].name for d in first_allreduce.data_deps] == ["sm90_xmma_gemm_bf16bf16_bf16f32"]


@pytest.mark.parametrize("sync, sentence", [
    ("unknown", "cross-stream waits whose cuda_sync event names no recording stream (wait_on_stream -1) "
                "are not kept as dependencies"),
    ("runtime", "cudaStreamWaitEvent calls without cuda_sync events (profile with enable_cuda_sync_events): "
                "the runtime calls name no stream"),
])
def test_waits_that_do_not_name_the_recording_stream_are_an_assumption_never_a_guess(sync, sentence, tmp_path):
    make_nccl_traces.write_set(tmp_path / "t", "new", sync=sync)
    trace = etc.read(tmp_path / "t")
    assert _cross_stream_deps(trace) == 0
    assert sum(s.startswith(sentence) for s in trace.assumptions) == 1
    assert run_cli(tmp_path / "t", "--to", "chakra", "-o", tmp_path / "c" / "w", "-q").code == 0


# ---------------------------------------------------------------- gloo p2p in subgroups

def _gloo_p2p_in_dp_groups(out: Path, ranks=range(4)) -> Path:
    """The real gloo traces as if each send/recv had used its DP group ([0, 2], [1, 3]): the
    peers in `Concrete Inputs` become ranks within that group, as torch writes them."""
    in_group = {0: "1", 1: "1", 2: "0", 3: "0"}
    out.mkdir()
    for r in ranks:
        doc = json.loads(gzip.decompress((GLOO / f"rank-{r}.pt.trace.json.gz").read_bytes()))
        for e in doc["traceEvents"]:
            if e.get("name") in ("c10d::send", "c10d::recv_"):
                e["args"]["Concrete Inputs"][2] = in_group[r]
        (out / f"rank-{r}.pt.trace.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode(), mtime=0))
    return out


def _p2p(trace) -> dict[int, list[tuple]]:
    return {r: [(n.kind, n.peer, n.tag) for n in rank.nodes if n.kind in (NodeKind.SEND, NodeKind.RECV)]
            for r, rank in trace.ranks.items()}


def test_gloo_peers_in_a_subgroup_are_mapped_to_global_ranks_by_the_matching_op(tmp_path):
    variant = _gloo_p2p_in_dp_groups(tmp_path / "dp")
    trace = etc.read(variant)
    assert _p2p(trace) == _p2p(etc.read(GLOO))
    assert _p2p(trace)[0] == [(NodeKind.SEND, 2, 0), (NodeKind.SEND, 2, 1)]
    assert _p2p(trace)[3] == [(NodeKind.RECV, 1, 0), (NodeKind.RECV, 1, 1)]
    assert not any("gloo send/recv" in s for s in trace.assumptions)
    assert run_cli(variant, "--to", "chakra", "-o", tmp_path / "c" / "w", "-q").code == 0
    assert run_cli("validate", tmp_path / "c").code == 0


def test_gloo_peers_stay_default_group_ranks_when_no_matching_op_tells_and_that_is_said(tmp_path):
    trace = etc.read(_gloo_p2p_in_dp_groups(tmp_path / "dp", ranks=(0, 3)))  # the peers' traces are absent
    assert _p2p(trace)[0] == [(NodeKind.SEND, 1, 0), (NodeKind.SEND, 1, 1)]  # as written: a default-group rank
    assert ("4 gloo send/recv name a peer that reads as a different rank in each of their process groups and no "
            "matching op on a peer tells which: read as default-group ranks") in trace.assumptions


def test_a_host_side_event_sync_is_no_stream_wait(tmp_path):
    # cudaEventSynchronize: the host waits (Kineto's stream -1), so no stream waits and nothing is unknown
    out = tmp_path / "t"
    out.mkdir()
    for path in NCCL.iterdir():
        doc = json.loads(path.read_text())
        doc["traceEvents"].append({"ph": "X", "cat": "cuda_sync", "name": "Event Sync", "pid": 0, "tid": -1,
                                   "ts": doc["traceEvents"][-1]["ts"], "dur": 1.0,
                                   "args": {"cuda_sync_kind": "Event Sync", "wait_on_stream": -1, "stream": -1}})
        (out / path.name).write_text(json.dumps(doc))
    trace = etc.read(out)
    assert _deps_by_name(trace) == _deps_by_name(etc.read(NCCL))
    assert not any("cross-stream waits" in s for s in trace.assumptions)
