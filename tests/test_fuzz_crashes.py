"""Every input a fuzzer (`make fuzz`) crashed or hung on, kept in tests/fuzz_crashes/ as it was
found, and the clear error it must now give: exit 2, one line naming the file and the place."""

from __future__ import annotations

import pytest

from conftest import ROOT
from test_malformed import run_cli_here

CRASHES = ROOT / "tests" / "fuzz_crashes"

# file -> (format, the message after "et-convert: error: <file>: "); found on the date given.
EXPECTED = {
    # 2026-11-24, et-json, 244 s: a group key that is not a number ("2+") reached int() before
    # it was checked (Python evaluates `groups[check(key)] = group(key)` right side first).
    "et-json-group-key-not-a-number.json": (
        "et-json", "$.groups.2+: expected an integer (or its decimal string), found string '2+'"),
    # 2026-11-24, et-json, 153 s: a layout attribute of 0 in a rank's GlobalMetadata
    # (parallel.cp) was taken as it was, and dividing the world by tp · cp · pp failed.
    "et-json-parallel-cp-zero.json": (
        "et-json", "$.ranks.4.metadata.attr[6]: parallel.cp is 0; expected at least 1"),
}


def test_every_kept_crash_has_an_expected_error():
    assert sorted(p.name for p in CRASHES.iterdir()) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_crash_found_by_fuzzing_is_now_a_clear_error(name, tmp_path):
    fmt, message = EXPECTED[name]
    path = CRASHES / name
    result = run_cli_here(path, "--from", fmt, "-o", tmp_path / "out.json")
    assert (result.code, result.stderr) == (2, f"et-convert: error: {path}: {message}\n")
    assert not (tmp_path / "out.json").exists()


def test_a_chakra_file_with_a_layout_attribute_of_zero_is_a_clear_error(tmp_path):
    """The same fault as et-json-parallel-cp-zero.json in a Chakra set: its GlobalMetadata is shared."""
    from converters._proto import et_def_pb2 as pb
    from converters._proto.wire import varint
    from malformed import et_frames

    assert run_cli_here(ROOT / "samples" / "megatron_rank4_pp_tp2.log", "--to", "chakra", "-o", tmp_path / "w").code == 0
    path = tmp_path / "w.4.et"  # the log holds rank 4
    data = path.read_bytes()
    offset, start, end = et_frames(data)[0]
    meta = pb.GlobalMetadata.FromString(data[start:end])
    index = next(i for i, a in enumerate(meta.attr) if a.name == "parallel.pp")
    meta.attr[index].int64_val = 0
    body = meta.SerializeToString()
    path.write_bytes(data[:offset] + varint(len(body)) + body + data[end:])
    result = run_cli_here(path, "-o", tmp_path / "out.json")
    assert (result.code, result.stderr) == (
        2, f"et-convert: error: {path}: GlobalMetadata attribute {index}: parallel.pp is 0; expected at least 1\n")
