"""OptimusPrime times are modelled, not measured: the label, stats side by side, the timeline bar."""

from __future__ import annotations

import json

import orjson
import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

import converters as etc
from conftest import SAMPLES, run_cli
from converters.diagnostics import Diagnostics
from converters.options import Options
from converters.stats import render, stats_of
from converters.timeline import Timeline
from converters.writers import chrome, perfetto

SAMPLE = SAMPLES / "optimusprime_llama1b_pp8.log"
MEASURED_NS = 1_613_340_000  # `ms/batch 1613.34` of step 5, line 492


@pytest.fixture(scope="module")
def trace():
    return etc.read(SAMPLE, "optimus-log", diagnostics=Diagnostics())


def modelled_timeline(trace) -> Timeline:
    """The builder's own times, as the timeline of a modelled trace has them."""
    starts = {r.rank: [n.start_ns for n in r.nodes] for r in trace.sorted_ranks()}
    ends = {r.rank: [n.start_ns + n.duration_ns for n in r.nodes] for r in trace.sorted_ranks()}
    return Timeline(starts, ends, "modelled")


def modelled_end(trace) -> int:
    return max(n.start_ns + n.duration_ns for r in trace.ranks.values() for n in r.nodes)


def test_trace_is_labelled_modelled(trace):
    assert trace.timing == "modelled"
    assert modelled_end(trace) == round(trace.metadata["modelled_iteration_ms"] * 1e6)


def test_stats_put_measured_beside_modelled(trace):
    end = modelled_end(trace)
    stats = stats_of(trace, modelled_timeline(trace))
    assert (stats["timing"], stats["iteration_time_ns"]) == ("modelled", end)
    assert stats["measured"] == {
        "ns": MEASURED_NS, "what": "ms/batch of step 5", "source": f"{SAMPLE}:492", "gap_ns": MEASURED_NS - end,
    }
    lines = render(stats).splitlines()
    assert lines[0] == "iteration time  723.660 ms  (modelled, 8 ranks)"
    assert lines[1] == (
        f"measured        1613.340 ms  (ms/batch of step 5, {SAMPLE}:492); the model leaves out 889.680 ms (55.1 %)"
    )


def test_measured_timelines_have_no_measured_line(trace):
    stats = stats_of(trace, Timeline(modelled_timeline(trace).starts, modelled_timeline(trace).ends, "measured"))
    assert "measured" not in stats
    assert render(stats).splitlines()[1] == ""


def test_stats_command(tmp_path):
    result = run_cli("stats", SAMPLE)
    assert result.code == 0, result.stderr
    assert result.stdout.splitlines()[:2] == [
        "iteration time  723.660 ms  (modelled, 8 ranks)",
        f"measured        1613.340 ms  (ms/batch of step 5, {SAMPLE}:492); the model leaves out 889.680 ms (55.1 %)",
    ]
    as_json = json.loads(run_cli("stats", SAMPLE, "--json").stdout)
    assert as_json["timing"] == "modelled"
    assert as_json["measured"]["gap_ns"] == MEASURED_NS - as_json["iteration_time_ns"]


def summary_slices(events, pid):
    return sorted((e["tid"] - pid * 1000, e["ts"], e["dur"], e["name"]) for e in events if e.get("ph") == "X" and e["pid"] == pid)


def test_chrome_draws_measured_beside_modelled(trace, tmp_path):
    out = tmp_path / "op.json"
    chrome.write(trace, out, Options(), Diagnostics(), timeline=modelled_timeline(trace))
    obj = orjson.loads(out.read_bytes())
    events = obj["traceEvents"]
    assert obj["metadata"]["timing"] == "modelled"
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in events if e["name"] in ("process_name", "thread_name")}
    assert names[(9, None)] == "measured vs modelled"
    assert (names[(9, 9001)], names[(9, 9002)]) == ("modelled", "measured")
    end_us = modelled_end(trace) / 1000
    assert summary_slices(events, 9) == [
        (1, 0.0, end_us, "modelled iteration 723.660 ms"),
        (1, end_us, round(MEASURED_NS / 1000 - end_us, 3), "not modelled: 889.680 ms"),
        (2, 0.0, MEASURED_NS / 1000, "measured ms/batch of step 5: 1613.340 ms"),
    ]
    measured = next(e for e in events if e.get("pid") == 9 and e.get("tid") == 9002 and e["ph"] == "X")
    assert measured["args"] == {
        "measured_ns": MEASURED_NS, "modelled_ns": modelled_end(trace), "gap_ns": MEASURED_NS - modelled_end(trace),
        "source": f"{SAMPLE}:492",
    }


def test_perfetto_draws_the_same_bar(trace, tmp_path):
    out = tmp_path / "op.pftrace"
    perfetto.write(trace, out, Options(), Diagnostics(), timeline=modelled_timeline(trace))
    parsed = pb.Trace()
    parsed.ParseFromString(out.read_bytes())
    names, tracks, begins = {}, {}, []
    for packet in parsed.packet:
        # iids are per sequence: each process interns its own names
        names.update({(packet.trusted_packet_sequence_id, e.iid): e.name for e in packet.interned_data.event_names})
        if packet.HasField("track_descriptor"):
            tracks[packet.track_descriptor.uuid] = packet.track_descriptor
        if packet.HasField("track_event") and packet.track_event.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
            begins.append(packet)
    process = [t.process.process_name for t in tracks.values() if t.HasField("process") and t.process.pid == 9]
    assert process == ["measured vs modelled"]
    on_summary = sorted(
        (tracks[p.track_event.track_uuid].thread.thread_name, names[p.trusted_packet_sequence_id, p.track_event.name_iid])
        for p in begins if tracks[p.track_event.track_uuid].thread.pid == 9
    )
    assert on_summary == [
        ("measured", "measured ms/batch of step 5: 1613.340 ms"),
        ("modelled", "modelled iteration 723.660 ms"),
        ("modelled", "not modelled: 889.680 ms"),
    ]


def test_cli_chrome_timeline_is_modelled(tmp_path):
    out = tmp_path / "op.json"
    result = run_cli(SAMPLE, "-o", out)
    assert result.code == 0, result.stderr
    obj = json.loads(out.read_text())
    assert obj["metadata"]["timing"] == "modelled"
    assert [e["name"] for e in obj["traceEvents"] if e.get("ph") == "X" and e["pid"] == 9 and e["tid"] == 9002] == [
        "measured ms/batch of step 5: 1613.340 ms"
    ]


def test_a_model_longer_than_the_measurement_says_so(trace):
    stats = stats_of(trace, modelled_timeline(trace))
    stats["measured"] = {**stats["measured"], "ns": 700_000_000, "gap_ns": 700_000_000 - stats["iteration_time_ns"]}
    assert render(stats).splitlines()[1] == (
        f"measured        700.000 ms  (ms/batch of step 5, {SAMPLE}:492); the model is 23.660 ms longer"
    )
