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
