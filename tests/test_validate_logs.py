"""The validator on Megatron op logs: the samples and a synthetic 1F1B run, clean and mutated."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import converters as etc
from converters.model import Node, NodeKind
from converters.validate import run_checks, timing, validate_trace
from helpers.megatron_synth import drop_op, write_run

from conftest import SAMPLES, run_cli
from validate_cases import codes, only

STAGES, TP, MB = 4, 2, 4  # ranks 0-1 stage 0, 2-3 stage 1, 4-5 stage 2, 6-7 stage 3


def run(tmp_path: Path, edit=None, **options):
    paths = write_run(tmp_path / "logs", stages=STAGES, tp=TP, microbatches=MB, edit=edit, **options)
    return etc.read(paths, fmt="megatron-log")


def node(trace, rank: int, name: str):
    return next(n for n in trace.ranks[rank].nodes if n.name == name)


@pytest.mark.parametrize("one_file", [False, True])
def test_clean_synthetic_run_has_no_findings(tmp_path, one_file):
    paths = write_run(tmp_path / "logs", stages=STAGES, tp=TP, microbatches=MB, one_file=one_file)
    report = validate_trace(etc.read(paths, fmt="megatron-log"))
    assert [f.text() for f in report.findings] == []
    assert {"pipeline", "timing", "p2p", "collectives", "deadlock"} <= set(report.checks)


def test_clean_two_iterations_and_start_stamped_subops(tmp_path):
    trace = run(tmp_path, iterations=2, subop_stamp="start")
    assert [f.text() for f in run_checks(trace)] == []


@pytest.mark.parametrize("sample", ["megatron_rank4_pp_tp2.log", "megatron_rank2_moe_scaling.log"])
def test_samples_give_only_the_partial_set_note(sample):
    findings = run_checks(etc.read(SAMPLES / sample, fmt="megatron-log"))
    assert codes(findings) == ["I024"]
    assert findings[0].message.startswith("the input holds rank ")


def test_log_with_one_receive_line_removed(tmp_path):
    def drop(rank, index, line):
        return None if rank == 4 and "recv_forward(" in line and "batch_id=2," in line else line

    findings = run_checks(run(tmp_path, edit=drop))
    e034 = only(findings, "E034")
    assert e034.ranks == [2, 4] and e034.microbatch == 2
    assert e034.message.startswith("rank 2 (stage 1) -> rank 4 (stage 2) · no recv_forward on rank 4 with tag ")
    assert e034.node["name"] == "send_forward mb2" and e034.source.endswith("rank2.log:9")
    e050 = only(findings, "E050")
    assert e050.ranks == [4]
    assert e050.message == ("rank 4 (stage 2): 3 recv_forward for 4 microbatches on 4 stages (expected 4); "
                            "microbatch 2 has none")


def test_log_with_a_send_shape_changed(tmp_path):
    def reshape(rank, index, line):
        if rank == 2 and "send_forward(" in line and "batch_id=1," in line:
            return line.replace("input__shape=[", "input__shape=[7, ", 1)
        return line

    e037 = only(run_checks(run(tmp_path, edit=reshape)), "E037")
    assert e037.ranks == [2, 4]
    assert ("send_forward mb1 sends [7, 512, 1, 1024] torch.float32, recv_forward mb1 on rank 4 expects "
            "[512, 1, 1024] torch.float32") in e037.message


def test_backward_before_forward(tmp_path):
    trace = run(tmp_path)
    # the last stage runs F0 B0 F1 B1 ...: give B0 and B1 each other's microbatch
    b0, b1 = node(trace, 6, "backward_step mb0"), node(trace, 6, "backward_step mb1")
    b0.microbatch, b1.microbatch = 1, 0
    e052 = only(run_checks(trace), "E052")
    assert e052.message == "rank 6 (stage 3): backward of microbatch 1 runs before its forward"
    assert e052.node["name"] == "backward_step mb0"


def test_microbatch_ids_not_contiguous(tmp_path):
    trace = run(tmp_path)
    node(trace, 0, "forward_step mb3").microbatch = 5
    e051 = only(run_checks(trace), "E051")
    assert e051.message == "rank 0 (stage 0): forward_step microbatch ids are 0,1,2,5, not 0..3"


def test_schedule_that_is_not_1f1b(tmp_path):
    trace = run(tmp_path)
    nodes = trace.ranks[6].nodes
    b0, f1 = node(trace, 6, "backward_step mb0"), node(trace, 6, "forward_step mb1")
    i, j = nodes.index(b0), nodes.index(f1)
    nodes[i], nodes[j] = f1, b0
    w053 = only(run_checks(trace), "W053")
    assert w053.message.startswith("rank 6 (stage 3): step 1 is F1, 1F1B runs B0 there (2 forwards before the first backward")
    assert "min(P-s-1, M) = 0" in w053.message


def test_overlapping_ops_on_one_rank(tmp_path):
    trace = run(tmp_path)
    step = node(trace, 0, "forward_step mb1")
    step.start_ns -= 5_000_000
    e060 = only(run_checks(trace), "E060")
    assert e060.ranks == [0] and e060.node["name"] == "forward_step mb1"
    assert e060.message.startswith('rank 0: "forward_step mb1" starts 3.920 ms before "forward_step mb0" ends (3 overlaps)')


def test_receive_ending_before_its_send(tmp_path):
    trace = run(tmp_path)
    recv = node(trace, 4, "recv_forward mb0")
    recv.start_ns -= 500_000_000  # half a second early: no clock offset explains only this one
    e062 = only(run_checks(trace), "E062")
    assert e062.ranks == [2, 4] and e062.node["name"] == "recv_forward mb0"


def test_whole_rank_clock_offset_is_a_note_not_an_error(tmp_path):
    trace = run(tmp_path)
    for n in trace.ranks[4].nodes:
        n.start_ns -= 2_000_000_000
    findings = [f for f in run_checks(trace) if f.check == "timing"]
    assert findings and set(codes(findings)) == {"I063"}
    assert "the clocks of ranks 2 and 4 differ" in findings[0].message


def test_implausible_bandwidth(tmp_path):
    trace = run(tmp_path)
    send = node(trace, 0, "send_forward mb0")
    send.duration_ns = 10
    w064 = only(run_checks(trace), "W064")
    assert "send_forward mb0" in w064.message and "GB/s" in w064.message


def test_cli_on_logs(tmp_path):
    def drop(rank, index, line):
        return None if rank == 4 and "recv_forward(" in line and "batch_id=2," in line else line

    clean_files = write_run(tmp_path / "clean", stages=STAGES, tp=TP, microbatches=MB)
    assert len(clean_files) == STAGES * TP
    clean = run_cli("validate", tmp_path / "clean", "--tp", str(TP))  # stated: no layout guess to warn about
    assert clean.code == 0 and clean.stderr == ""
    assert re.fullmatch(r"validate: 0 errors, 0 warnings · 8 ranks · 10 checks · \d+\.\d s\n", clean.stdout)
    write_run(tmp_path / "bad", stages=STAGES, tp=TP, microbatches=MB, edit=drop)
    bad = run_cli("validate", tmp_path / "bad")
    assert bad.code == 1
    assert "p2p: 1 finding\n  E034 unmatched send · rank 2 (stage 1) -> rank 4 (stage 2)" in bad.stdout
    assert bad.stdout.splitlines()[-1].startswith("validate: 2 errors, 0 warnings · 8 ranks · ")


def test_chrome_traces_are_checked_against_perfetto_rules(tmp_path):
    trace_path = tmp_path / "run.json"
    etc.convert(SAMPLES / "megatron_rank4_pp_tp2.log", trace_path, fmt="megatron-log")
    clean = run_cli("validate", trace_path)
    assert clean.code == 0 and clean.stdout.startswith("validate: 0 errors, 0 warnings · 1 process · 1 check")
    document = orjson.loads(trace_path.read_bytes())
    slices = [e for e in document["traceEvents"] if e.get("ph") == "X"]
    slices[1]["tid"] = 0
    broken = tmp_path / "broken.json"
    broken.write_bytes(orjson.dumps(document))
    bad = run_cli("validate", broken)
    assert bad.code == 1
    assert "E082 bad tid · event " in bad.stdout and "tid must be a non-zero integer" in bad.stdout


# ---------------------------------------------------------------- collectives missing on one rank


def test_several_collectives_missing_on_one_rank_name_it_and_where_they_are(tmp_path):
    # rank 6 logs no backward_step of microbatch 1: it lacks that step's 4 TP all-reduces
    findings = run_checks(run(tmp_path, edit=drop_op(6, "backward_step", 1)))
    e040 = only(findings, "E040")
    assert e040.ranks == [6]
    assert e040.message == ("seqs 12-15 · rank 6 lacks 4 collectives that rank 7 issues: "
                            "4 × ALL_REDUCE 4194304 B torch.float32 (28 collectives, not 32) "
                            "(no majority: the longer sequence is taken as reference)")
    # the first collective rank 6 lacks, as rank 7 logged it
    assert e040.microbatch == 1 and e040.node["name"] == "normlinear_bwd allreduce"
    assert e040.source.endswith("rank7.log:9")


# ---------------------------------------------------------------- pipeline counts with a line to look at


def test_sample_log_with_its_receive_line_removed_points_at_a_line(tmp_path):
    lines = (SAMPLES / "megatron_rank4_pp_tp2.log").read_text().splitlines(keepends=True)
    kept = [line for line in lines if not line.startswith("rank:4:recv_backward(")]
    assert len(kept) == len(lines) - 1
    log = tmp_path / "rank4.log"
    log.write_text("".join(kept))
    findings = run_checks(etc.read(log, fmt="megatron-log"))
    assert codes(findings) == ["I024", "E050"]
    e050 = findings[1]
    assert e050.message == ("rank 4 (stage 2): 0 recv_backward for 1 microbatch on 4 stages (expected 1); "
                            "microbatch 0 has none")
    # no recv_backward is left: the backward_step it feeds is where to look
    assert e050.source == f"{log}:4" and e050.node["name"] == "backward_step mb0"


# ---------------------------------------------------------------- Chakra sets converted from logs


def chakra_of(tmp_path: Path, inputs, name: str = "set") -> Path:
    etc.convert(inputs, tmp_path / name / "w", to="chakra")
    return tmp_path / name


def source_ranks(set_dir: Path) -> str:
    trace = etc.read(set_dir, fmt="chakra")
    attrs = {a.name: a.value for a in trace.sorted_ranks()[0].wire_metadata[1]}
    return attrs["source.ranks"]


def test_set_from_logs_that_lost_a_rank_file_is_an_error(tmp_path):
    paths = write_run(tmp_path / "logs", stages=STAGES, tp=TP, microbatches=MB)
    set_dir = chakra_of(tmp_path, paths)
    assert source_ranks(set_dir) == "0-7"
    (set_dir / "w.5.et").unlink()
    findings = run_checks(etc.read(set_dir, fmt="chakra"))
    assert "W025" not in codes(findings)
    e023 = only(findings, "E023")
    assert e023.ranks == [5] and e023.message.startswith("rank 5 is missing (no w.5.et); present: 0-4,6,7;")
    # the ranks that talk to rank 5 are reported too, and the dry run is not skipped
    e034 = only(findings, "E034")
    assert e034.message.startswith("rank 3 (stage 1) -> rank 5 · rank 5 is not in the set")
    assert {"E035", "I047"} <= set(codes(findings))
    result = run_cli("validate", set_dir)
    assert result.code == 1 and "E023 missing rank · rank 5 is missing (no w.5.et)" in result.stdout


def test_optimus_sample_set_that_lost_a_rank_file_is_an_error(tmp_path):
    set_dir = chakra_of(tmp_path, SAMPLES / "optimusprime_llama1b_pp8.log")
    assert source_ranks(set_dir) == "0-7"
    (set_dir / "w.3.et").unlink()
    findings = run_checks(etc.read(set_dir, fmt="chakra"))
    assert "W025" not in codes(findings)
    assert only(findings, "E023").ranks == [3]
    assert only(findings, "E046").message.startswith("rank 0 waits in recv from rank 1")


def test_set_of_a_one_rank_log_is_only_a_warning(tmp_path):
    set_dir = chakra_of(tmp_path, SAMPLES / "megatron_rank4_pp_tp2.log")
    assert source_ranks(set_dir) == "4"
    findings = run_checks(etc.read(set_dir, fmt="chakra"))
    assert codes(findings) == ["W025"]
    assert findings[0].message == ("the set holds rank 4 of 8 (converted from a log of only these); "
                                   "a simulator would wait forever for the absent ranks' messages and collectives")


def test_set_from_logs_without_the_record_of_their_ranks_cannot_tell_a_lost_file(tmp_path):
    """Sets written before `source.ranks` existed: every absent rank is taken as never logged."""
    paths = write_run(tmp_path / "logs", stages=STAGES, tp=TP, microbatches=MB)
    dump = tmp_path / "dump.json"
    etc.convert(paths, dump, to="et-json")
    document = orjson.loads(dump.read_bytes())
    del document["ranks"]["5"]
    for rank in document["ranks"].values():
        rank["metadata"]["attr"] = [a for a in rank["metadata"]["attr"] if a["name"] != "source.ranks"]
    dump.write_bytes(orjson.dumps(document))
    findings = run_checks(etc.read(dump, fmt="et-json"))
    assert codes(findings) == ["W025"]
    assert findings[0].message.startswith("the set holds ranks 0-4,6,7 of 8 (converted from a log of only these)")


def test_sub_operation_outside_its_step(tmp_path):
    trace = run(tmp_path)
    sub = next(n for n in trace.ranks[0].nodes if n.parent is not None)
    sub.start_ns += 100_000_000  # 100 ms later: well after its 12 ms forward step ends
    w061 = only(run_checks(trace), "W061")
    assert w061.message == 'rank 0: sub-operation lies outside its step "forward_step mb0"'
    assert w061.node["name"] == "linear_fwd allreduce" and w061.source.endswith("rank0.log:2")


def test_set_from_logs_of_some_ranks_that_lost_another_file(tmp_path):
    paths = write_run(tmp_path / "logs", stages=STAGES, tp=TP, microbatches=MB)
    set_dir = chakra_of(tmp_path, [p for p in paths if p.name != "rank4.log"])
    assert source_ranks(set_dir) == "0-3,5-7"
    (set_dir / "w.2.et").unlink()
    findings = run_checks(etc.read(set_dir, fmt="chakra"))
    assert codes(findings)[:2] == ["W025", "E023"]
    assert findings[0].message.startswith("the set holds ranks 0,1,3,5-7 of 8 (converted from a log of only ranks 0-3,5-7);")
    assert findings[1].ranks == [2]
    # rank 4 was never logged: nothing is reported toward it; rank 2 was, and rank 0 sends to it
    p2p = [f for f in findings if f.code in ("E034", "E035")]
    assert p2p and all(f.ranks == [0, 2] for f in p2p)
    assert "deadlock" not in {f.check for f in findings}  # cannot run without rank 4


def test_ranks_put_together_from_two_sets_are_all_checked(tmp_path):
    """Each set records only its own source ranks; the ranks present are held all the same."""
    import shutil

    paths = write_run(tmp_path / "logs", stages=STAGES, tp=TP, microbatches=MB, edit=drop_op(5, "recv_forward", 1))
    layout = {"tp": TP, "dp": 1, "pp": STAGES}
    etc.convert([p for p in paths if p.name in {f"rank{r}.log" for r in range(4)}], tmp_path / "a" / "w", to="chakra", **layout)
    etc.convert([p for p in paths if p.name in {f"rank{r}.log" for r in range(4, 8)}], tmp_path / "b" / "w", to="chakra",
                force=True, **layout)
    for rank in range(4, 8):
        shutil.copy(tmp_path / "b" / f"w.{rank}.et", tmp_path / "a")
    assert source_ranks(tmp_path / "a") == "0-3"
    findings = run_checks(etc.read(tmp_path / "a", fmt="chakra"))
    unmatched = [f for f in findings if f.code == "E034"]
    assert unmatched and all(f.ranks == [3, 5] for f in unmatched)


def _outside_by_loop(nodes):
    """W061's rule, one node at a time (what `timing._outside_parents` computes by columns)."""
    by_id = {n.id: n for n in nodes}
    out = []
    for node in nodes:
        parent = by_id.get(node.parent) if node.parent is not None else None
        if parent is not None and (node.start_ns < parent.start_ns - timing.TOLERANCE_NS
                                   or node.start_ns + node.duration_ns
                                   > parent.start_ns + parent.duration_ns + timing.TOLERANCE_NS):
            out.append((node, parent))
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 12), st.integers(-60_000, 60_000), st.integers(0, 60_000)), max_size=12))
def test_sub_operations_outside_their_step_are_found_as_by_a_loop(rows):
    # (parent id or a missing one, start, duration) per node; ids repeat (the last one wins);
    # times around TOLERANCE_NS (20 us), so that some lie outside and some just inside
    nodes = [Node(i % 9, f"n{i}", NodeKind.COMPUTE, duration_ns=duration, start_ns=start,
                  parent=None if parent < 0 else parent)
             for i, (parent, start, duration) in enumerate(rows)]
    assert timing._outside_parents(nodes) == _outside_by_loop(nodes)


def test_outside_parents_at_the_tolerance():
    step = Node(0, "step", NodeKind.COMPUTE, duration_ns=100_000, start_ns=0)
    subs = [Node(k, f"s{k}", NodeKind.COMPUTE, duration_ns=duration, start_ns=start, parent=parent)
            for k, (start, duration, parent) in enumerate([(-20_000, 10, 0), (-20_001, 10, 0), (0, 120_000, 0),
                                                           (0, 120_001, 0), (-99_999, 10, 7)], start=1)]
    assert [sub.name for sub, parent in timing._outside_parents([step, *subs])] == ["s2", "s4"]


def test_schedule_that_is_not_1f1b_in_a_later_iteration(tmp_path):
    # the steps of each iteration are found in one pass over the nodes: the second iteration's
    # order is checked on its own steps, and the first iteration stays clean
    trace = run(tmp_path, iterations=2)
    nodes = trace.ranks[6].nodes
    second = [k for k, n in enumerate(nodes) if n.args.get("iteration") == 1 and n.parent is None]
    i = next(k for k in second if nodes[k].name == "backward_step mb0")
    j = next(k for k in second if nodes[k].name == "forward_step mb1")
    nodes[i], nodes[j] = nodes[j], nodes[i]
    w053 = only(run_checks(trace), "W053")
    assert w053.message.startswith("rank 6 (stage 3), iteration 1: step 1 is F1, 1F1B runs B0 there")
