"""Optional: load our Chrome JSON and .pftrace into Perfetto's own trace processor.

Runs only when PERFETTO_TP_BIN points at a trace_processor_shell binary (the perfetto
package would otherwise download one, and tests must not need the internet).
"""

from __future__ import annotations

import os

import pytest

from converters.diagnostics import Diagnostics
from converters.options import Options
from converters.writers import chrome, perfetto
from test_chrome import small_trace

TP_BIN = os.environ.get("PERFETTO_TP_BIN")
pytestmark = pytest.mark.skipif(not TP_BIN, reason="set PERFETTO_TP_BIN to a trace_processor_shell binary")

IMPORT_PROBLEMS = (
    "'json_parser_failure', 'json_tokenizer_failure', 'flow_duplicate_id', 'flow_end_without_start', "
    "'flow_step_without_start', 'flow_no_enclosing_slice', 'flow_without_direction', 'flow_invalid_id', "
    "'slice_spill_overlapping_complete_event', 'slice_negative_duration', 'misplaced_end_event', "
    "'track_event_parser_errors', 'track_event_tokenizer_errors'"
)


def load(path):
    from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig

    return TraceProcessor(trace=str(path), config=TraceProcessorConfig(bin_path=TP_BIN))


def summary(path) -> dict:
    tp = load(path)
    try:
        problems = {r.name: r.value for r in tp.query(f"select name, value from stats where name in ({IMPORT_PROBLEMS}) and value > 0")}
        slices = next(iter(tp.query("select count(*) as n from slice"))).n
        flows = next(iter(tp.query("select count(*) as n from flow"))).n
        threads = {r.name for r in tp.query("select name from thread where name is not null")}
        depth = next(iter(tp.query("select max(depth) as d from slice"))).d
    finally:
        tp.close()
    return {"problems": problems, "slices": slices, "flows": flows, "threads": threads, "depth": depth}


def test_json_and_pftrace_import_cleanly_and_agree(tmp_path):
    js, pf = tmp_path / "t.json", tmp_path / "t.pftrace"
    chrome.write(small_trace(), js, Options(), Diagnostics())
    perfetto.write(small_trace(), pf, Options(), Diagnostics())
    a, b = summary(js), summary(pf)
    assert a["problems"] == {} and b["problems"] == {}
    assert a["slices"] == b["slices"] == 28
    # 2 send/recv flows + 8 two-member collective chains
    assert a["flows"] == b["flows"] == 10
    assert {"compute", "tp", "tp 2", "dp", "pp send", "pp recv"} <= a["threads"]
    assert a["threads"] == b["threads"]
    assert a["depth"] == b["depth"] == 1  # the TP all-reduce sits inside forward mb0
