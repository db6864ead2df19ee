"""`et-convert validate` on Chrome traces: each Perfetto import rule gives its code, NaN is a
finding (not unusable input), and the summary counts processes, not ranks."""

from __future__ import annotations

import json
from pathlib import Path

import orjson

from converters.validate.command import chrome_report

from conftest import run_cli


def named(pid: int, tid: int) -> list[dict]:
    return [{"ph": "M", "name": "process_name", "pid": pid, "args": {"name": f"p{pid}"}},
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": f"t{tid}"}}]


def write(path: Path, events: list[dict]) -> Path:
    path.write_bytes(orjson.dumps({"traceEvents": events}))
    return path


def test_each_rule_gives_its_code(tmp_path):
    events = [
        *named(1, 1001),
        {"ph": "X", "name": "outer", "pid": 1, "tid": 1001, "ts": 0, "dur": 10},
        {"ph": "X", "name": "partial", "pid": 1, "tid": 1001, "ts": 5, "dur": 10},  # E085: overlaps, not nested
        {"ph": "X", "name": "negative", "pid": 1, "tid": 1001, "ts": 30, "dur": -1},  # E084
        {"ph": "X", "name": "nested args", "pid": 1, "tid": 1001, "ts": 40, "dur": 1, "args": {"a": {"b": 1}}},  # E087
        {"ph": "X", "name": "bad flow", "pid": 1, "tid": 1001, "ts": 50, "dur": 1, "bind_id": 0, "flow_out": True},  # E086
        {"ph": "X", "name": "tid 0", "pid": 1, "tid": 0, "ts": 60, "dur": 1},  # E082
        {"ph": "X", "name": "pid 0", "pid": 0, "tid": 7, "ts": 0, "dur": 1},  # E081, and unnamed: E083
    ]
    report = chrome_report([write(tmp_path / "t.json", events)])
    found = {f.code for f in report.findings}
    assert {"E081", "E082", "E083", "E084", "E085", "E086", "E087"} <= found
    assert "E080" not in found
    e083 = next(f for f in report.findings if f.code == "E083")
    assert e083.message == "pid 0 has slices but no process_name" and e083.source == "t.json"


def test_nan_is_a_finding_with_its_line_and_the_other_rules_still_run(tmp_path):
    events = [*named(1, 1001), {"ph": "X", "name": "a", "pid": 1, "tid": 1001, "ts": 0, "dur": float("nan")}]
    path = tmp_path / "nan.json"
    path.write_text(json.dumps({"traceEvents": events}, indent=1))  # the stdlib writes NaN as is
    nan_line = next(i for i, line in enumerate(path.read_text().splitlines(), 1) if "NaN" in line)
    result = run_cli("validate", path)
    assert result.code == 1 and result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0] == "chrome: 2 findings"
    assert lines[1].startswith(f"  E080 not strict JSON · a strict parser stops at line {nan_line} column ")
    assert lines[1].endswith(f"(NaN or Infinity?); Perfetto rejects the file · nan.json:{nan_line}")
    assert lines[2] == "  E084 bad slice time · event 2 (pid 1, tid 1001, 'a'): X slice without a finite dur · nan.json"
    assert lines[3].startswith("validate: 2 errors, 0 warnings · 1 process · 1 check · ")


def test_a_file_no_json_parser_reads_is_unusable_input(tmp_path):
    path = tmp_path / "cut.json"
    path.write_text('{"traceEvents": [\n{"ph": "X",}\n]}')
    result = run_cli("validate", path)
    assert result.code == 2 and result.stdout == ""
    assert result.stderr.startswith(f"et-convert: error: {path}:2: not JSON (Perfetto rejects NaN, Infinity and "
                                    "trailing commas): ")


def test_summary_counts_every_process_that_has_events(tmp_path):
    events = [*named(1, 1001), *named(2, 2001), *named(999, 999001),
              {"ph": "X", "name": "a", "pid": 1, "tid": 1001, "ts": 0, "dur": 1},
              {"ph": "X", "name": "b", "pid": 2, "tid": 2001, "ts": 0, "dur": 1},
              {"ph": "i", "name": "marker", "pid": 999, "tid": 999001, "ts": 0, "s": "t"},
              {"ph": "X", "name": "c", "pid": 0, "tid": 5, "ts": 0, "dur": 1}]
    report = chrome_report([write(tmp_path / "p.json", events)])
    assert report.ranks == 4 and report.unit == "process"
    assert " · 4 processes · 1 check · " in report.summary()
    assert orjson.loads(report.json())["summary"]["processes"] == 4
