"""How close et-convert's scheduled iteration times are to ASTRA-sim's on whole workloads.

    python benchmarks/fidelity.py                   # every workload, both ASTRA-sim builds
    python benchmarks/fidelity.py --only tp4 --builds head
    ASTRA_SIM=/path/to/astra-sim python benchmarks/fidelity.py

Each workload is converted to Chakra with et-convert, the Chakra set is read back and scheduled
with `samples/network_astra_ring8.toml` (what `et-convert stats` prints), and ASTRA-sim's
analytical congestion-unaware backend runs the same files on its defaults (ring of all ranks,
50 GB/s, 500 ns, 4 chunks, LIFO, endpoint delay 10 ns; `../shared/astra-sim/run`). The table
gives both iteration times (the last rank's finish, ns) and our error. Without the simulator
the script prints our times only and says so.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from converters.api import read, write  # noqa: E402
from converters.diagnostics import Diagnostics  # noqa: E402
from converters.model import ExecutionTrace  # noqa: E402
from converters.options import Options  # noqa: E402
from converters.scheduler import schedule  # noqa: E402

NETWORK = ROOT / "samples" / "network_astra_ring8.toml"
ASTRA_SIM = Path(os.environ.get("ASTRA_SIM", ROOT.parent / "shared" / "astra-sim"))
BUILDS = ("legacy", "head")


@dataclass
class Workload:
    name: str
    ranks: int
    make: Callable[[Path], ExecutionTrace]  # folder for scratch input files -> the model
    what: str


def _text(name: str, fmt: str, body: str, **options) -> Callable[[Path], ExecutionTrace]:
    def make(folder: Path) -> ExecutionTrace:
        path = folder / f"{name}.txt"
        path.write_text(body)
        return read(path, fmt, diagnostics=Diagnostics(), **options)
    return make


WORKLOADS_DIR = ROOT / "samples" / "workloads"


def _sample(name: str, fmt: str, **options) -> Callable[[Path], ExecutionTrace]:
    return lambda folder: read(WORKLOADS_DIR / name, fmt, diagnostics=Diagnostics(), **options)


def _simai(tp: int, ep: int, pp: int, gpus: int, ga: int, rows: list[str], recompute: str = "") -> str:
    header = (f"HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: {tp} ep: {ep} pp: {pp} ga: {ga} "
              f"all_gpus: {gpus} checkpoints: 0 checkpoint_initiates: 0{recompute}")
    return "\n".join([header, str(len(rows))] + rows) + "\n"


def _row(name: str, fwd: int, fwd_comm: str, fwd_size: int, ig: int, ig_comm: str, ig_size: int,
         wg: int, wg_comm: str, wg_size: int) -> str:
    return "\t".join(str(v) for v in (name, -1, fwd, fwd_comm, fwd_size, ig, ig_comm, ig_size, wg, wg_comm, wg_size, 100))


_GRAD_ROWS = [
    _row("grad_gather", 1, "NONE", 0, 1, "NONE", 0, 1, "ALLGATHER", 1 << 20),
    _row("grad_param_comm", 1, "NONE", 0, 1, "NONE", 0, 1, "REDUCESCATTER", 2 << 20),
    _row("grad_param_compute", 1, "NONE", 0, 40_000, "NONE", 0, 1, "NONE", 0),
]
_DENSE_BLOCK = [
    _row("embedding_layer", 20_000, "ALLREDUCE", 1 << 18, 1, "NONE", 0, 15_000, "NONE", 0),
    _row("attention_column", 30_000, "ALLGATHER", 1 << 18, 15_000, "REDUCESCATTER", 1 << 18, 15_000, "NONE", 0),
    _row("attention_row", 30_000, "REDUCESCATTER", 1 << 18, 15_000, "ALLGATHER", 1 << 18, 15_000, "NONE", 0),
    _row("mlp_column", 40_000, "ALLGATHER", 1 << 19, 20_000, "REDUCESCATTER", 1 << 19, 20_000, "NONE", 0),
    _row("mlp_row", 40_000, "REDUCESCATTER", 1 << 19, 20_000, "ALLGATHER", 1 << 19, 20_000, "NONE", 0),
    _row("final_column", 25_000, "ALLGATHER", 1 << 18, 12_000, "NONE", 0, 12_000, "NONE", 0),
]
_MOE_BLOCK = [
    _row("embedding_layer", 20_000, "ALLREDUCE", 1 << 18, 1, "NONE", 0, 15_000, "NONE", 0),
    _row("attention_column", 30_000, "ALLGATHER", 1 << 18, 15_000, "REDUCESCATTER", 1 << 18, 15_000, "NONE", 0),
    _row("moe_route", 10_000, "ALLTOALL_EP", 1 << 19, 10_000, "ALLTOALL_EP", 1 << 19, 10_000, "NONE", 0),
    _row("moe_expert", 40_000, "NONE", 0, 20_000, "NONE", 0, 20_000, "NONE", 0),
    _row("moe_combine", 10_000, "ALLTOALL_EP", 1 << 19, 10_000, "ALLTOALL_EP", 1 << 19, 10_000, "NONE", 0),
    _row("final_column", 25_000, "ALLGATHER", 1 << 18, 12_000, "NONE", 0, 12_000, "NONE", 0),
]
_MOE_GRADS = [
    _row("moe_grad_norm1", 1, "NONE", 0, 1, "NONE", 0, 1, "ALLGATHER_DP_EP", 1 << 16),
    _row("moe_grad_norm2", 1, "NONE", 0, 1, "NONE", 0, 1, "REDUCESCATTER_DP_EP", 1 << 17),
]
_EPILOGUE = [_row("cross_entropy1", 0, "ALLREDUCE", 1024, 0, "NONE", 0, 0, "NONE", 0)]


def _dense(tp: int, pp: int, gpus: int, ga: int) -> str:
    return _simai(tp, 1, pp, gpus, ga, _GRAD_ROWS + _DENSE_BLOCK * ga + _EPILOGUE)


def _moe(tp: int, ep: int, pp: int, gpus: int, ga: int) -> str:
    return _simai(tp, ep, pp, gpus, ga, _GRAD_ROWS + _MOE_GRADS + _MOE_BLOCK * ga + _EPILOGUE)


def _all_to_all(members: int, ranks: int) -> str:
    rows = [_row("route", 5_000, "ALLTOALL_EP", 1 << 20, 5_000, "ALLTOALL_EP", 1 << 20, 5_000, "NONE", 0)] * 2
    return _simai(1, members, 1, ranks, 1, rows)


WORKLOADS = [
    Workload("astra_data", 8, _sample("astra_data.txt", "astra-text", num_npus=8), "DATA, 8 ranks"),
    Workload("astra_model", 8, _sample("astra_model.txt", "astra-text", num_npus=8), "MODEL, 8 ranks"),
    Workload("astra_hybrid_dm", 8, _sample("astra_hybrid_data_model.txt", "astra-text", num_npus=8),
             "HYBRID_DATA_MODEL, TP 2"),
    Workload("transformer_tp4_16", 16, _sample("astra_transformer.txt", "astra-text", num_npus=16),
             "HYBRID_TRANSFORMER, TP 4, 16 ranks, all-gather/reduce-scatter"),
    Workload("recompute_tp4_8", 8, _sample("astra_transformer_recompute.txt", "astra-text", num_npus=8),
             "HYBRID_TRANSFORMER_FWD_IN_BCKWD, TP 4, 8 ranks"),
    Workload("simai_tp4_dp2", 8, _text("simai_tp4_dp2", "simai", _dense(4, 1, 8, 2)), "SimAI, TP 4 DP 2"),
    Workload("simai_tp2_pp4", 16, _text("simai_tp2_pp4", "simai", _dense(2, 4, 16, 4)), "SimAI, TP 2 PP 4 DP 2, 1F1B"),
    Workload("simai_moe_tp2_ep4_pp2", 32, _text("simai_moe", "simai", _moe(2, 4, 2, 32, 2)),
             "SimAI MoE, TP 2 EP 4 PP 2"),
    Workload("alltoall_ep2", 8, _text("a2a_2", "simai", _all_to_all(2, 8)), "all-to-all in groups of 2"),
    Workload("alltoall_ep4", 16, _text("a2a_4", "simai", _all_to_all(4, 16)), "all-to-all in groups of 4"),
    Workload("simai_tp3_dp4", 12, _text("simai_tp3_dp4", "simai", _dense(3, 1, 12, 2)), "SimAI, TP 3 DP 4 (uneven ring hops)"),
    Workload("simai_moe_tp1_ep8_pp2", 32, _text("simai_moe8", "simai", _moe(1, 8, 2, 32, 2)),
             "SimAI MoE, EP 8 PP 2"),
    Workload("alltoall_ep8", 32, _text("a2a_8", "simai", _all_to_all(8, 32)), "all-to-all in groups of 8"),
    Workload("alltoall_ep16", 16, _text("a2a_16", "simai", _all_to_all(16, 16)), "all-to-all in one group of 16"),
]


def run_astra_sim(build: str, prefix: Path, ranks: int, groups: Path | None) -> dict[int, int] | None:
    """Per-rank finish times (ns) from ASTRA-sim's `run` script, or None when a rank stalled."""
    args = [str(ASTRA_SIM / "run"), build, str(prefix), str(ranks)]
    if groups is not None and groups.exists():
        args.append(str(groups))
    done = subprocess.run(args, capture_output=True, text=True, timeout=900)
    if not done.stdout.startswith("OK"):
        print(f"  {build}: {done.stdout.strip().splitlines()[0] if done.stdout.strip() else done.stderr[-300:]}",
              file=sys.stderr)
        return None
    return {int(r): int(c) for r, c in re.findall(r"rank (\d+) cycles (\d+)", done.stderr)}


def ours(prefix: Path) -> dict[int, int]:
    """Per-rank finish times of the Chakra set as `et-convert stats --network` computes them."""
    trace = read(sorted(prefix.parent.glob(prefix.name + ".*.et")), "chakra", diagnostics=Diagnostics())
    summary = schedule(trace, Options(network=NETWORK)).summary
    return {int(r): row["finish_ns"] for r, row in summary["ranks"].items()}


def compare(workload: Workload, builds: tuple[str, ...], folder: Path) -> dict:
    trace = workload.make(folder)
    prefix = folder / workload.name / "w"
    prefix.parent.mkdir()
    write(trace, prefix, to="chakra", diagnostics=Diagnostics())
    row = {"ours": max(ours(prefix).values())}
    groups = prefix.parent / "w.comm_group.json"
    for build in builds:
        theirs = run_astra_sim(build, prefix, workload.ranks, groups)
        row[build] = max(theirs.values()) if theirs else None
    return row


def simulator_present() -> bool:
    return (ASTRA_SIM / "run").exists() and all((ASTRA_SIM / b / "AstraSim_Analytical_Congestion_Unaware").exists()
                                                for b in BUILDS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated substrings of workload names")
    parser.add_argument("--builds", default=",".join(BUILDS))
    args = parser.parse_args()
    builds = tuple(b for b in args.builds.split(",") if b) if simulator_present() else ()
    if not builds:
        print(f"ASTRA-sim not found at {ASTRA_SIM} (set ASTRA_SIM): printing et-convert's times only")
    chosen = [w for w in WORKLOADS if not args.only or any(s in w.name for s in args.only.split(","))]
    header = f"{'workload':<26}{'ranks':>6}{'et-convert ns':>15}" + "".join(f"{b + ' ns':>14}{'error':>9}" for b in builds)
    print(header)
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for workload in chosen:
            row = compare(workload, builds, Path(tmp))
            line = f"{workload.name:<26}{workload.ranks:>6}{row['ours']:>15,}"
            for build in builds:
                theirs = row[build]
                if theirs is None:
                    line += f"{'stalled':>14}{'':>9}"
                    continue
                error = (row["ours"] - theirs) / theirs
                worst = max(worst, abs(error))
                line += f"{theirs:>14,}{error:>+9.2%}"
            print(line, flush=True)
    if builds:
        print(f"largest error {worst:.2%}")


if __name__ == "__main__":
    main()
