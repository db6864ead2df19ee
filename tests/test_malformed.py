"""The malformed-input corpus: one test per broken input, for every reader.

Each case breaks a sample one way (with the generators in tests/malformed.py), runs
`et-convert <input> --from <format> -o out/o.json` and checks what the user sees: exit code 2,
exactly one line `et-convert: error: <file>:<line>: ...` (or `<file>: byte N: ...` for binary
input, `<file>: $.json.path: ...` for a JSON dump), no traceback and no output file.

The CLI runs in this process (`run_cli_here`, the same `app` the console script calls) because
~100 fresh interpreters would cost a minute; `test_in_process_runs_match_a_real_process`
checks that both ways print the same.
"""

from __future__ import annotations

import functools
import gzip
import io
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

import malformed as m
from conftest import SAMPLES, CliResult, run_cli

SIMAI = "simai_tp8_pp16_1024gpu.txt"
NEUSIGHT = "neusight_gpt2_block.tsv"
MEGATRON = "megatron_rank4_pp_tp2.log"
OPTIMUS = "optimusprime_llama1b_pp8.log"
BIG = b"18446744073709551616"  # 2^64
NON_UTF8 = b"\xff"


def run_cli_here(*args: str | Path) -> CliResult:
    """`et-convert ARGS` in this process: exit code, stdout and stderr as a user would see them."""
    from converters.cli import app

    out, err = io.StringIO(), io.StringIO()
    code: int | str | None = 0
    with redirect_stdout(out), redirect_stderr(err):
        try:
            app(args=[str(a) for a in args], prog_name="et-convert")
        except SystemExit as e:
            code = e.code
    return CliResult(code if isinstance(code, int) else (0 if code is None else 1), out.getvalue(), err.getvalue())


@functools.cache
def sample(name: str) -> bytes:
    return (SAMPLES / name).read_bytes()


@functools.cache
def chakra_set() -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((SAMPLES / "chakra_data").glob("*.et"))}


@functools.cache
def et_json_dump() -> bytes:
    """An et-json dump of samples/chakra_data, written by our own writer."""
    import tempfile

    from converters import api

    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "dump.json"
        api.write(api.read(SAMPLES / "chakra_data", "chakra"), out, to="et-json")
        return out.read_bytes()


@dataclass(frozen=True)
class Case:
    id: str
    fmt: str
    make: Callable[[], tuple[dict[str, bytes], str]]  # -> (input files, expected message after "error: ")
    args: tuple[str, ...] = ()
    xfail: str | None = None  # a known defect in a reader this corpus does not own

    def __repr__(self) -> str:
        return self.id


CASES: list[Case] = []


def case(id: str, fmt: str, *args: str):
    """Register `make() -> (files, message)`; `{in}` in the message is the input directory."""

    def register(make):
        CASES.append(Case(id, fmt, make, args))
        return make

    return register


def text_case(id: str, fmt: str, name: str, seed: bytes | Callable[[], bytes], edit, message: str, *args: str):
    """A one-file case: `edit(seed bytes) -> bytes`, the message refers to the file as `{f}`."""
    def make():
        data = seed() if callable(seed) else seed
        return {name: edit(data)}, message.replace("{f}", "{in}/" + name)

    CASES.append(Case(id, fmt, make, args))


def run_case(c: Case, tmp: Path) -> tuple[CliResult, Path]:
    files, _ = c.make()
    indir, outdir = tmp / "in", tmp / "out"
    indir.mkdir(parents=True)
    for name, data in files.items():
        (indir / name).write_bytes(data)
    inputs = [indir / name for name in sorted(files) if not name.endswith("comm_group.json")]
    return run_cli_here(*inputs, "--from", c.fmt, *c.args, "-o", outdir / "o.json"), outdir


# ------------------------------------------------------------------------------------ simai

simai = functools.partial(sample, SIMAI)
S = "simai"
text_case("simai-empty", S, "w.txt", b"", lambda d: d, "{f}: file is empty")
text_case("simai-blank-lines-only", S, "w.txt", b"", lambda d: b"\n \n\t\n", "{f}: file is empty")
text_case("simai-cut-in-the-header", S, "w.txt", simai, lambda d: m.cut_mid_line(d, 1, 40),
          "{f}:1: expected a header key such as 'model_parallel_NPU_group:', found 'model_pa'")
text_case("simai-cut-mid-row", S, "w.txt", simai, lambda d: m.cut_mid_line(d, 100),
          "{f}:100: the file ends after 98 of the 557 rows line 2 announces (truncated?)")
text_case("simai-cut-mid-row-of-the-last-line", S, "w.txt", simai, lambda d: m.cut_mid_line(d, 559, 30),
          "{f}:559: expected 12 columns (name, reserved, fwd_compute, fwd_comm_type, ...), found 6")
text_case("simai-too-few-columns", S, "w.txt", simai, lambda d: m.drop_cells(d, 10, 1),
          "{f}:10: expected 12 columns (name, reserved, fwd_compute, fwd_comm_type, ...), found 11")
text_case("simai-too-many-columns", S, "w.txt", simai, lambda d: m.add_cells(d, 10, [b"7"]),
          "{f}:10: expected 12 columns (name, reserved, fwd_compute, fwd_comm_type, ...), found 13")
text_case("simai-non-numeric-time", S, "w.txt", simai, lambda d: m.set_cell(d, 10, 2, b"fast"),
          "{f}:10: fwd_compute: expected a whole number >= 0, found 'fast'")
text_case("simai-negative-time", S, "w.txt", simai, lambda d: m.set_cell(d, 10, 5, b"-3"),
          "{f}:10: ig_compute: expected a whole number >= 0, found '-3'")
text_case("simai-nan-time", S, "w.txt", simai, lambda d: m.set_cell(d, 10, 8, b"NaN"),
          "{f}:10: wg_compute: expected a whole number >= 0, found 'NaN'")
text_case("simai-inf-size", S, "w.txt", simai, lambda d: m.set_cell(d, 10, 4, b"inf"),
          "{f}:10: fwd_comm_size: expected a whole number >= 0, found 'inf'")
text_case("simai-absurd-size", S, "w.txt", simai, lambda d: m.set_cell(d, 10, 4, BIG),
          "{f}:10: fwd_comm_size: 18446744073709551616 is too large (at most 2^63 - 1)")
text_case("simai-absurd-time", S, "w.txt", simai, lambda d: m.set_cell(d, 10, 2, BIG),
          "{f}:10: fwd_compute: 18446744073709551616 is too large (at most 2^63 - 1)")
text_case("simai-unknown-comm-type", S, "w.txt", simai, lambda d: m.set_cell(d, 10, 3, b"ALLGATHERV"),
          "{f}:10: fwd_comm_type: unknown comm type 'ALLGATHERV'; expected ALLREDUCE, ALLGATHER, REDUCESCATTER, "
          "ALLTOALL (optionally with _EP or _DP_EP) or NONE")
text_case("simai-unknown-policy", S, "w.txt", simai, lambda d: m.set_cell(d, 1, 0, b"HYBRID_TRANSFORMERS", b" "),
          "{f}:1: unknown policy 'HYBRID_TRANSFORMERS'; expected one of MICRO, DATA, MODEL, HYBRID_DATA_MODEL, "
          "HYBRID_MODEL_DATA, HYBRID_TRANSFORMER, HYBRID_TRANSFORMER_FWD_IN_BCKWD, HYBRID_DLRM, HYBRID_DLRM_ENHANCED, "
          "HYBRID_CUSTOMIZED, DISTRIBUTED_INFERENCE")
text_case("simai-header-value-not-a-number", S, "w.txt", simai, lambda d: m.set_cell(d, 1, 8, b"sixteen", b" "),
          "{f}:1: ga: expected a whole number >= 0, found 'sixteen'")
text_case("simai-header-key-without-value", S, "w.txt", simai,
          lambda d: m.set_line(d, 1, m.line_of(d, 1).rsplit(b" ", 1)[0]),
          "{f}:1: checkpoint_initiates: expected a number after it, found the end of the line")
text_case("simai-header-word-that-is-no-key", S, "w.txt", simai, lambda d: m.set_cell(d, 1, 1, b"model_parallel", b" "),
          "{f}:1: expected a header key such as 'model_parallel_NPU_group:', found 'model_parallel'")
text_case("simai-header-absurd-gpus", S, "w.txt", simai, lambda d: m.set_cell(d, 1, 10, BIG, b" "),
          "{f}:1: all_gpus: 18446744073709551616 is too large (at most 2^63 - 1)")
text_case("simai-header-gpus-not-a-multiple", S, "w.txt", simai, lambda d: m.set_cell(d, 1, 10, b"1000", b" "),
          "{f}:1: all_gpus 1000 is not a multiple of tp*pp = 128")
text_case("simai-header-too-many-gpus", S, "w.txt", simai, lambda d: m.set_cell(d, 1, 10, b"1099511627776", b" "),
          "{f}:1: all_gpus 1099511627776 is more ranks than et-convert handles (1048576)")
text_case("simai-fewer-rows-than-announced", S, "w.txt", simai, lambda d: m.set_line(d, 2, b"558"),
          "{f}:559: the file ends after 557 of the 558 rows line 2 announces (truncated?)")
text_case("simai-row-count-not-a-number", S, "w.txt", simai, lambda d: m.set_line(d, 2, b"557.0"),
          "{f}:2: expected the row count (one whole number), found '557.0'")
text_case("simai-non-utf8-byte", S, "w.txt", simai, lambda d: m.set_line(d, 10, lambda l: l[:4] + NON_UTF8 + l[4:]),
          "{f}:10:5: not UTF-8 text (byte 0xff)")
text_case("simai-binary-garbage", S, "w.txt", b"", lambda d: m.garbage(), "{f}:1:1: not UTF-8 text (byte 0xff)")

# ------------------------------------------------------------------------------------ astra-text

astra = lambda: (SAMPLES / "workloads" / "astra_data.txt").read_bytes()  # noqa: E731
A = "astra-text"
N8 = ("--num-npus", "8")
text_case("astra-empty", A, "w.txt", b"", lambda d: d, "{f}: file is empty", *N8)
text_case("astra-cut-mid-row", A, "w.txt", astra, lambda d: m.cut_mid_line(d, 5),
          "{f}:5: the file ends after 3 of the 4 rows line 2 announces (truncated?)", *N8)
text_case("astra-cut-mid-last-row", A, "w.txt", astra, lambda d: m.cut_mid_line(d, 6, 20),
          "{f}:6: expected 12 columns (name, reserved, fwd_compute, fwd_comm_type, ...), found 6", *N8)
text_case("astra-too-few-columns", A, "w.txt", astra, lambda d: m.drop_cells(d, 3, 2),
          "{f}:3: expected 12 columns (name, reserved, fwd_compute, fwd_comm_type, ...), found 10", *N8)
text_case("astra-non-numeric-size", A, "w.txt", astra, lambda d: m.set_cell(d, 3, 10, b"1MB"),
          "{f}:3: wg_comm_size: expected a whole number >= 0, found '1MB'", *N8)
text_case("astra-dlrm-layer-with-two-signs", A, "w.txt", b"HYBRID_DLRM --1\t100\0", lambda d: d,
          "{f}:1: expected a header key such as 'model_parallel_NPU_group:', found '--1'", *N8)  # found by fuzzing
text_case("astra-negative-delay", A, "w.txt", astra, lambda d: m.set_cell(d, 3, 11, b"-10"),
          "{f}:3: update_delay: expected a whole number >= 0, found '-10'", *N8)
text_case("astra-inf-time", A, "w.txt", astra, lambda d: m.set_cell(d, 3, 2, b"inf"),
          "{f}:3: fwd_compute: expected a whole number >= 0, found 'inf'", *N8)
text_case("astra-absurd-size", A, "w.txt", astra, lambda d: m.set_cell(d, 3, 10, BIG),
          "{f}:3: wg_comm_size: 18446744073709551616 is too large (at most 2^63 - 1)", *N8)
text_case("astra-unknown-comm-type", A, "w.txt", astra, lambda d: m.set_cell(d, 3, 9, b"BROADCST"),
          "{f}:3: wg_comm_type: unknown comm type 'BROADCST'; expected ALLREDUCE, ALLGATHER, REDUCESCATTER, "
          "ALLTOALL or NONE", *N8)
text_case("astra-bad-header-word", A, "w.txt", astra, lambda d: m.set_line(d, 1, b"HYBRID_DATA_MODEL 2"),
          "{f}:1: expected a header key such as 'model_parallel_NPU_group:', found '2'", *N8)
text_case("astra-header-key-without-value", A, "w.txt", astra,
          lambda d: m.set_line(d, 1, b"HYBRID_DATA_MODEL model_parallel_NPU_group:"),
          "{f}:1: model_parallel_NPU_group: expected a number after it, found the end of the line", *N8)
text_case("astra-row-count-mismatch", A, "w.txt", astra, lambda d: m.set_line(d, 2, b"5"),
          "{f}:6: the file ends after 4 of the 5 rows line 2 announces (truncated?)", *N8)
text_case("astra-non-utf8-byte", A, "w.txt", astra, lambda d: m.set_line(d, 4, lambda l: NON_UTF8 + l),
          "{f}:4:1: not UTF-8 text (byte 0xff)", *N8)
text_case("astra-binary-garbage", A, "w.txt", b"", lambda d: m.garbage(), "{f}:1:1: not UTF-8 text (byte 0xff)", *N8)
text_case("astra-without-num-npus", A, "w.txt", astra, lambda d: d,
          "ASTRA-sim text workloads carry no rank count: give --num-npus N")
text_case("astra-absurd-num-npus", A, "w.txt", astra, lambda d: d,
          "--num-npus must be between 1 and 1048576, got 18446744073709551616", "--num-npus", BIG.decode())

# ------------------------------------------------------------------------------------ neusight

neusight = functools.partial(sample, NEUSIGHT)
NS = "neusight"
TAB = b"\t"
text_case("neusight-empty", NS, "t.tsv", b"", lambda d: d,
          "{f}:1: expected the header row name forward_compute_time forward_comm_type ... (11 tab-separated columns), "
          "found nothing")
text_case("neusight-header-only", NS, "t.tsv", neusight, lambda d: d.split(b"\n", 1)[0] + b"\n",
          "{f}:1: the table has a header but no rows")
text_case("neusight-bad-header-key", NS, "t.tsv", neusight, lambda d: m.set_cell(d, 1, 1, b"fwd_time", TAB),
          "{f}:1: expected the header row name forward_compute_time forward_comm_type ... (11 tab-separated columns), "
          "found name fwd_time forward_comm_type ...")
text_case("neusight-cut-mid-row", NS, "t.tsv", neusight, lambda d: m.cut_mid_line(d, 20, 12),
          "{f}:20: expected 11 tab-separated columns (name, forward_compute_time, forward_comm_type, ...), found 2")
text_case("neusight-too-many-columns", NS, "t.tsv", neusight, lambda d: m.add_cells(d, 5, [b"0"], TAB),
          "{f}:5: expected 11 tab-separated columns (name, forward_compute_time, forward_comm_type, ...), found 12")
text_case("neusight-non-numeric-time", NS, "t.tsv", neusight, lambda d: m.set_cell(d, 5, 1, b"slow", TAB),
          "{f}:5: forward_compute_time: expected a time in ms >= 0, found 'slow'")
text_case("neusight-negative-time", NS, "t.tsv", neusight, lambda d: m.set_cell(d, 5, 4, b"-0.5", TAB),
          "{f}:5: backward_compute_time: expected a time in ms >= 0, found '-0.5'")
text_case("neusight-nan-time", NS, "t.tsv", neusight, lambda d: m.set_cell(d, 5, 10, b"nan", TAB),
          "{f}:5: process_time: expected a time in ms >= 0, found 'nan'")
text_case("neusight-inf-time", NS, "t.tsv", neusight, lambda d: m.set_cell(d, 5, 7, b"inf", TAB),
          "{f}:5: weight_grad_compute_time: expected a time in ms >= 0, found 'inf'")
text_case("neusight-absurd-time", NS, "t.tsv", neusight, lambda d: m.set_cell(d, 5, 1, b"1e300", TAB),
          "{f}:5: forward_compute_time: 1e300 ms is too long (at most 9223372036854 ms)")
text_case("neusight-fractional-size", NS, "t.tsv", neusight, lambda d: m.set_cell(d, 5, 6, b"1.5", TAB),
          "{f}:5: backward_comm_size: expected a whole element count >= 0, found '1.5'")
text_case("neusight-absurd-size", NS, "t.tsv", neusight, lambda d: m.set_cell(d, 5, 6, BIG, TAB),
          "{f}:5: backward_comm_size: 18446744073709551616 elements is too many (at most 2^63 - 1)")
text_case("neusight-size-too-many-bytes", NS, "t.tsv", neusight, lambda d: m.set_cell(d, 5, 6, b"4611686018427387904", TAB),
          "{f}:5: ALLREDUCE_ASYNC of 4611686018427387904 elements x 4 bytes is more than a Chakra size holds "
          "(2^63 - 1 bytes)")
text_case("neusight-unknown-comm-type", NS, "t.tsv", neusight, lambda d: m.set_cell(d, 5, 5, b"ALLREDUCE_SYNC", TAB),
          "{f}:5: backward_comm_type: unknown comm type 'ALLREDUCE_SYNC'; expected None or one of ALLREDUCE, "
          "ALLGATHER, REDUCESCATTER, ALLTOALL (optionally with _ASYNC)")
text_case("neusight-non-utf8-byte", NS, "t.tsv", neusight, lambda d: m.set_line(d, 7, lambda l: l + NON_UTF8),
          "{f}:7:56: not UTF-8 text (byte 0xff)")
text_case("neusight-binary-garbage", NS, "t.tsv", b"", lambda d: m.garbage(), "{f}:1:1: not UTF-8 text (byte 0xff)")

# ------------------------------------------------------------------------------------ megatron-log

megatron = functools.partial(sample, MEGATRON)
MG = "megatron-log"
text_case("megatron-empty", MG, "rank4.log", b"", lambda d: d,
          "{f}: no op lines found; expected rank:<r>:<op>(key=value,...)")
text_case("megatron-cut-mid-line-before-the-end", MG, "rank4.log", megatron,
          lambda d: m.set_line(d, 3, lambda l: l[:100]),
          "{f}:3: expected rank:<r>:<op>(key=value,...), found 'rank:4:send_forward(stage_id=2,batch_id=0,mg_state=warmup,du...'")
text_case("megatron-line-that-is-no-op", MG, "rank4.log", megatron,
          lambda d: m.set_line(d, 5, b"NCCL WARN Call to connect returned Connection refused"),
          "{f}:5: expected rank:<r>:<op>(key=value,...), found 'NCCL WARN Call to connect returned Connection refused'")
text_case("megatron-missing-key", MG, "rank4.log", megatron,
          lambda d: m.set_line(d, 1, lambda l: l.replace(b"duration=420.45,", b"")),
          "{f}:1: recv_forward: missing duration= (expected keys stage_id, batch_id, mg_state, duration, description, "
          "group_kind, input__shape, input__dtype, timestamp, sub_operations)")
text_case("megatron-non-numeric-duration", MG, "rank4.log", megatron,
          lambda d: m.set_line(d, 1, lambda l: l.replace(b"duration=420.45", b"duration=fast")),
          "{f}:1: duration: expected milliseconds as a number, found 'fast'")
text_case("megatron-negative-duration", MG, "rank4.log", megatron,
          lambda d: m.set_line(d, 1, lambda l: l.replace(b"duration=420.45", b"duration=-420.45")),
          "{f}:1: duration: expected a duration of at least 0 ms, found -420.45")
text_case("megatron-nan-timestamp", MG, "rank4.log", megatron,
          lambda d: m.set_line(d, 3, lambda l: l.replace(b"timestamp=4509232419.57", b"timestamp=nan")),
          "{f}:3: timestamp: expected a finite number of milliseconds, found nan")
text_case("megatron-inf-duration", MG, "rank4.log", megatron,
          lambda d: m.set_line(d, 3, lambda l: l.replace(b"duration=0.57", b"duration=inf")),
          "{f}:3: duration: expected a finite number of milliseconds, found inf")
text_case("megatron-absurd-timestamp", MG, "rank4.log", megatron,
          lambda d: m.set_line(d, 3, lambda l: l.replace(b"timestamp=4509232419.57", b"timestamp=1e300")),
          "{f}:3: timestamp: 1e300 ms is too large (at most 9223372036854 ms)")
text_case("megatron-absurd-shape", MG, "rank4.log", megatron,
          lambda d: m.set_line(d, 3, lambda l: l.replace(b"input__shape=[2048, 2, 5120]", b"input__shape=[" + BIG + b"]")),
          "{f}:3: input__shape [18446744073709551616] is 73786976294838206464 bytes, more than a Chakra size holds")
text_case("megatron-non-integer-stage", MG, "rank4.log", megatron,
          lambda d: m.set_line(d, 2, lambda l: l.replace(b"stage_id=2", b"stage_id=two")),
          "{f}:2: stage_id: expected an integer, found 'two'")
text_case("megatron-bad-shape", MG, "rank4.log", megatron,
          lambda d: m.set_line(d, 1, lambda l: l.replace(b"input__shape=[2048, 2, 5120]", b"input__shape=[2048, x]")),
          "{f}:1: input__shape: expected a list of integers like [2048, 5120], found '[2048, x]'")
text_case("megatron-garbled-sub-operations", MG, "rank4.log", megatron,
          lambda d: m.set_line(d, 2, lambda l: l.replace(b"sub_operations=['", b"sub_operations=[")),
          "{f}:2: cannot parse sub_operations: expected a list of quoted 'key=value,...' strings")
text_case("megatron-stage-changes", MG, "rank4.log", megatron,
          lambda d: m.set_line(d, 6, lambda l: l.replace(b"stage_id=2", b"stage_id=3")),
          "{f}:6: rank 4 logs stage_id 3 here but stage_id 2 at {f}:1")
text_case("megatron-non-utf8-byte", MG, "rank4.log", megatron,
          lambda d: m.set_line(d, 4, lambda l: l.replace(b"cooldown", b"cool\xffdown")),
          "{f}:4:57: not UTF-8 text (byte 0xff)")
text_case("megatron-binary-garbage", MG, "rank4.log", b"", lambda d: m.garbage(),
          "{f}:1:1: not UTF-8 text (byte 0xff)")

# ------------------------------------------------------------------------------------ optimus-log

optimus = functools.partial(sample, OPTIMUS)
OP = "optimus-log"
text_case("optimus-empty", OP, "run.log", b"", lambda d: d,
          "{f}: no stage2rank line and no '[rank:R stage:S] ... forward time' blocks: nothing to model")
text_case("optimus-binary-garbage", OP, "run.log", b"", lambda d: m.garbage(), "{f}:1:1: not UTF-8 text (byte 0xff)")
text_case("optimus-cut-before-any-step", OP, "run.log", optimus, lambda d: m.cut_mid_line(d, 60),
          "{f}: no step has per-layer forward times for all 8 stages")
text_case("optimus-garbled-stage2rank", OP, "run.log", optimus,
          lambda d: d.replace(b"stage2rank = {0: [0]", b"stage2rank = {0: [0)", 1),
          "{f}:31: cannot parse stage2rank: expected a dict like {0: [0], 1: [1]}")
text_case("optimus-config-disagrees", OP, "run.log", optimus, lambda d: d.replace(b"> PP: 8", b"> PP: 8\n> PP: 4", 1),
          "{f}:17: pp is 4 here but 8 at {f}:16")
text_case("optimus-no-gas", OP, "run.log", optimus, lambda d: d.replace(b"> GAS:", b"> GAZ:"),
          "{f}: no '> GAS: N' line (or GAS 0): the number of microbatches is unknown")
text_case("optimus-absurd-gas", OP, "run.log", optimus, lambda d: d.replace(b"> GAS: ", b"> GAS: " + BIG, 1),
          "{f}:11: GAS 1844674407370955161632 is more microbatches than et-convert models (65536)")
text_case("optimus-non-utf8-byte", OP, "run.log", optimus, lambda d: d.replace(b"> GAS:", NON_UTF8 + b"> GAS:", 1),
          "{f}:11:1: not UTF-8 text (byte 0xff)")


# ------------------------------------------------------------------------------------ chakra

CH = "chakra"
ET0 = "workload.0.et"


def chakra_case(id: str, edit: Callable[[bytes], tuple[bytes, str]]):
    """Rank 0 of samples/chakra_data broken by `edit(bytes) -> (bytes, message about {f})`."""

    def make():
        files = dict(chakra_set())
        data, message = edit(files[ET0])
        files[ET0] = data
        return files, message.replace("{f}", "{in}/" + ET0)

    CASES.append(Case(id, CH, make))


chakra_case("chakra-empty", lambda d: (b"", "{f}: file is empty (expected a GlobalMetadata message)"))
chakra_case("chakra-text-given", lambda d: (sample(SIMAI)[:4000],
            "{f}: byte 0: cannot decode GlobalMetadata message: the protobuf wire format is corrupt; "
            "the file looks like text, not a Chakra trace"))
chakra_case("chakra-binary-garbage", lambda d: (m.garbage(), "{f}: byte 0: truncated GlobalMetadata message (wanted 163711 bytes, 4093 left)"))


def _cut(d: bytes, index: int) -> tuple[bytes, str]:
    data, offset, length, left = m.cut_mid_message(d, index)
    what = "GlobalMetadata" if index == 0 else "Node"
    return data, f"{{f}}: byte {offset}: truncated {what} message (wanted {length} bytes, {left} left)"


chakra_case("chakra-cut-mid-metadata", lambda d: _cut(d, 0))
chakra_case("chakra-cut-mid-node", lambda d: _cut(d, 5))
chakra_case("chakra-cut-in-a-length-prefix", lambda d: (d + b"\x80", f"{{f}}: byte {len(d)}: truncated length prefix at end of file"))


def _bad_varint(d: bytes) -> tuple[bytes, str]:
    data, offset = m.bad_varint(d, 3)
    return data, f"{{f}}: byte {offset}: length prefix is not a varint (more than 10 bytes)"


def _oversized(d: bytes) -> tuple[bytes, str]:
    data, offset, left = m.oversized_frame(d, 3)
    return data, f"{{f}}: byte {offset}: truncated Node message (wanted {1 << 62} bytes, {left} left)"


def _bad_body(d: bytes) -> tuple[bytes, str]:
    data, offset = m.bad_node_body(d, 2)
    return data, f"{{f}}: byte {offset}: cannot decode Node message: the protobuf wire format is corrupt"


def _bad_type(d: bytes) -> tuple[bytes, str]:
    data, offset = m.replace_node(d, 2, lambda n: setattr(n, "type", 99))
    return data, f"{{f}}: byte {offset}: node 1 'COMP_NODE_attention_FWD' has type 99; expected 1-7 (METADATA_NODE..COMM_COLL_NODE)"


chakra_case("chakra-bad-varint", _bad_varint)
chakra_case("chakra-oversized-message", _oversized)
chakra_case("chakra-corrupt-node", _bad_body)
chakra_case("chakra-unknown-node-type", _bad_type)
chakra_case("chakra-broken-gzip", lambda d: (b"\x1f\x8b" + d[:50], "{f}: broken gzip data: Unknown compression method"))


def _cut_gzip(d: bytes) -> tuple[bytes, str]:
    data = gzip.compress(d)[:-20]
    return data, f"{{f}}: byte {len(data)}: gzip data cut off (the file is truncated)"


chakra_case("chakra-cut-gzip", _cut_gzip)


def _comm_group_not_json():
    return ({**chakra_set(), "workload.comm_group.json": b'{"1": [0, 1'},
            "{in}/workload.comm_group.json:1:12: not valid JSON (unexpected end of data)")


CASES.append(Case("chakra-comm-group-not-json", CH, _comm_group_not_json))


@case("chakra-comm-group-wrong-types", CH)
def _():
    return ({**chakra_set(), "workload.comm_group.json": b'{"1": "0,1"}'},
            "{in}/workload.comm_group.json: group 1: expected a list of ranks, found '0,1'")


@case("chakra-file-without-rank", CH)
def _():
    files = dict(chakra_set())
    files["extra.et"] = files[ET0]
    return files, "{in}/extra.et: cannot tell the rank: expected a name like <prefix>.<rank>.et"


# ------------------------------------------------------------------------------------ et-json

EJ = "et-json"


def json_case(id: str, edit: Callable[[bytes], bytes], message: str):
    text_case(id, EJ, "dump.json", et_json_dump, edit, message)


json_case("et-json-empty", lambda d: b"",
          "{f}:1:1: not valid JSON (Input is a zero-length, empty document)")


def _cut_json():
    data = et_json_dump()
    cut = data[: len(data) // 2]
    return {"dump.json": cut}, f"{{in}}/dump.json:1:{len(cut) + 1}: not valid JSON (unexpected end of data)"


CASES.append(Case("et-json-cut-mid-document", EJ, _cut_json))



json_case("et-json-binary-garbage", lambda d: m.garbage(),
          "{f}:1:1: not valid JSON (str is not valid UTF-8: surrogates not allowed)")
json_case("et-json-not-an-object", lambda d: b"[1, 2]", "{f}: $: expected a JSON object, found a list")
json_case("et-json-wrong-format", lambda d: m.json_edit(d, ["format"], "chrome"),
          "{f}: $.format: expected 'et-convert.et-json', found 'chrome'")
json_case("et-json-wrong-version", lambda d: m.json_edit(d, ["version"], 2),
          "{f}: $.version: this et-convert reads version 1, found 2")
json_case("et-json-ranks-not-an-object", lambda d: m.json_edit(d, ["ranks"], [1]),
          "{f}: $.ranks: expected an object of ranks, found a list")
json_case("et-json-node-id-a-word", lambda d: m.json_edit(d, ["ranks", "0", "nodes", 1, "id"], "one"),
          "{f}: $.ranks.0.nodes[1].id: expected an integer (or its decimal string), found string 'one'")
json_case("et-json-node-id-too-big", lambda d: m.json_edit(d, ["ranks", "0", "nodes", 1, "id"], str(1 << 64)),
          f"{{f}}: $.ranks.0.nodes[1].id: {1 << 64} is out of range [0, {(1 << 64) - 1}]")
json_case("et-json-unknown-node-type", lambda d: m.json_edit(d, ["ranks", "0", "nodes", 1, "type"], "GPU_NODE"),
          "{f}: $.ranks.0.nodes[1].type: unknown node type 'GPU_NODE'; expected one of INVALID_NODE, METADATA_NODE, "
          "MEM_LOAD_NODE, MEM_STORE_NODE, COMP_NODE, COMM_SEND_NODE, COMM_RECV_NODE, COMM_COLL_NODE")
json_case("et-json-deps-not-a-list", lambda d: m.json_edit(d, ["ranks", "0", "nodes", 1, "data_deps"], "0"),
          "{f}: $.ranks.0.nodes[1].data_deps: expected a list, found string '0'")
json_case("et-json-nan-duration", lambda d: m.json_edit(d, ["ranks", "0", "nodes", 1, "duration_micros"], "nan"),
          "{f}: $.ranks.0.nodes[1].duration_micros: expected an integer (or its decimal string), found string 'nan'")


# ------------------------------------------------------------------------------------ the tests


@pytest.mark.parametrize("c", [
    pytest.param(c, id=c.id, marks=[pytest.mark.xfail(strict=True, reason=c.xfail)] if c.xfail else [])
    for c in CASES
])
def test_malformed_input_is_one_clear_error(c: Case, tmp_path):
    _, message = c.make()
    result, out = run_case(c, tmp_path)
    expected = "et-convert: error: " + message.replace("{in}", str(tmp_path / "in"))
    assert result.code == 2, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("et-convert: error:")]
    assert errors == [expected]
    assert result.stderr.endswith(expected + "\n")
    assert not out.exists() or not any(out.iterdir()), "an output appeared"


def test_in_process_runs_match_a_real_process(tmp_path):
    """The corpus runs the CLI in this process; a real `et-convert` process prints the same."""
    for c in [c for c in CASES if c.id in ("simai-absurd-size", "chakra-cut-mid-node", "megatron-nan-timestamp")]:
        here, _ = run_case(c, tmp_path / c.id / "here")
        files, _ = c.make()
        inputs = [tmp_path / c.id / "here" / "in" / name for name in sorted(files)]
        real = run_cli(*inputs, "--from", c.fmt, *c.args, "-o", tmp_path / c.id / "real.json")
        assert (real.code, real.stderr) == (here.code, here.stderr)


def test_debug_shows_the_traceback(tmp_path):
    path = tmp_path / "w.txt"
    path.write_bytes(m.set_cell(sample(SIMAI), 10, 2, b"fast"))
    result = run_cli_here(path, "--debug", "-o", tmp_path / "o.json")
    assert result.code == 2
    assert "Traceback (most recent call last):" in result.stderr
    assert result.stderr.endswith(f"et-convert: error: {path}:10: fwd_compute: expected a whole number >= 0, found 'fast'\n")


def test_unsure_detection_lists_what_it_tried(tmp_path):
    path = tmp_path / "notes.md"
    path.write_text("# notes\nnothing to convert here\n")
    result = run_cli_here(path, "-o", tmp_path / "o.json")
    assert (result.code, result.stderr) == (2, (
        f"et-convert: error: cannot tell the format of {path}; tried simai, astra-text, neusight, megatron-log, "
        "optimus-log, chakra, et-json, kineto; use --from\n"))


def test_text_given_to_the_chakra_reader_without_a_rank_in_its_name(tmp_path):
    path = tmp_path / "workload.txt"
    path.write_bytes(sample(SIMAI))
    result = run_cli_here(path, "--from", "chakra", "-o", tmp_path / "o.json")
    assert (result.code, result.stderr) == (2, (
        f"et-convert: error: {path}: byte 0: cannot decode GlobalMetadata message: the protobuf wire format is "
        "corrupt; the file looks like text, not a Chakra trace\n"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["workload.txt"]


# ------------------------------------------------------------------------------------ known generator defects


def test_simai_sample_defects_are_converted_with_one_warning_per_kind(tmp_path):
    path = SAMPLES / SIMAI
    result = run_cli_here(path, "--ranks", "0-7", "-o", tmp_path / "o.json")
    assert result.code == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("et-convert: warning:")]
    assert warnings == [
        f"et-convert: warning: {path}: skipped 274 collectives of size 0 (1 ALLGATHER_DP_EP in the wg column of "
        "moe_grad_norm1; 1 REDUCESCATTER_DP_EP in the wg column of moe_grad_norm2; 272 REDUCESCATTER in the ig "
        "column of attention_column, mlp_column, final_column; first at line 7)",
        f"et-convert: warning: {path}: 33 compute times are the placeholder 1 ns (not measured); left them out "
        "(first at line 3)",
        f"et-convert: warning: {path}: 15 microbatch blocks give embedding_layer another wg_compute than the first "
        "block (2864860 vs 1879040 at line 9); used each block's own value (first at line 43)",
        # assumptions that change numbers are said once even without -v
        f"et-convert: warning: {path}: assumed: ALL_GATHER sizes are the per-rank input, as ASTRA-sim reads "
        "them: the input's total gathered bytes divided by the group size.",
        f"et-convert: warning: {path}:1: assumed: Activations and gradients between stages are 16777216 bytes per "
        "microbatch: the block's TP collectives move the whole activation (2*mbs*seq*hidden = 134217728 bytes), "
        "and under sequence parallelism (ALLGATHER/REDUCESCATTER in the forward) each rank holds 1/8 of it.",
    ]
    assert (tmp_path / "o.json").stat().st_size > 0


def test_quiet_silences_the_warnings_but_not_errors(tmp_path):
    result = run_cli_here(SAMPLES / SIMAI, "--ranks", "0-7", "-q", "-o", tmp_path / "o.json")
    assert (result.code, result.stderr) == (0, "")
    bad = tmp_path / "w.txt"
    bad.write_bytes(m.set_line(sample(SIMAI), 2, b"558"))
    result = run_cli_here(bad, "-q", "-o", tmp_path / "p.json")
    assert (result.code, result.stderr) == (2, f"et-convert: error: {bad}:559: the file ends after 557 of the 558 rows line 2 announces (truncated?)\n")


def test_more_rows_than_announced_convert_the_announced_ones_with_a_warning(tmp_path):
    """The simulators read as many rows as line 2 announces; the rest is warned about, not an error."""
    path = tmp_path / "w.txt"
    path.write_bytes(m.set_line(sample(SIMAI), 2, b"556"))
    result = run_cli_here(path, "--ranks", "0-7", "-o", tmp_path / "o.json")
    assert result.code == 0, result.stderr
    assert result.stderr.splitlines()[0] == (  # the first of the warnings, in the order they arose
        f"et-convert: warning: {path}:559: line 2 announces 556 rows, found 557; converted the first 556 and "
        "ignored the rest, as the simulators do")
    assert (tmp_path / "o.json").stat().st_size > 0


# ------------------------------------------------------------------------------------ cut-off logs


def test_megatron_last_line_cut_mid_character_is_a_cut_line(tmp_path):
    log = tmp_path / "rank4.log"
    text = sample(MEGATRON).replace(b"description=None,group_kind=None,input__shape=None,input__dtype=None,timestamp=4509235587",
                                    "description=Ünïcode,group_kind=None,input__shape=None,input__dtype=None,"
                                    "timestamp=4509235587".encode())
    last = text.rstrip(b"\n").rsplit(b"\n", 1)[1]
    log.write_bytes(text[: text.index(last) + last.index("Ü".encode()) + 1])  # half of a two-byte character
    result = run_cli_here(log, "--tp", "2", "-o", tmp_path / "o.json")
    assert result.code == 0, result.stderr
    assert result.stderr == f"et-convert: warning: {log}:8: last line is cut off; converted the 7 complete lines before it\n"
    result = run_cli_here(log, "--strict", "-o", tmp_path / "p.json")
    assert (result.code, result.stderr) == (2, f"et-convert: error: {log}:8: last line is cut off (no closing ')'); "
                                               "the run may have crashed while writing it\n")
    assert not (tmp_path / "p.json").exists()


def test_optimus_cut_off_last_line_warns_and_strict_fails(tmp_path):
    data = sample(OPTIMUS)
    log = tmp_path / "run.log"
    log.write_bytes(data[: data.rindex(b"ms/batch") + len(b"ms/batch 12")])
    number = log.read_bytes().count(b"\n") + 1
    result = run_cli_here(log, "-o", tmp_path / "o.json")
    assert result.code == 0, result.stderr
    assert (f"et-convert: warning: {log}:{number}: last line is cut off; converted the {number - 1} complete lines "
            "before it") in result.stderr.splitlines()
    result = run_cli_here(log, "--strict", "-o", tmp_path / "p.json")
    assert (result.code, result.stderr) == (2, f"et-convert: error: {log}:{number}: last line is cut off (no newline "
                                               "at its end); the run may have crashed while writing it\n")
    assert not (tmp_path / "p.json").exists()


def test_optimus_cut_line_does_not_count_as_a_measurement(tmp_path):
    """`ms/batch 12` of a cut `ms/batch 1234.56` must not become a measured 12 ms."""
    from converters.diagnostics import Diagnostics
    from converters.readers.optimus_log import read_log

    data = sample(OPTIMUS)
    log = tmp_path / "run.log"
    log.write_bytes(data[: data.rindex(b"ms/batch") + len(b"ms/batch 12")])
    whole = read_log(SAMPLES / OPTIMUS, Diagnostics())
    cut = read_log(log, Diagnostics())
    last = max(whole.ms_per_batch)
    assert last not in cut.ms_per_batch
    assert {b: v[0] for b, v in cut.ms_per_batch.items()} == {b: v[0] for b, v in whole.ms_per_batch.items() if b != last}
