"""Options are checked before any work starts, whatever the output: a bad --network file fails
a Chakra conversion (which needs no schedule) as it fails a timeline, before the input is read."""

from __future__ import annotations

import pytest

import converters as etc
from conftest import SAMPLES
from converters.diagnostics import InputError, UsageError
from test_malformed import run_cli_here

LOG = SAMPLES / "megatron_rank4_pp_tp2.log"


def network_file(tmp_path, text: str):
    path = tmp_path / "net.toml"
    path.write_text(text)
    return path


def convert_to_chakra(tmp_path, *args):
    result = run_cli_here(LOG, "--to", "chakra", "-o", tmp_path / "out" / "w", *args)
    assert not (tmp_path / "out").exists(), "nothing may be written when an option is bad"
    return result


def test_a_network_file_that_is_not_toml_fails_a_chakra_conversion(tmp_path):
    net = network_file(tmp_path, "[default]\nbandwidth_gbps = 50\nlatency_ns = = 3\n")
    result = convert_to_chakra(tmp_path, "--network", net)
    assert result.code == 2
    assert result.stderr.startswith(f"et-convert: error: {net}:3: not valid TOML")
    assert len(result.stderr.splitlines()) == 1


def test_a_network_file_naming_an_unknown_key_fails_a_chakra_conversion(tmp_path):
    net = network_file(tmp_path, "[default]\nbandwidth_gbps = 50\n\n[tp]\nbandwith_gbps = 200\n")
    result = convert_to_chakra(tmp_path, "--network", net)
    assert result.code == 2
    assert result.stderr.startswith(f"et-convert: error: {net}:5: [tp] unknown key 'bandwith_gbps'")


def test_a_missing_network_file_fails_before_the_input_is_read(tmp_path):
    result = run_cli_here(tmp_path / "no-such-input.log", "--to", "chakra", "-o", tmp_path / "w",
                          "--network", tmp_path / "none.toml")
    assert (result.code, result.stderr) == (
        2, f"et-convert: error: {tmp_path / 'none.toml'}: cannot read network file: No such file or directory\n")


@pytest.mark.parametrize("args, message", [
    (("--net", "bandwith_gbps=5"), "network option bandwith_gbps: unknown key 'bandwith_gbps'"),
    (("--ranks", "0-x"), "--ranks 0-x: cannot read '0-x'; expected e.g. 0-15,1008 or all"),
    (("--passes", "0"), "--passes must be at least 1, got 0"),
    (("--jobs", "0"), "--jobs must be at least 1, got 0"),
    (("--memory", "12Q"), "--memory: expected a size such as 400M or 2G, found '12Q'"),
    (("--memory", "0"), "--memory must be at least 1 byte, got '0'"),
    (("--tp", "0"), "--tp must be at least 1, got 0"),
    (("--tick-ns", "nan"), "--tick-ns must be above 0, got nan"),
    (("--bwd-factor", "0"), "--bwd-factor must be above 0, got 0.0"),
    (("--p2p-bytes", "-1"), "--p2p-bytes must be above 0, got -1"),
    (("--mode", "layers"), "unknown --mode 'layers'; expected stage or simai"),
    (("--schedule", "zb"), "unknown --schedule 'zb'; expected 1f1b or gpipe"),
])
def test_every_option_value_is_checked_whatever_the_output(tmp_path, args, message):
    result = convert_to_chakra(tmp_path, *args)
    assert result.code == 2
    assert result.stderr.splitlines()[-1].startswith(f"et-convert: error: {message}"), result.stderr


def test_validate_and_stats_check_the_network_file_too(tmp_path):
    net = network_file(tmp_path, "[default]\nchunk = 2\n")
    for command in ("validate", "stats"):
        result = run_cli_here(command, LOG, "--network", net)
        assert result.code == 2, command
        assert result.stderr.startswith(f"et-convert: error: {net}:2: [default] unknown key 'chunk'"), result.stderr


def test_a_bad_groups_file_fails_validate_before_the_input_is_read(tmp_path):
    groups = tmp_path / "comm_group.json"
    groups.write_text("{not json")
    result = run_cli_here("validate", tmp_path / "no-such-input.et", "--groups", groups)
    assert result.code == 2
    assert result.stderr.startswith(f"et-convert: error: {groups}"), result.stderr


def test_the_library_checks_options_before_reading(tmp_path):
    net = network_file(tmp_path, "[default\n")
    with pytest.raises(InputError, match="not valid TOML"):
        etc.read(tmp_path / "no-such-input.log", network=net)
    with pytest.raises(UsageError, match="--passes must be at least 1"):
        etc.convert(LOG, tmp_path / "w", to="chakra", passes=0)
    with pytest.raises(UsageError, match="--memory: expected a size such as 400M or 2G, found '4 GB please'"):
        etc.convert(LOG, tmp_path / "w", to="chakra", memory="4 GB please")
    with pytest.raises(UsageError, match="--memory must be at least 1 byte, got 0"):
        etc.convert(LOG, tmp_path / "w", to="chakra", memory=0)
    assert not (tmp_path / "w.0.et").exists()


def test_memory_is_bytes_or_a_size_as_users_write_it():
    from converters.options import Options, check, memory_bytes

    assert memory_bytes(Options()) is None
    assert memory_bytes(Options(memory=123_456)) == 123_456
    assert memory_bytes(Options(memory="1.5G")) == 3 << 29
    assert memory_bytes(Options(memory=4e8)) == 400_000_000  # whole bytes, so worker counts stay ints
    for value in ([1 << 30], float("nan"), float("inf")):  # not a size: one line, no traceback
        with pytest.raises(UsageError, match="--memory: expected bytes or a size such as 400M or 2G, found"):
            check(Options(memory=value))
