"""A receive that waited for its sender shows the waiting part as a child slice, in both writers."""

from __future__ import annotations

from collections import defaultdict

import orjson
import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

import converters as etc
from conftest import SAMPLES
from converters.diagnostics import Diagnostics
from converters.options import Options
from converters.timeline import Timeline, measured_timeline
from converters.validate.chrome_rules import check_chrome_trace
from converters.writers import chrome, perfetto
from helpers.megatron_synth import write_run

BEGIN = pb.TrackEvent.TYPE_SLICE_BEGIN
WAITING = "waiting for rank "


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """8 ranks, TP 2 x PP 4, 4 microbatches of 1F1B: receives wait for the previous stage."""
    directory = tmp_path_factory.mktemp("synth")
    write_run(directory, stages=4, tp=2, microbatches=4)
    return etc.read(directory, "megatron-log", diagnostics=Diagnostics())


def rank4_sample():
    return etc.read(SAMPLES / "megatron_rank4_pp_tp2.log", "megatron-log", diagnostics=Diagnostics())


def json_events(trace, tmp_path, timeline=None) -> list[dict]:
    out = tmp_path / "t.json"
    chrome.write(trace, out, Options(ranks="all"), Diagnostics(), timeline)
    obj = orjson.loads(out.read_bytes())
    assert check_chrome_trace(obj) == []
    return [e for e in obj["traceEvents"] if e["ph"] == "X"]


def waits_with_receives(slices: list[dict]) -> list[tuple[dict, dict]]:
    """Each waiting slice with the receive it sits in (same thread, same start, ends inside)."""
    pairs = []
    for wait in (e for e in slices if e["name"].startswith(WAITING)):
        [recv] = [
            e for e in slices
            if e is not wait and (e["pid"], e["tid"], e["ts"]) == (wait["pid"], wait["tid"], wait["ts"])
            and "wait_ns" in e["args"]
        ]
        pairs.append((wait, recv))
    return pairs


def ns(us: float) -> int:
    return round(us * 1000)


def test_synthetic_receives_show_their_waits(synthetic, tmp_path):
    slices = json_events(synthetic, tmp_path)
    waited = [e for e in slices if e["args"].get("wait_ns", 0) > 0]
    pairs = waits_with_receives(slices)
    assert len(pairs) == len(waited) > 0
    for wait, recv in pairs:
        assert recv["name"].startswith("recv")
        assert ns(wait["dur"]) == recv["args"]["wait_ns"] <= ns(recv["dur"])
        assert wait["name"] == f"{WAITING}{recv['args']['peer']}"
        assert wait["args"] == {"wait_basis": "start of the matching send"}
        assert "bind_id" not in wait  # the flow stays on the receive itself
    # stage 1 waits for stage 0 on its first forward: 2 ranks x the first receive at least
    assert {e["pid"] for e, _ in pairs} >= {3, 4}


def test_rank4_sample_waits(tmp_path):
    slices = json_events(rank4_sample(), tmp_path)
    pairs = waits_with_receives(slices)
    assert [(w["name"], ns(w["ts"]), ns(w["dur"])) for w, _ in pairs] == [
        ("waiting for rank 2", 0, 419_890_000),
        ("waiting for rank 6", 629_640_000, 1_800_120_000),
    ]
    for wait, recv in pairs:
        assert wait["args"]["wait_basis"].startswith("estimate")
        assert ns(wait["dur"]) == recv["args"]["wait_ns"]


def pftrace_waits(trace, tmp_path) -> list[tuple[str, int, int, str]]:
    """(waiting name, start, end, enclosing slice name) from the .pftrace, by nesting per track."""
    out = tmp_path / "t.pftrace"
    perfetto.write(trace, out, Options(ranks="all"), Diagnostics())
    parsed = pb.Trace()
    parsed.ParseFromString(out.read_bytes())
    names = {}
    for packet in parsed.packet:
        if packet.HasField("interned_data"):
            # iids are per sequence: each process interns its own names
            names.update({(packet.trusted_packet_sequence_id, e.iid): e.name for e in packet.interned_data.event_names})
    stacks, found = defaultdict(list), []
    for packet in parsed.packet:
        if not packet.HasField("track_event"):
            continue
        event, stack = packet.track_event, stacks[packet.track_event.track_uuid]
        if event.type == BEGIN:
            stack.append((names[packet.trusted_packet_sequence_id, event.name_iid], packet.timestamp, stack[-1][0] if stack else None))
        else:
            name, start, parent = stack.pop()
            if name.startswith(WAITING):
                found.append((name, start, packet.timestamp, parent))
    return found


@pytest.mark.parametrize("which", ["synthetic", "rank4"])
def test_pftrace_draws_the_same_waits(which, synthetic, tmp_path):
    trace = synthetic if which == "synthetic" else rank4_sample()
    slices = json_events(trace, tmp_path)
    origin = min(e["ts"] for e in slices)
    expected = sorted(
        (w["name"], ns(w["ts"] - origin), ns(w["ts"] - origin) + ns(w["dur"]), r["name"]) for w, r in waits_with_receives(slices)
    )
    assert sorted(pftrace_waits(trace, tmp_path)) == expected and expected


def test_no_waits_on_a_scheduled_timeline(synthetic, tmp_path):
    """A wait was measured against the log's own times: it means nothing on the scheduler's."""
    measured = measured_timeline(synthetic)
    scheduled = Timeline(measured.starts, measured.ends, "scheduled")
    slices = json_events(synthetic, tmp_path, scheduled)
    assert not [e for e in slices if e["name"].startswith(WAITING)]
    assert len(slices) == sum(len(r.nodes) for r in synthetic.ranks.values())
