"""Record real ASTRA-sim transcripts for tests/test_simulate.py (run by hand where the builds are).

    .venv/bin/python tests/astra_sim/record.py [../shared/astra-sim]

For every case: build its Chakra set (`make_set`), run `et-convert simulate --keep` with the
build, and keep the simulator's transcript (`transcripts/<case>.log`) and its exit status
(`manifest.json`). The head build's heap corruption is random, so its cases are run until the
wanted outcome shows (at most ATTEMPTS times). `standin.py` replays these transcripts.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))

from test_workload import small_simai  # noqa: E402

NETWORK = ROOT / "samples" / "network_astra_ring8.toml"
ATTEMPTS = 40
# case -> (build, set, wanted outcome: the verdict of `et-convert simulate --json`)
CASES = {
    "head_simai8_finished": ("head", "simai8", "finished"),
    "head_simai8_crash_at_exit": ("head", "simai8", "crashed at exit"),
    "head_simai8_crash_midway": ("head", "simai8", "crashed"),
    "legacy_simai8_finished": ("legacy", "simai8", "finished"),
    "legacy_data4_stall": ("legacy", "data4_stall", "stuck"),
    "head_data4_stall": ("head", "data4_stall", "stuck"),
    "legacy_chakra_data_finished": ("legacy", "chakra_data", "finished"),  # the examples of `simulate --help`
}
BINARY = "AstraSim_Analytical_Congestion_Unaware"


def convert(source: Path, prefix: Path, *options: str) -> None:
    command = [sys.executable, "-m", "converters.cli", str(source), "--to", "chakra", "-o", str(prefix), "-q", *options]
    subprocess.run(command, check=True, cwd=ROOT)


def make_set(name: str, where: Path) -> Path:
    """The Chakra set of case set `name` under `where`; returns its directory."""
    out = where / name
    if name == "simai8":  # TP 2, PP 2, DP 2, two microbatches: several groups, sends and receives
        table = where / "simai8.txt"
        table.write_text(small_simai(tp=2, pp=2, gpus=8, ga=2))
        convert(table, out / "w")
    elif name == "data4_stall":  # rank 3's last all-reduce (fc2) is twice as big as ranks 0-2's: all stall
        data = ROOT / "samples" / "workloads" / "astra_data.txt"
        other = where / "data_other_sizes.txt"
        other.write_text(data.read_text().replace("ALLREDUCE\t65536", "ALLREDUCE\t131072"))
        convert(data, out / "w", "--num-npus", "4")
        convert(other, where / "other" / "w", "--num-npus", "4")
        shutil.copyfile(where / "other" / "w.3.et", out / "w.3.et")
    elif name == "chakra_data":  # the sample set (chakra_converter's, 4 ranks)
        shutil.copytree(ROOT / "samples" / "chakra_data", out)
    else:
        raise KeyError(name)
    return out


def record(builds: Path) -> None:
    manifest = {}
    (HERE / "transcripts").mkdir(exist_ok=True)
    for case, (build, set_name, wanted) in CASES.items():
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            chakra = make_set(set_name, tmp)
            for attempt in range(1, ATTEMPTS + 1):
                keep = tmp / f"keep{attempt}"
                done = subprocess.run(
                    [sys.executable, "-m", "converters.cli", "simulate", str(chakra), "--astra-sim",
                     str(builds / build / BINARY), "--network", str(NETWORK), "--keep", str(keep), "--json", "-q"],
                    capture_output=True, text=True, cwd=ROOT)
                report = json.loads(done.stdout)
                if report["verdict"] == wanted:
                    break
            else:
                raise SystemExit(f"{case}: no {wanted!r} run in {ATTEMPTS} attempts")
            shutil.copyfile(keep / "astra-sim.log", HERE / "transcripts" / f"{case}.log")
            manifest[case] = {"build": build, "set": set_name, "exit_status": report["exit_status"],
                              "verdict": wanted, "attempts": attempt}
            print(case, report["verdict"], report["exit_status"], f"attempt {attempt}")
    (HERE / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")


if __name__ == "__main__":
    record(Path(sys.argv[1] if len(sys.argv) > 1 else ROOT.parent / "shared" / "astra-sim").resolve())
