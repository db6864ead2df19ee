"""Fuzz one reader with atheris: any exception other than our InputError is a bug.

    python fuzz/fuzz_reader.py FORMAT [atheris/libFuzzer flags, e.g. -max_total_time=600]

The corpus starts from the samples (and their first kilobytes), so mutations stay close to
real inputs. `make fuzz` runs every reader for FUZZ_SECONDS each.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import atheris

with atheris.instrument_imports():
    from converters.diagnostics import Diagnostics, InputError, UsageError
    from converters.formats import input_format, resolve
    from converters.options import Options

ROOT = Path(__file__).resolve().parent.parent
SEEDS = {
    "simai": ["simai_tp8_pp16_1024gpu.txt"],
    "astra-text": ["workloads"],
    "neusight": ["neusight_gpt2_block.tsv"],
    "megatron-log": ["megatron_rank4_pp_tp2.log", "megatron_rank2_moe_scaling.log"],
    "optimus-log": ["optimusprime_llama1b_pp8.log"],
    "chakra": ["chakra_data", "chakra_model"],
    "et-json": [],
    "kineto": ["pytorch_gloo_4rank"],
}
OPTIONS = {"astra-text": Options(num_npus=8), "simai": Options()}


def seed_corpus(fmt: str, corpus: Path) -> None:
    corpus.mkdir(parents=True, exist_ok=True)
    for name in SEEDS.get(fmt, []):
        path = ROOT / "samples" / name
        files = sorted(path.rglob("*")) if path.is_dir() else [path]
        for i, f in enumerate(p for p in files if p.is_file()):
            data = f.read_bytes()
            (corpus / f"{f.name}").write_bytes(data)
            (corpus / f"{f.name}.head").write_bytes(data[:4096])


def main() -> None:
    fmt = sys.argv[1]
    load = resolve(input_format(fmt).load)
    options = OPTIONS.get(fmt, Options())
    suffix = ".et" if fmt == "chakra" else ".txt"
    workdir = Path(tempfile.mkdtemp(prefix="etfuzz."))
    path = workdir / f"input.0{suffix}"

    def one_input(data: bytes) -> None:
        path.write_bytes(data)
        try:
            load([path], options, Diagnostics())
        except (InputError, UsageError):
            pass

    corpus = ROOT / "fuzz" / "corpus" / fmt
    seed_corpus(fmt, corpus)
    atheris.Setup([sys.argv[0], str(corpus), *sys.argv[2:]], one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
