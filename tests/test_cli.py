"""The CLI contract: version, help with examples, the plain form beside subcommands, errors."""

from __future__ import annotations

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
    for command in ("convert", "validate", "stats"):
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
        "megatron-log, optimus-log, chakra, et-json; use --from"
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
