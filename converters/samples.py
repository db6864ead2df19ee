"""`make run`: convert every sample in samples/ the way a user would, into one output folder.

    python -m converters.samples out/

Each line printed is the CLI command that does the same job, so users can copy it.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from pathlib import Path

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
# Multi-rank Megatron log sets and the layout options they are converted with.
MEGATRON_SETS = {
    "megatron_tp1_pp2_dp2": ["--tp", "1", "--pp", "2"],
    "megatron_tp2_pp2_dp1": ["--tp", "2", "--pp", "2"],
    "megatron_tp1_pp4_dp1": ["--tp", "1", "--pp", "4"],
}


def jobs(out: Path) -> list[list[str]]:
    """The conversions, as CLI argument lists (without the program name)."""
    s = SAMPLES
    jobs = [
        [str(s / "simai_tp8_pp16_1024gpu.txt"), "-o", str(out / "simai_tp8_pp16_1024gpu.json")],
        [str(s / "simai_tp8_pp16_1024gpu.txt"), "--to", "chakra", "-o", str(out / "simai" / "workload")],
        ["validate", str(out / "simai")],
        [str(s / "neusight_gpt2_block.tsv"), "--dp", "8", "-o", str(out / "neusight_gpt2_block.json")],
        [str(s / "neusight_gpt2_block.tsv"), "--dp", "8", "--to", "chakra", "-o", str(out / "neusight" / "workload")],
        [str(s / "megatron_rank4_pp_tp2.log"), "-o", str(out / "megatron_rank4_pp_tp2.json")],
        [str(s / "megatron_rank4_pp_tp2.log"), "--to", "chakra", "-o", str(out / "megatron_rank4" / "workload")],
        [str(s / "megatron_rank2_moe_scaling.log"), "-o", str(out / "megatron_rank2_moe_scaling.json")],
        [str(s / "optimusprime_llama1b_pp8.log"), "-o", str(out / "optimusprime_llama1b_pp8.json")],
        [str(s / "optimusprime_llama1b_pp8.log"), "--to", "chakra", "-o", str(out / "optimus" / "workload")],
        [str(s / "pytorch_gloo_4rank"), "-o", str(out / "pytorch_gloo_4rank.json")],
        [str(s / "pytorch_gloo_4rank"), "--to", "chakra", "-o", str(out / "pytorch_gloo" / "workload")],
        ["validate", str(s / "pytorch_gloo_4rank")],
    ]
    for log_set, layout in MEGATRON_SETS.items():  # multi-rank runs with TP 1 or DP 1
        jobs.append([str(s / log_set), *layout, "-o", str(out / f"{log_set}.json")])
        jobs.append([str(s / log_set), *layout, "--to", "chakra", "-o", str(out / log_set / "workload")])
    jobs += [  # one HTML page per run: a scheduled 1024-rank job and a measured Megatron log
        ["report", str(s / "simai_tp8_pp16_1024gpu.txt"), "-o", str(out / "simai_tp8_pp16_1024gpu.report.html")],
        ["report", str(s / "megatron_tp2_pp2_dp1"), *MEGATRON_SETS["megatron_tp2_pp2_dp1"],
         "-o", str(out / "megatron_tp2_pp2_dp1.report.html")],
    ]
    for workload in sorted((s / "workloads").glob("astra_*.txt")):
        jobs.append([str(workload), "--num-npus", "8", "-o", str(out / "workloads" / f"{workload.stem}.json")])
    for chakra_set in sorted(p for p in s.glob("chakra_*") if p.is_dir()):
        jobs.append([str(chakra_set), "-o", str(out / f"{chakra_set.name}.json")])
        jobs.append([str(chakra_set), "--to", "et-json", "-o", str(out / f"{chakra_set.name}.et.json")])
    return jobs


def main(argv: list[str]) -> int:
    out = Path(argv[0] if argv else "out")
    out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for args in jobs(out):
        shown = "et-convert " + " ".join(shlex.quote(_short(a)) for a in args)
        began = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "converters.cli", *args])
        seconds = time.perf_counter() - began
        status = "ok" if done.returncode == 0 else f"FAILED (exit {done.returncode})"
        print(f"{status:>4}  {seconds:5.2f} s  {shown}", flush=True)
        failed += done.returncode != 0
    print(f"\n{len(jobs(out)) - failed} of {len(jobs(out))} jobs done; outputs in {out}/ (open the .json files in https://ui.perfetto.dev)")
    return 1 if failed else 0


def _short(arg: str) -> str:
    try:
        return str(Path(arg).resolve().relative_to(Path.cwd()))
    except ValueError:
        return arg


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
