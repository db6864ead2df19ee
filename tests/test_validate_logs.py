"""The validator on Megatron op logs: the samples and a synthetic 1F1B run, clean and mutated."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

import converters as etc
from converters.validate import run_checks, validate_trace
from helpers.megatron_synth import write_run

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

    clean = write_run(tmp_path / "clean", stages=STAGES, tp=TP, microbatches=MB)
    assert run_cli("validate", tmp_path / "clean").code == 0
    write_run(tmp_path / "bad", stages=STAGES, tp=TP, microbatches=MB, edit=drop)
    bad = run_cli("validate", tmp_path / "bad")
    assert bad.code == 1
    assert "p2p: 1 finding\n  E034 unmatched send · rank 2 (stage 1) -> rank 4 (stage 2)" in bad.stdout
    assert bad.stdout.splitlines()[-1].startswith("validate: 2 errors, 0 warnings · 8 ranks · ")
    assert clean


def test_chrome_traces_are_checked_against_perfetto_rules(tmp_path):
    trace_path = tmp_path / "run.json"
    etc.convert(SAMPLES / "megatron_rank4_pp_tp2.log", trace_path, fmt="megatron-log")
    clean = run_cli("validate", trace_path)
    assert clean.code == 0 and clean.stdout.startswith("validate: 0 errors, 0 warnings · 1 rank · 1 check")
    document = orjson.loads(trace_path.read_bytes())
    slices = [e for e in document["traceEvents"] if e.get("ph") == "X"]
    slices[1]["tid"] = 0
    broken = tmp_path / "broken.json"
    broken.write_bytes(orjson.dumps(document))
    bad = run_cli("validate", broken)
    assert bad.code == 1
    assert "E082 bad tid · event " in bad.stdout and "tid must be a non-zero integer" in bad.stdout
