"""Is the content of two `.pftrace` files the same, whatever their sequences and interning?

    python benchmarks/pftrace_content.py convert OUT [LOGS]   # every sample's timeline (and LOGS) -> OUT/*.pftrace
    python benchmarks/pftrace_content.py compare OLD NEW      # same file names in both folders: same content?

A file is decoded with Perfetto's protos into, per track (process: pid, name, sort index;
thread: pid, tid, name, sort index), the list of its events (ts, type, name, args, flow ids,
terminating flow ids), interned names resolved per trusted sequence and incremental-state
interval as trace processor resolves them. Events keep file order per track (trace processor
sorts by (ts, file position), so that order is what it sees for equal timestamps).
"""

from __future__ import annotations

import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
NEEDS = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE


def timeline_jobs(out: Path, logs: Path | None) -> list[list[str]]:
    """`make run`'s timeline conversions, written as .pftrace."""
    from converters.samples import jobs

    result = []
    for args in jobs(out):
        if args[0] in ("validate", "report") or "--to" in args or not args[-1].endswith(".json"):
            continue
        result.append([*args[:-1], args[-1][:-len(".json")] + ".pftrace"])
    if logs is not None:
        result.append([str(logs), "-o", str(out / "benchmark7.pftrace")])
    return result


def convert(out: Path, logs: Path | None) -> None:
    for args in timeline_jobs(out, logs):
        Path(args[-1]).parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "converters.cli", *args, "-q"], check=True)
        print(args[-1])


def content(path: Path) -> dict:
    """track -> events, as described in the module docstring."""
    trace = pb.Trace()
    trace.ParseFromString(path.read_bytes())
    names: dict[int, dict[int, str]] = {}  # sequence -> iid -> event name
    arg_names: dict[int, dict[int, str]] = {}
    tracks: dict[int, tuple] = {}
    events: dict[int, list] = defaultdict(list)
    for packet in trace.packet:
        seq = packet.trusted_packet_sequence_id
        if packet.sequence_flags & CLEARED:  # a new interval: iids from before no longer hold
            names[seq], arg_names[seq] = {}, {}
        if packet.HasField("interned_data"):
            for e in packet.interned_data.event_names:
                assert e.iid not in names[seq], (path, seq, e.iid)
                names[seq][e.iid] = e.name
            for e in packet.interned_data.debug_annotation_names:
                assert e.iid not in arg_names[seq], (path, seq, e.iid)
                arg_names[seq][e.iid] = e.name
        if packet.HasField("track_descriptor"):
            t = packet.track_descriptor
            if t.HasField("thread"):
                tracks[t.uuid] = ("thread", t.thread.pid, t.thread.tid, t.thread.thread_name, t.thread.legacy_sort_index)
            else:
                tracks[t.uuid] = ("process", t.process.pid, t.process.process_name, t.process.legacy_sort_index)
        if packet.HasField("track_event"):
            assert packet.sequence_flags & NEEDS, path
            e = packet.track_event
            name = names[seq][e.name_iid] if e.HasField("name_iid") else None
            args = tuple((arg_names[seq][a.name_iid], a.WhichOneof("value"), getattr(a, a.WhichOneof("value")))
                         for a in e.debug_annotations)
            events[e.track_uuid].append((packet.timestamp, e.type, name, args, tuple(e.flow_ids),
                                         tuple(e.terminating_flow_ids)))
    by_track = {track: events.pop(uuid, []) for uuid, track in tracks.items()}
    assert not events, f"{path}: events on undescribed tracks"
    return by_track


def compare(old: Path, new: Path) -> int:
    failed = 0
    for a in sorted(old.rglob("*.pftrace")):
        b = new / a.relative_to(old)
        same = content(a) == content(b)
        failed += not same
        print(f"{'same' if same else 'DIFFERENT':>9}  {a.relative_to(old)}", flush=True)
    return failed


def main(argv: list[str]) -> int:
    if argv[0] == "convert":
        convert(Path(argv[1]), Path(argv[2]) if len(argv) > 2 else None)
        return 0
    return 1 if compare(Path(argv[1]), Path(argv[2])) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
