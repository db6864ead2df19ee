"""`et-convert simulate`: run ASTRA-sim on a Chakra set and put its finish times beside ours.

ASTRA-sim exits 0 even when ranks stall, so its exit status says little. This module writes the
three configuration files ASTRA-sim's analytical (congestion-unaware) backend needs, matching
et-convert's network model (`converters/scheduler/network.py`), runs the simulator, and judges
the run by the rules of `../shared/astra-sim/run`: every rank prints exactly one
"sys[i] finished, C cycles" line, no line says "[critical]" or "terminate called", the exit
status is 0. Cycles are ns (1 GHz).

What the configuration files hold (`astra_configs`):

    network.yml         topology [Ring], npus_count [world], bandwidth [bandwidth_gbps] (GB/s as
                        ASTRA-sim reads it), latency [latency_ns] (per hop)
    system.json         preferred-dataset-splits = chunks, endpoint-delay = endpoint_delay_ns,
                        local-mem-bw = local_mem_gbps, all-reduce/all-gather/reduce-scatter/
                        all-to-all-implementation = [algorithm]; and, fixed to what the scheduler
                        assumes: scheduling-policy LIFO, active-chunks-per-dimension 1,
                        collective-optimization localBWAware, boost-mode 0, roofline-enabled 0
                        (compute takes the node's duration), peak-perf 900 (unused then)
    remote_memory.json  memory-type NO_MEMORY_EXPANSION (the scheduler models no remote memory)

ASTRA-sim's Ring has one set of link parameters for every group, so the network is taken from
`[default]`; per-kind tables (`[tp]`, `[pp]`, ...) and `[size.N]` tables that the set's groups
would use and that differ from it have no counterpart: they are named in a warning, and our own
prediction is made with `[default]` for every group too, so that the two columns compare like
with like.

The feeder_v3 ("head") build can corrupt its heap (glibc aborts, exit 134, or a segfault, 139)
after every rank has finished; that is reported as the simulator's crash at exit, with the
finish times it printed, not as a stall. The same crash before some rank finished names those
ranks as not finished, as a crash (not a stall).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .diagnostics import Diagnostics, InputError, UsageError
from .model import ExecutionTrace, NodeKind
from .options import Options
from .scheduler.network import LinkParams, Network, table_of

FINISHED = re.compile(r"sys\[(\d+)\] finished, (\d+) cycles")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
CRITICAL = ("[critical]", "terminate called")
# Exit statuses of a process killed by SIGABRT / SIGSEGV, as a shell reports them (128 + signal).
CRASH_STATUSES = {128 + signal.SIGABRT: "SIGABRT", 128 + signal.SIGSEGV: "SIGSEGV"}
TIMEOUT_S = 300.0
TAIL_LINES = 5
CONFIG_FILES = ("network.yml", "system.json", "remote_memory.json")
# system.json keys et-convert's scheduler has no setting for: fixed to what it assumes.
FIXED_SYSTEM = {
    "scheduling-policy": "LIFO",
    "active-chunks-per-dimension": 1,
    "collective-optimization": "localBWAware",
    "boost-mode": 0,
    "roofline-enabled": 0,
    "peak-perf": 900,
}


@dataclass
class Simulation:
    """One ASTRA-sim run, judged. Times are ns; `predicted` is None when our scheduler found a deadlock."""

    simulator: str
    world: int
    exit_status: int | None  # None: killed after the timeout
    finished: dict[int, int]  # rank -> finish time ASTRA-sim printed (the last, when repeated)
    repeated: list[int]  # ranks with more than one finish line
    critical: list[str]  # lines with [critical] / terminate called
    tail: list[str]  # the simulator's last lines, for the report
    predicted: dict[int, int] | None
    prediction_note: str  # "scheduled", or what stopped our scheduler
    network: dict[str, Any]
    no_counterpart: list[str]
    timeout_s: float = TIMEOUT_S
    set_prefix: str = ""
    extra: list[str] = field(default_factory=list)
    explained: list[str] = field(default_factory=list)  # the validator's errors, when the run failed

    @property
    def stuck(self) -> list[int]:
        return [r for r in range(self.world) if r not in self.finished]

    @property
    def crash_signal(self) -> str | None:
        return CRASH_STATUSES.get(self.exit_status) if self.exit_status is not None else None

    @property
    def verdict(self) -> str:
        """finished, crashed at exit, timeout, crashed, stuck or failed."""
        clean = not self.stuck and not self.repeated and not self.critical and not self.extra
        if self.exit_status is None:
            return "timeout"
        if clean and self.exit_status == 0:
            return "finished"
        if clean and self.crash_signal:
            return "crashed at exit"
        if self.crash_signal:
            return "crashed"
        if self.exit_status != 0:  # it did not run to its end (a missing library, a bad option, ...)
            return "failed"
        if self.stuck or self.critical:
            return "stuck"
        return "failed"

    @property
    def ok(self) -> bool:
        return self.verdict in ("finished", "crashed at exit")

    def reason(self) -> str:
        """One sentence for the verdict."""
        verdict = self.verdict
        stuck = _rank_list(self.stuck)
        if verdict == "finished":
            return f"every rank finished ({self.world} ranks)"
        if verdict == "crashed at exit":
            return (f"every rank finished ({self.world} ranks), then ASTRA-sim crashed at exit (exit status "
                    f"{self.exit_status}, {self.crash_signal}); the finish times are the ones it printed")
        if verdict == "timeout":
            return f"ASTRA-sim did not end within {self.timeout_s:g} s; ranks without a finish line: {stuck or 'none'}"
        problems = []
        if self.stuck:
            problems.append(f"{len(self.stuck)} of {self.world} ranks did not finish: {stuck}")
        if self.repeated:
            problems.append(f"ranks with more than one finish line: {_rank_list(self.repeated)}")
        if self.critical:
            problems.append(f"{len(self.critical)} line(s) with [critical]/terminate called, first: "
                            f"{self.critical[0][:200]}")
        problems += self.extra
        if verdict == "crashed":
            lead = f"ASTRA-sim crashed (exit status {self.exit_status}, {self.crash_signal})"
            if self.stuck:
                lead += f" before {len(self.stuck)} of {self.world} ranks finished: {stuck}"
                problems.pop(0)
            problems.insert(0, lead)
        elif self.exit_status:
            problems.insert(0, f"ASTRA-sim exited with status {self.exit_status}")
        return "; ".join(problems)

    def as_dict(self) -> dict[str, Any]:
        ranks = {}
        for r in range(self.world):
            ranks[str(r)] = {"astra_sim_ns": self.finished.get(r),
                             "et_convert_ns": self.predicted.get(r) if self.predicted is not None else None}
        return {
            "verdict": self.verdict,
            "ok": self.ok,
            "reason": self.reason(),
            "simulator": self.simulator,
            "exit_status": self.exit_status,
            "world": self.world,
            "stuck": self.stuck,
            "iteration": {
                "astra_sim_ns": max(self.finished.values()) if self.finished and not self.stuck else None,
                "et_convert_ns": max(self.predicted.values(), default=0) if self.predicted is not None else None,
            },
            "ranks": ranks,
            "prediction": self.prediction_note,
            "network": self.network,
            "no_counterpart": self.no_counterpart,
            "set": self.set_prefix,
            "validator_errors": self.explained,
        }


def _rank_list(ranks: list[int], limit: int = 20) -> str:
    shown = ", ".join(str(r) for r in ranks[:limit])
    return shown + (f", ... ({len(ranks)} in all)" if len(ranks) > limit else "")


# ---------------------------------------------------------------- configuration files


def astra_configs(network: Network, world: int) -> dict[str, str]:
    """The text of network.yml, system.json and remote_memory.json for `world` ranks."""
    p = network.params(None)  # [default]
    yml = (
        "topology: [ Ring ]\n"
        f"npus_count: [ {world} ]\n"
        f"bandwidth: [ {p.bandwidth_gbps:g} ]  # GB/s\n"
        f"latency: [ {p.latency_ns:g} ]  # ns per hop\n"
    )
    system = {
        "scheduling-policy": FIXED_SYSTEM["scheduling-policy"],
        "endpoint-delay": _whole(p.endpoint_delay_ns),
        "active-chunks-per-dimension": FIXED_SYSTEM["active-chunks-per-dimension"],
        "preferred-dataset-splits": p.chunks,
        **{f"{coll}-implementation": [p.algorithm]
           for coll in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")},
        "collective-optimization": FIXED_SYSTEM["collective-optimization"],
        "local-mem-bw": _whole(p.local_mem_gbps),
        "boost-mode": FIXED_SYSTEM["boost-mode"],
        "roofline-enabled": FIXED_SYSTEM["roofline-enabled"],
        "peak-perf": FIXED_SYSTEM["peak-perf"],
    }
    return {
        "network.yml": yml,
        "system.json": json.dumps(system, indent=4) + "\n",
        "remote_memory.json": json.dumps({"memory-type": "NO_MEMORY_EXPANSION"}) + "\n",
    }


def _whole(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def flattened(network: Network) -> Network:
    """The network ASTRA-sim gets: `[default]` for every group kind and size."""
    return Network({"default": network.params(None).as_dict()}, f"{network.origin}, [default] for every group")


def without_counterpart(network: Network, trace: ExecutionTrace) -> list[str]:
    """Settings the set's groups would use that ASTRA-sim's single Ring cannot express:
    `tp.bandwidth_gbps=200 (ASTRA-sim: 50)`, one per key that differs from `[default]`."""
    default = network.params(None)
    used: dict[str, set[int]] = {}
    for group in trace.groups.values():
        used.setdefault(table_of(group.kind), set()).add(len(group.members))
    node_lists = {id(rank.nodes): rank.nodes for rank in trace.ranks.values()}  # ranks may share one list
    if any(n.kind in (NodeKind.SEND, NodeKind.RECV) for nodes in node_lists.values() for n in nodes):
        used.setdefault("pp", set())  # sends and receives without a group use [pp]
    lost: dict[str, None] = {}  # ordered, without repeats
    for table, sizes in sorted(used.items()):
        of_kind = network.params(table)
        for members in sorted(sizes) or [None]:
            params = network.params(table, members)
            for key, value in params.as_dict().items():
                if value != getattr(default, key):
                    source = table if value == getattr(of_kind, key) else f"size.{members}"
                    lost[f"{source}.{key}={_text(value)} (ASTRA-sim: {_text(getattr(default, key))})"] = None
    return list(lost)


def _text(value: object) -> str:
    return f"{value:g}" if isinstance(value, (int, float)) else str(value)


def describe(p: LinkParams) -> str:
    return (f"{p.bandwidth_gbps:g} GB/s, {p.latency_ns:g} ns per step, {p.chunks} chunk(s), {p.algorithm}, "
            f"endpoint delay {p.endpoint_delay_ns:g} ns, local memory {p.local_mem_gbps:g} GB/s")


# ---------------------------------------------------------------- the set on disk


RANK_FILE = re.compile(r"^(?P<prefix>.+)\.(?P<rank>\d+)\.et$")


def set_on_disk(trace: ExecutionTrace) -> tuple[Path, Path | None] | None:
    """(prefix, comm_group.json) when `trace` was read from plain `<prefix>.<rank>.et` files, one
    for every rank 0..world-1 in one directory: ASTRA-sim can read those as they are."""
    from .readers.chakra import group_file_for

    if trace.source.format != "chakra":
        return None
    prefixes = set()
    for r, rank in trace.ranks.items():
        match = RANK_FILE.match(Path(rank.source or "").name)
        if match is None or int(match["rank"]) != r:
            return None
        prefixes.add(Path(rank.source).parent / match["prefix"])
    if len(prefixes) != 1 or sorted(trace.ranks) != list(range(len(trace.ranks))):
        return None
    prefix = prefixes.pop()
    first = Path(trace.ranks[0].source)
    return prefix, group_file_for(first)


def _check_complete(trace: ExecutionTrace) -> None:
    held = sorted(trace.ranks)
    world = held[-1] + 1 if held else 0
    if len(held) != world:
        missing = [r for r in range(world) if r not in trace.ranks]
        raise InputError(None, f"the set lacks ranks {_rank_list(missing)} of {world}; ASTRA-sim needs a file "
                               f"for every rank 0..{world - 1}")


# ---------------------------------------------------------------- running it


def simulate(
    inputs, astra_sim: str | Path, fmt: str = "auto", options: Options | None = None,
    diagnostics: Diagnostics | None = None, keep: str | Path | None = None, timeout_s: float = TIMEOUT_S,
) -> Simulation:
    """Run ASTRA-sim on `inputs` (a Chakra set, or anything et-convert reads: it is written as a
    Chakra set first) and judge the run. `keep`: a directory that keeps the configuration
    files, the simulator's transcript (`astra-sim.log`) and a converted set."""
    from . import api
    from .scheduler import network_for

    options = options or Options()
    diagnostics = diagnostics if diagnostics is not None else Diagnostics()
    binary = _binary(astra_sim)
    trace = api.read(inputs, fmt, options, diagnostics)
    _check_complete(trace)
    network = network_for(options)
    work = Path(keep) if keep is not None else Path(tempfile.mkdtemp(prefix="et-convert-simulate-"))
    try:
        work.mkdir(parents=True, exist_ok=True)
        trace, prefix, groups, converted = _set_to_simulate(trace, work, options, diagnostics)
        lost = without_counterpart(network, trace)
        if lost:
            diagnostics.warn("simulate-network", "ASTRA-sim's Ring has one bandwidth, latency, chunking and "
                             "algorithm for every group; these settings have no counterpart, so both runs use "
                             f"[default] instead: {', '.join(lost)}")
        predicted, note = _predict(trace, flattened(network))
        for name, text in astra_configs(network, len(trace.ranks)).items():
            (work / name).write_text(text)
        transcript, status = _run(binary, work, prefix, groups, timeout_s)
        if keep is not None:
            (work / "astra-sim.log").write_text(transcript)
    finally:
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)
    result = judge(transcript, status, len(trace.ranks))
    result.simulator = str(astra_sim)
    result.predicted, result.prediction_note = predicted, note
    result.network = {"source": network.origin, "default": network.params(None).as_dict()}
    result.no_counterpart = lost
    result.timeout_s = timeout_s
    result.set_prefix = "" if converted and keep is None else str(prefix)  # a converted set is gone unless kept
    if not result.ok:
        result.explained = _validator_errors(trace)
    if result.verdict == "crashed at exit":
        diagnostics.warn("simulate-crash-at-exit", f"ASTRA-sim crashed at exit (exit status {result.exit_status}, "
                         f"{result.crash_signal}) after every rank had finished; the finish times are the ones it "
                         "printed (a known defect of the feeder_v3 build, not a stall)")
    return result


def _set_to_simulate(trace: ExecutionTrace, work: Path, options: Options, diagnostics: Diagnostics):
    """(the model of the set ASTRA-sim reads, its prefix, its comm_group.json, whether it was written
    here): the input's own files when they are a plain Chakra set, else a set written under `work`
    and read back, so that our prediction is of exactly what is simulated."""
    from . import api

    on_disk = set_on_disk(trace)
    if on_disk is not None:
        return trace, *on_disk, False
    prefix = work / "set" / "workload"
    diagnostics.note(f"simulate: wrote the input as a Chakra set under {prefix.parent} for ASTRA-sim")
    api.write(trace, prefix, to="chakra", options=options, diagnostics=diagnostics)
    written = api.read(prefix.parent, "chakra", Options(), Diagnostics())
    return written, prefix, prefix.with_name(prefix.name + ".comm_group.json"), True


def _binary(astra_sim: str | Path) -> str:
    path = Path(astra_sim)
    found = str(path) if path.parent != Path(".") or path.exists() else shutil.which(str(path))
    if not found or not Path(found).is_file():
        raise UsageError(f"--astra-sim {astra_sim}: no such file")
    if not os.access(found, os.X_OK):
        raise UsageError(f"--astra-sim {astra_sim}: not executable")
    return str(Path(found).resolve())


def _predict(trace: ExecutionTrace, network: Network) -> tuple[dict[int, int] | None, str]:
    from .scheduler import Deadlock, schedule

    try:
        timeline = schedule(trace, network=network)
    except Deadlock as e:
        return None, f"et-convert's scheduler finds a {e.message}"
    return {int(r): row["finish_ns"] for r, row in timeline.summary["ranks"].items()}, "scheduled"


def _validator_errors(trace: ExecutionTrace, limit: int = 3) -> list[str]:
    """What `et-convert validate` says is wrong with the set: usually why ranks stalled."""
    from .api import validate

    errors = [f.text() for f in validate(trace) if f.severity == "error"]
    return errors[:limit] + ([f"... {len(errors) - limit} more (et-convert validate)"] if len(errors) > limit else [])


def _run(binary: str, work: Path, prefix: Path, groups: Path | None, timeout_s: float) -> tuple[str, int | None]:
    """The simulator's stdout and stderr together, and its exit status (None: timed out)."""
    args = [
        binary,
        f"--workload-configuration={prefix.resolve()}",
        f"--system-configuration={(work / 'system.json').resolve()}",
        f"--remote-memory-configuration={(work / 'remote_memory.json').resolve()}",
        f"--network-configuration={(work / 'network.yml').resolve()}",
    ]
    if groups is not None:
        args.append(f"--comm-group-configuration={groups.resolve()}")
    with tempfile.TemporaryFile() as out:
        try:
            done = subprocess.run(args, cwd=work, stdout=out, stderr=subprocess.STDOUT, timeout=timeout_s)
            # killed by a signal: the status a shell would show (134 for SIGABRT), as users know it
            status: int | None = 128 - done.returncode if done.returncode < 0 else done.returncode
        except subprocess.TimeoutExpired:
            status = None
        except OSError as e:
            raise UsageError(f"--astra-sim {binary}: cannot run it: {e.strerror}") from None
        out.seek(0)
        return out.read().decode("utf-8", errors="replace"), status


def judge(transcript: str, status: int | None, world: int) -> Simulation:
    """Read the transcript by the run script's rules."""
    finished: dict[int, int] = {}
    counts: dict[int, int] = {}
    critical = []
    lines = ANSI.sub("", transcript).splitlines()
    for line in lines:
        match = FINISHED.search(line)
        if match:
            rank = int(match[1])
            counts[rank] = counts.get(rank, 0) + 1
            finished[rank] = int(match[2])
        if any(marker in line for marker in CRITICAL):
            critical.append(line.strip())
    extra = []
    beyond = sorted(r for r in finished if r >= world)
    if beyond:
        extra.append(f"finish lines for ranks beyond the set: {_rank_list(beyond)}")
        finished = {r: c for r, c in finished.items() if r < world}
    return Simulation(
        simulator="", world=world, exit_status=status, finished=finished,
        repeated=sorted(r for r, n in counts.items() if n > 1 and r < world), critical=critical,
        tail=lines[-TAIL_LINES:], predicted=None, prediction_note="", network={}, no_counterpart=[], extra=extra,
    )


# ---------------------------------------------------------------- the report


def render(result: Simulation) -> str:
    """Per-rank finish times, ASTRA-sim beside et-convert (consecutive equal rows merged)."""
    lines = [f"ASTRA-sim {result.verdict}: {result.reason()}", ""]
    lines.append(f"{'ranks':<12}{'ASTRA-sim ns':>16}{'et-convert ns':>16}{'difference':>12}")
    rows = []
    for r in range(result.world):
        row = (result.finished.get(r), result.predicted.get(r) if result.predicted is not None else None)
        if rows and rows[-1][1] == row and rows[-1][0][-1] == r - 1:
            rows[-1][0].append(r)
        else:
            rows.append(([r], row))
    for members, (simulated, predicted) in rows:
        label = str(members[0]) if len(members) == 1 else f"{members[0]}-{members[-1]}"
        lines.append(_row(label, simulated, predicted))
    if not result.stuck and result.finished:
        predicted = max(result.predicted.values(), default=0) if result.predicted is not None else None
        lines.append(_row("iteration", max(result.finished.values()), predicted))
    if result.prediction_note != "scheduled":
        lines.append(result.prediction_note)
    default = result.network.get("default")
    if default:
        lines += ["", f"network ({result.network['source']}): {describe(LinkParams(**default))}"]
    if not result.ok:
        lines += ["", "last lines of the simulator:", *(f"  {line}" for line in result.tail)]
        if result.explained:
            lines += ["", "et-convert validate finds:", *(f"  {line}" for line in result.explained)]
    return "\n".join(lines) + "\n"


def _row(label: str, simulated: int | None, predicted: int | None) -> str:
    sim = "did not finish" if simulated is None else str(simulated)
    pred = "-" if predicted is None else str(predicted)
    diff = "-"
    if simulated and predicted is not None:
        # + 0.0 turns a rounded -0.000 into 0.000
        diff = f"{round(100 * (predicted - simulated) / simulated, 3) + 0.0:+.3f} %"
    return f"{label:<12}{sim:>16}{pred:>16}{diff:>12}"


def run(inputs, astra_sim, fmt: str, options: Options, diagnostics: Diagnostics, keep=None,
        timeout_s: float = TIMEOUT_S, as_json: bool = False) -> int:
    """`et-convert simulate`: the report on stdout; exit code 0 when every rank finished, else 1."""
    result = simulate(inputs, astra_sim, fmt, options, diagnostics, keep, timeout_s)
    if as_json:
        sys.stdout.write(json.dumps(result.as_dict(), indent=2) + "\n")
    else:
        sys.stdout.write(render(result))
    return 0 if result.ok else 1
