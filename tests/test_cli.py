"""The CLI contract: version, help with examples, the plain form beside subcommands, errors."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from conftest import run_cli

import converters


def test_version_prints_package_version():
    result = run_cli("--version")
    assert result.code == 0
    assert result.stdout.strip() == f"et-convert {converters.__version__}"


def test_help_names_every_command_and_shows_examples():
    result = run_cli("--help")
    assert result.code == 0
    for word in ("convert", "validate", "stats", "et-convert samples/simai_tp8_pp16_1024gpu.txt -o out.json"):
        assert word in result.stdout


def test_each_command_help_ends_with_examples():
    for command in ("convert", "validate", "stats", "simulate", "report"):
        result = run_cli(command, "--help")
        assert result.code == 0, result.stderr
        assert "Examples:" in result.stdout
        assert "samples/" in result.stdout


def test_missing_input_is_one_line_error_with_exit_2(tmp_path):
    out = tmp_path / "out.json"
    result = run_cli(tmp_path / "nope.txt", "-o", out)
    assert result.code == 2
    assert result.stderr.strip() == f"et-convert: error: {tmp_path / 'nope.txt'}: no such file or directory"
    assert "Traceback" not in result.stderr
    assert not out.exists()


def test_unknown_content_names_formats_tried_and_asks_for_from(tmp_path):
    notes = tmp_path / "notes.md"
    notes.write_text("# just some notes\nnothing to convert here\n")
    result = run_cli(notes, "-o", tmp_path / "out.json")
    assert result.code == 2
    assert result.stderr.strip() == (
        f"et-convert: error: cannot tell the format of {notes}; tried simai, astra-text, neusight, "
        "megatron-log, optimus-log, chakra, et-json, kineto; use --from"
    )
    assert not (tmp_path / "out.json").exists()


def test_empty_file_is_reported(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    result = run_cli(empty, "-o", tmp_path / "out.json")
    assert result.code == 2
    assert result.stderr.strip() == f"et-convert: error: {empty}: file is empty"


def test_output_without_known_suffix_asks_for_to(samples, tmp_path):
    result = run_cli(samples / "neusight_gpt2_block.tsv", "-o", tmp_path / "trace.bin")
    assert result.code == 2
    assert "cannot tell the output format from 'trace.bin'" in result.stderr
    assert "--to" in result.stderr


def test_unknown_from_format_is_rejected(samples, tmp_path):
    result = run_cli(samples / "neusight_gpt2_block.tsv", "--from", "csv", "-o", tmp_path / "o.json")
    assert result.code == 2
    assert "unknown input format 'csv'" in result.stderr


# ---------------------------------------------------------------- what a conversion says on stderr

CHAKRA_DATA_ITERATION = (
    "et-convert: iteration 46.076 ms (scheduled; slowest rank 0: compute 45.80 ms, exposed comm 0.28 ms, "
    "idle 0.00 ms); et-convert stats for more"
)


def test_convert_prints_the_scheduled_iteration_in_one_line(samples, tmp_path):
    result = run_cli(samples / "chakra_data", "-o", tmp_path / "cd.json")
    assert result.code == 0, result.stderr
    assert result.stderr.splitlines() == [CHAKRA_DATA_ITERATION]
    # the same numbers `et-convert stats` prints
    stats = orjson.loads(run_cli("stats", samples / "chakra_data", "--json").stdout)
    assert stats["iteration_time_ns"] == 46_076_231
    assert stats["ranks"]["0"]["exposed_comm_ns"] == 276_231


def test_pftrace_output_prints_the_same_iteration_line(samples, tmp_path):
    result = run_cli(samples / "chakra_data", "-o", tmp_path / "cd.pftrace")
    assert result.code == 0, result.stderr
    assert result.stderr.splitlines() == [CHAKRA_DATA_ITERATION]


def test_quiet_silences_the_iteration_line(samples, tmp_path):
    result = run_cli(samples / "chakra_data", "-o", tmp_path / "cd.json", "-q")
    assert (result.code, result.stderr) == (0, "")
    assert (tmp_path / "cd.json").exists()


def test_measured_log_prints_no_iteration_line(samples, tmp_path):
    result = run_cli(samples / "megatron_rank4_pp_tp2.log", "-o", tmp_path / "m.json")
    assert result.code == 0, result.stderr
    assert "iteration" not in result.stderr


def test_chakra_output_prints_no_iteration_line(samples, tmp_path):
    result = run_cli(samples / "chakra_data", "--to", "chakra", "-o", tmp_path / "w")
    assert (result.code, result.stderr) == (0, "")


def test_verbose_lists_every_assumption_once(samples, tmp_path):
    out = tmp_path / "n.json"
    result = run_cli(samples / "neusight_gpt2_block.tsv", "-o", out, "-v")
    assert result.code == 0, result.stderr
    assumptions = orjson.loads(out.read_bytes())["metadata"]["assumptions"]
    assert len(assumptions) == 6
    listed = [line for line in result.stderr.splitlines() if line.startswith("et-convert: assumed: ")]
    assert listed == [f"et-convert: assumed: {sentence}" for sentence in assumptions]
    assert "et-convert: assumed: Comm sizes are element counts of 4 bytes (--bytes-per-element)." in listed


def test_assumptions_are_not_listed_without_verbose(samples, tmp_path):
    result = run_cli(samples / "neusight_gpt2_block.tsv", "-o", tmp_path / "n.json")
    assert result.code == 0, result.stderr
    assert "assumed:" not in result.stderr


def test_net_accepts_size_tables(samples, tmp_path):
    out = tmp_path / "cd.json"
    result = run_cli(samples / "chakra_data", "-o", out, "-q", "--net", "size.4.chunks=2", "--net", "size.4.latency_ns=700")
    assert result.code == 0, result.stderr
    network = orjson.loads(out.read_bytes())["metadata"]["network"]
    assert network["size"] == {"4": {"chunks": 2, "latency_ns": 700.0}}
    assert network["source"] == "built-in defaults + command line"
    # 700 ns instead of 5 µs per step: the all-reduces of the 4 ranks take less time
    assert orjson.loads(out.read_bytes())["metadata"]["summary"]["iteration_time_ns"] < 46_076_231


def test_net_rejects_a_bad_size_table(samples, tmp_path):
    out = tmp_path / "cd.json"
    result = run_cli(samples / "chakra_data", "-o", out, "--net", "size.x.chunks=2")
    assert (result.code, result.stderr) == (
        2, "et-convert: error: network option size.x.chunks: expected size.N.KEY, N a member count of at least 1\n")
    assert not out.exists()


def test_an_output_over_an_input_is_refused_before_anything_is_written(tmp_path):
    import shutil

    from conftest import SAMPLES

    chakra_set = tmp_path / "set"
    shutil.copytree(SAMPLES / "chakra_data", chakra_set)
    before = {p.name: p.read_bytes() for p in chakra_set.iterdir()}
    target = chakra_set / "workload.0.et"
    result = run_cli(chakra_set, "--to", "et-json", "-o", target)
    assert result.code == 2
    assert result.stderr.strip() == (
        f"et-convert: error: {target}: cannot write over the input {target}; choose another output name"
    )
    assert {p.name: p.read_bytes() for p in chakra_set.iterdir()} == before


def test_library_validate_stays_the_function_after_the_validate_package_is_used():
    from conftest import SAMPLES

    trace = converters.read(SAMPLES / "chakra_data")
    assert converters.validate(trace) == []
    assert converters.validate(trace) == []  # the package import inside must not rebind the name


def help_examples() -> list[tuple[str, list[str]]]:
    """(where, [example command lines]) of the main help and each command's help, in order."""
    import re

    from converters.cli import app

    texts = [("et-convert --help", app.info.help)]
    texts += [(f"et-convert {c.name} --help", c.help) for c in app.registered_commands]
    return [(where, re.findall(r"^\s+et-convert (.+)$", text, re.MULTILINE)) for where, text in texts]


@pytest.mark.parametrize("where, examples", help_examples(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_help_example_works_on_the_samples(where, examples, tmp_path, monkeypatch):
    """STYLE.md: each help ends with examples that work on samples/; run them as a user would,
    in order (later ones may read what earlier ones wrote), globs expanded as a shell does."""
    import glob
    import shlex

    from conftest import SAMPLES

    (tmp_path / "samples").symlink_to(SAMPLES)
    # `simulate` needs ASTRA-sim: its examples name it in ASTRA_SIM; here a stand-in replays a real run
    monkeypatch.setenv("ASTRA_SIM", str(Path(__file__).parent / "astra_sim" / "standin.py"))
    monkeypatch.setenv("ASTRA_STANDIN_CASE", "legacy_chakra_data_finished")
    assert len(examples) >= 2, where
    for line in examples:
        args = []
        for word in shlex.split(line):
            matches = sorted(glob.glob(str(tmp_path / word))) if any(c in word for c in "*?[") else []
            args += [Path(m).relative_to(tmp_path) for m in matches] or [word]
        result = run_cli(*args, cwd=tmp_path)
        assert result.code == 0, f"{where}: et-convert {line}: {result.stderr}"
