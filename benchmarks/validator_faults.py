"""The validator's false-positive and false-negative rates on random jobs with injected faults.

    python benchmarks/validator_faults.py [--seeds 1000] [--via-chakra]

For every seed: a random job of 2-6 ranks (tests/validator_faults.py: groups of 2 or more
members, collectives, sends and receives, compute, dependencies) validated clean, and once per
fault (one collective dropped, one size changed, one receive removed) validated again. A false
negative is a fault without the finding that names it (code, group, rank); a false positive is
any other finding (on a clean job: any finding), except the deadlock a dropped collective causes.
`--via-chakra` validates each job after writing it as a Chakra set and reading it back.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from validator_faults import FAULTS, inject, judge, random_job  # noqa: E402

from converters.diagnostics import Diagnostics  # noqa: E402
from converters.options import Options  # noqa: E402
from converters.readers import chakra as chakra_reader  # noqa: E402
from converters.validate import run_checks  # noqa: E402
from converters.writers import chakra as chakra_writer  # noqa: E402


def via_chakra(trace, directory: Path):
    prefix = directory / f"w{id(trace)}"
    chakra_writer.write(trace, prefix, Options(), Diagnostics())
    return chakra_reader.load(sorted(directory.glob(f"{prefix.name}.*.et")), Options(), Diagnostics())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1000)
    parser.add_argument("--via-chakra", action="store_true")
    args = parser.parse_args()
    trials, missed, extra, codes = Counter(), Counter(), Counter(), Counter()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):
            for fault in ("clean", *FAULTS):
                rng = random.Random(seed)
                trace = random_job(rng)
                expected = None if fault == "clean" else inject(trace, fault, rng)
                if fault != "clean" and expected is None:
                    continue  # nothing of that kind to break in this job
                if args.via_chakra:
                    trace = via_chakra(trace, Path(tmp))
                found, others = judge(run_checks(trace, Options()), expected)
                trials[fault] += 1
                missed[fault] += not found
                extra[fault] += bool(others)
                codes.update(f"{fault}:{f.code}" for f in others)
    print(f"{'job':<16} {'trials':>7} {'false neg.':>11} {'false pos.':>11}")
    for fault in ("clean", *FAULTS):
        n = trials[fault]
        negatives = "—" if fault == "clean" else f"{missed[fault] / n:.1%}"
        print(f"{fault:<16} {n:>7} {negatives:>11} {extra[fault] / n:>10.1%}")
    if codes:
        print("findings beyond the fault:", dict(codes))
    print(f"{args.seeds} seeds{' via Chakra' if args.via_chakra else ''} in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
