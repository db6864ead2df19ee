"""The Megatron op-log reader: lines -> records, exact times, and file:line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import SAMPLES
from converters.diagnostics import Diagnostics, InputError
from converters.readers.megatron_log import read_file, sniff

RANK4 = SAMPLES / "megatron_rank4_pp_tp2.log"
MOE = SAMPLES / "megatron_rank2_moe_scaling.log"

GOOD = (
    "rank:3:send_forward(stage_id=1,batch_id=2,mg_state=steady,duration=0.57,description=None,group_kind=pp,"
    "input__shape=[2048, 2, 5120],input__dtype=torch.float32,timestamp=4509232419.57,sub_operations=[])"
)


def write(tmp_path: Path, *lines: str, name: str = "r.log", end: str = "\n") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + end, encoding="utf-8")
    return path


def error_of(path: Path, strict: bool = False) -> str:
    with pytest.raises(InputError) as caught:
        read_file(path, Diagnostics(), strict=strict)
    return str(caught.value)


def test_sniff_knows_op_logs_and_nothing_else():
    assert sniff(RANK4.read_bytes()[:4096], RANK4)
    assert sniff(MOE.read_bytes()[:4096], MOE)
    assert sniff(b"\n\n" + GOOD.encode(), None)
    assert not sniff((SAMPLES / "optimusprime_llama1b_pp8.log").read_bytes()[:4096], None)
    assert not sniff((SAMPLES / "simai_tp8_pp16_1024gpu.txt").read_bytes()[:4096], None)
    assert not sniff(b"", None)


def test_rank4_sample_records():
    records = read_file(RANK4, Diagnostics())
    assert [r.op for r in records] == [
        "recv_forward", "forward_step", "send_forward", "recv_backward", "backward_step",
        "send_backward", "dp_allreduce", "optimizer_step",
    ]
    assert {r.rank for r in records} == {4} and {r.stage for r in records} == {2}
    assert [r.line for r in records] == list(range(1, 9))
    assert [len(r.sub_ops) for r in records] == [0, 20, 0, 0, 20, 0, 0, 0]
    recv = records[0]
    assert recv.end_ns == 4_509_232_210_480_000  # exact: no float rounding
    assert recv.duration_ns == 420_450_000
    assert recv.shape == (2048, 2, 5120) and recv.dtype == "torch.float32"
    assert recv.mg_state == "warmup" and recv.group_kind == "pp" and recv.description is None
    dp = records[6]
    assert dp.description == "model_chunk.finish_grad_sync(), All-reduce / reduce-scatter across DP replicas"
    assert dp.shape == (1573350400,)
    sub = records[1].sub_ops[0]
    assert (sub.duration_ns, sub.stamp_ns) == (1_690_000, 4_509_232_225_530_000)
    assert (sub.group, sub.comm_func, sub.func_name, sub.shape) == ("tp", "allreduce", "linear_fwd", (4096, 5120))


def test_moe_sample_sub_ops_without_func_name():
    records = read_file(MOE, Diagnostics())
    assert len(records) == 6
    forward = records[1]
    assert [s.comm_func for s in forward.sub_ops[:3]] == ["allgather", "all_to_all", "all_to_all"]
    assert forward.sub_ops[1].func_name is None
    assert forward.sub_ops[1].name == "_profiled_all_to_all_single"
    assert forward.sub_ops[2].duration_ns == 0
    assert records[0].description == "simulation"


def test_description_with_commas_and_equals_stays_one_value(tmp_path):
    line = GOOD.replace("description=None", "description=sync(a, b), x=1 across DP")
    record = read_file(write(tmp_path, line), Diagnostics())[0]
    assert record.description == "sync(a, b), x=1 across DP"
    assert record.group_kind == "pp"


def test_unknown_keys_are_kept_aside(tmp_path):
    line = GOOD.replace("input__dtype=torch.float32,", "input__dtype=torch.float32,output__shape=[3, 4],")
    record = read_file(write(tmp_path, line), Diagnostics())[0]
    assert record.dtype == "torch.float32"
    assert record.extras == {"output__shape": "[3, 4]"}


def test_scientific_notation_durations(tmp_path):
    record = read_file(write(tmp_path, GOOD.replace("duration=0.57", "duration=5e-05")), Diagnostics())[0]
    assert record.duration_ns == 50


def test_garbled_line_names_file_and_line(tmp_path):
    path = write(tmp_path, GOOD, "rank:3 oops", GOOD)
    assert error_of(path) == f"{path}:2: expected rank:<r>:<op>(key=value,...), found 'rank:3 oops'"


def test_bad_sub_operations(tmp_path):
    path = write(tmp_path, GOOD.replace("sub_operations=[]", "sub_operations=[__import__('os')]"))
    assert error_of(path) == f"{path}:1: cannot parse sub_operations: expected a list of quoted 'key=value,...' strings"
    # Expressions that eval would turn into valid sub-operations: only literals are read
    whole = "trace_src_func=allreduce,duration=0.3,timestamp=4509232419.5,group=tp,comm_func=allreduce"
    path = write(tmp_path, GOOD.replace("sub_operations=[]", f"sub_operations=['{whole[:40]}' + '{whole[40:]}']"))
    assert error_of(path) == f"{path}:1: cannot parse sub_operations: expected a list of quoted 'key=value,...' strings"
    path = write(tmp_path, GOOD.replace("sub_operations=[]", f"sub_operations=[str('{whole}')]"))
    assert error_of(path) == f"{path}:1: cannot parse sub_operations: expected a list of quoted 'key=value,...' strings"
    path = write(tmp_path, GOOD.replace("sub_operations=[]", f"sub_operations=['{whole}']"))
    [record] = read_file(path, Diagnostics())
    assert [(sub.duration_ns, sub.group) for sub in record.sub_ops] == [(300_000, "tp")]  # the literal itself reads
    path = write(tmp_path, GOOD.replace("sub_operations=[]", "sub_operations=[1, 2]"))
    assert error_of(path) == f"{path}:1: cannot parse sub_operations: expected a list of quoted 'key=value,...' strings"


def test_sub_operation_without_timestamp(tmp_path):
    path = write(tmp_path, GOOD.replace("sub_operations=[]", "sub_operations=['duration=1.0,group=tp']"))
    assert error_of(path) == f"{path}:1: sub_operations[0]: missing timestamp= (found 'duration=1.0,group=tp')"


def test_missing_and_bad_values(tmp_path):
    path = write(tmp_path, GOOD.replace(",timestamp=4509232419.57", ""))
    assert error_of(path) == (
        f"{path}:1: send_forward: missing timestamp= (expected keys stage_id, batch_id, mg_state, duration, "
        "description, group_kind, input__shape, input__dtype, timestamp, sub_operations)"
    )
    path = write(tmp_path, GOOD.replace("duration=0.57", "duration=fast"))
    assert error_of(path) == f"{path}:1: duration: expected milliseconds as a number, found 'fast'"
    path = write(tmp_path, GOOD.replace("stage_id=1", "stage_id=one"))
    assert error_of(path) == f"{path}:1: stage_id: expected an integer, found 'one'"
    path = write(tmp_path, GOOD.replace("[2048, 2, 5120]", "[2048, x]"))
    assert error_of(path) == f"{path}:1: input__shape: expected a list of integers like [2048, 5120], found '[2048, x]'"
    path = write(tmp_path, GOOD.replace("duration=0.57", "duration=nan"))
    assert error_of(path) == f"{path}:1: duration: expected a finite number of milliseconds, found nan"


def test_not_utf8(tmp_path):
    path = tmp_path / "bin.log"
    path.write_bytes(GOOD.encode() + b"\nrank:3:\xff\xfe\n")
    assert error_of(path) == f"{path}:2:8: not UTF-8 text (byte 0xff)"


def test_cut_off_last_line_warns_and_keeps_complete_lines(tmp_path):
    path = write(tmp_path, GOOD, GOOD, GOOD[:120], end="")
    diagnostics = Diagnostics()
    records = read_file(path, diagnostics)
    assert len(records) == 2
    assert diagnostics.messages() == [f"{path}:3: last line is cut off; converted the 2 complete lines before it"]


def test_cut_off_last_line_is_an_error_when_strict(tmp_path):
    path = write(tmp_path, GOOD, GOOD[:120])
    assert error_of(path, strict=True) == (
        f"{path}:2: last line is cut off (no closing ')'); the run may have crashed while writing it"
    )


def test_cut_off_line_in_the_middle_is_an_error(tmp_path):
    path = write(tmp_path, GOOD, GOOD[:120], GOOD)
    assert error_of(path).startswith(f"{path}:2: expected rank:<r>:<op>(key=value,...), found ")


def test_last_line_cut_right_after_a_closing_bracket(tmp_path):
    line = GOOD.replace("description=None", "description=finish_grad_sync()")
    path = write(tmp_path, GOOD, line[: line.index("()") + 2], end="")
    diagnostics = Diagnostics()
    assert len(read_file(path, diagnostics)) == 1
    assert diagnostics.messages() == [f"{path}:2: last line is cut off; converted the 1 complete lines before it"]


def test_complete_but_bad_last_line_is_an_error(tmp_path):
    path = write(tmp_path, GOOD, GOOD.replace("stage_id=1", "stage_id=x"))
    assert error_of(path) == f"{path}:2: stage_id: expected an integer, found 'x'"
