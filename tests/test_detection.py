"""Auto-detection (no --from) must not hide a reader's precise error behind "cannot tell the format".

A broken workload table, a cut-off Chakra file or a set's directory with a README in it is still
recognisably what it is: detection picks the format and the reader names the bad line or byte,
exactly as with --from.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import malformed as m
from conftest import SAMPLES
from converters.formats import expand_inputs
from test_malformed import run_cli_here

SIMAI = SAMPLES / "simai_tp8_pp16_1024gpu.txt"
ASTRA = SAMPLES / "workloads" / "astra_transformer.txt"
MEGATRON = SAMPLES / "megatron_rank4_pp_tp2.log"
CHAKRA_RANK0 = SAMPLES / "chakra_model" / "workload.0.et"
POLICY_LIST = ("MICRO, DATA, MODEL, HYBRID_DATA_MODEL, HYBRID_MODEL_DATA, HYBRID_TRANSFORMER, "
               "HYBRID_TRANSFORMER_FWD_IN_BCKWD, HYBRID_DLRM, HYBRID_DLRM_ENHANCED, HYBRID_CUSTOMIZED, "
               "DISTRIBUTED_INFERENCE")


def converted(path: Path, *args: str):
    """`et-convert PATH ARGS -o <beside it>` with auto-detection; the output must not appear on failure."""
    out = path.parent / "out.json"
    result = run_cli_here(path, *args, "-o", out)
    if result.code != 0:
        assert not out.exists()
    return result


def auto_and_given_agree(path: Path, fmt: str, expected: str, *args: str) -> None:
    """The same one-line error, exit 2, with auto-detection and with --from FMT."""
    for extra in ((), ("--from", fmt)):
        result = converted(path, *extra, *args)
        assert (result.code, result.stderr) == (2, f"et-convert: error: {path}{expected}\n"), extra


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


# ------------------------------------------------------------------------------------ workload tables


def test_simai_with_a_non_utf8_byte_far_down_is_reported_at_its_line(tmp_path):
    path = write(tmp_path, "w.txt", m.set_line(SIMAI.read_bytes(), 10, lambda line: line[:4] + b"\xff" + line[4:]))
    auto_and_given_agree(path, "simai", ":10:5: not UTF-8 text (byte 0xff)")


def test_astra_text_with_a_non_utf8_byte_is_reported_at_its_line(tmp_path):
    path = write(tmp_path, "w.txt", m.set_line(ASTRA.read_bytes(), 4, lambda line: line + b"\xfe"))
    line4 = m.line_of(ASTRA.read_bytes(), 4).decode()
    auto_and_given_agree(path, "astra-text", f":4:{len(line4) + 1}: not UTF-8 text (byte 0xfe)", "--num-npus", "8")


def test_a_non_utf8_byte_in_the_policy_word_is_reported_at_it(tmp_path):
    path = write(tmp_path, "w.txt", b"\xff" + ASTRA.read_bytes())
    auto_and_given_agree(path, "astra-text", ":1:1: not UTF-8 text (byte 0xff)", "--num-npus", "8")


def test_a_misspelled_simai_policy_is_reported_at_line_1(tmp_path):
    path = write(tmp_path, "w.txt", SIMAI.read_bytes().replace(b"HYBRID_TRANSFORMER_FWD_IN_BCKWD", b"HYBRID_TRANSFORMR", 1))
    auto_and_given_agree(path, "simai", f":1: unknown policy 'HYBRID_TRANSFORMR'; expected one of {POLICY_LIST}")


def test_a_misspelled_astra_policy_is_reported_at_line_1(tmp_path):
    path = write(tmp_path, "w.txt", ASTRA.read_bytes().replace(b"HYBRID_TRANSFORMER", b"HYBRID_TRANSFORMR", 1))
    auto_and_given_agree(path, "astra-text", f":1: unknown policy 'HYBRID_TRANSFORMR'; expected one of {POLICY_LIST}",
                         "--num-npus", "8")


def test_a_missing_simai_policy_is_reported_at_line_1(tmp_path):
    path = write(tmp_path, "w.txt", SIMAI.read_bytes().replace(b"HYBRID_TRANSFORMER_FWD_IN_BCKWD ", b"", 1))
    auto_and_given_agree(path, "simai",
                         f":1: unknown policy 'model_parallel_NPU_group:'; expected one of {POLICY_LIST}")


def test_a_row_count_with_words_is_reported_at_line_2(tmp_path):
    path = write(tmp_path, "w.txt", m.set_line(SIMAI.read_bytes(), 2, b"557 rows"))
    auto_and_given_agree(path, "simai", ":2: expected the row count (one whole number), found '557 rows'")


def test_text_that_only_resembles_a_header_is_not_claimed(tmp_path):
    for text in (b"FOO\n3\n", b"DATA\nthree things to say\n", b"pp: 2\nnotes\n"):
        path = write(tmp_path, "notes.txt", text)
        result = converted(path)
        assert (result.code, result.stderr) == (2, (
            f"et-convert: error: cannot tell the format of {path}; tried simai, astra-text, neusight, megatron-log, "
            "optimus-log, chakra, et-json, kineto; use --from\n")), text


# ------------------------------------------------------------------------------------ Chakra files and sets


@pytest.mark.parametrize("name, size", [("w.0.et", 200), ("w.0.et", 37), ("cut.et", 200)])
def test_a_cut_off_chakra_file_is_read_as_chakra(tmp_path, name, size):
    path = write(tmp_path, name, CHAKRA_RANK0.read_bytes()[:size])
    auto_and_given_agree(path, "chakra", f": byte 0: truncated GlobalMetadata message (wanted 316 bytes, {size - 2} left)")


def test_a_cut_off_gzipped_chakra_file_is_read_as_chakra(tmp_path):
    import gzip

    path = write(tmp_path, "w.0.et.gz", gzip.compress(CHAKRA_RANK0.read_bytes()[:200], mtime=0))
    auto_and_given_agree(path, "chakra", ": byte 0: truncated GlobalMetadata message (wanted 316 bytes, 198 left)")


def test_a_workload_table_named_et_is_still_a_workload_table(tmp_path):
    path = write(tmp_path, "w.0.et", m.set_line(SIMAI.read_bytes(), 2, b"557 rows"))
    auto_and_given_agree(path, "simai", ":2: expected the row count (one whole number), found '557 rows'")


def test_a_chakra_directory_with_stray_files_reads_only_the_set(tmp_path):
    directory = tmp_path / "set"
    directory.mkdir()
    for p in (SAMPLES / "chakra_data").iterdir():
        (directory / p.name).write_bytes(p.read_bytes())
    (directory / "README.txt").write_text("how this set was made\n")
    (directory / "zz_notes.txt").write_text("notes\n")
    assert [p.name for p in expand_inputs([directory])] == [f"workload.{r}.et" for r in range(4)]
    result = run_cli_here(directory, "-q", "-o", tmp_path / "o.json")
    assert (result.code, result.stderr) == (0, "")
    result = run_cli_here("validate", directory)
    assert result.code == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1].startswith("validate: 0 errors, 0 warnings · 4 ranks")


def test_a_directory_without_et_files_gives_every_file(tmp_path):
    (tmp_path / "b.log").write_text("x\n")
    (tmp_path / "a.txt").write_text("x\n")
    (tmp_path / "w.comm_group.json").write_text("{}\n")
    assert [p.name for p in expand_inputs([tmp_path])] == ["a.txt", "b.log"]


# ------------------------------------------------------------------------------------ ambiguity


def test_input_two_formats_claim_is_one_line_naming_both(tmp_path):
    optimus_line = next(line for line in (SAMPLES / "optimusprime_llama1b_pp8.log").read_text().splitlines()
                        if line.startswith("stage2rank = {"))
    path = write(tmp_path, "rank4.log", MEGATRON.read_bytes() + optimus_line.encode() + b"\n")
    result = converted(path)
    assert (result.code, result.stderr) == (
        2, f"et-convert: error: {path} could be megatron-log or optimus-log; use --from\n")
