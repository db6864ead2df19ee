"""The fuzzing harness (fuzz/): seeds for every registered format, and its reading of libFuzzer's log.

The fuzzers themselves run with `make fuzz` / `make fuzz-ci` (atheris is not a test dependency).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from conftest import ROOT
from converters.formats import INPUT_NAMES, input_format, resolve


def fuzz_module(name: str):
    """fuzz/NAME.py under the name fuzz_NAME (benchmarks/ has a run.py too)."""
    sys.path.insert(0, str(ROOT / "fuzz"))  # run.py imports seeds
    spec = importlib.util.spec_from_file_location(f"fuzz_{name}", ROOT / "fuzz" / f"{name}.py")
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fuzz_run, seeds = fuzz_module("run"), fuzz_module("seeds")


def test_every_registered_format_gets_seeds_that_reach_past_its_sniffer(tmp_path):
    for fmt in INPUT_NAMES:
        count = seeds.write_seeds(fmt, tmp_path / fmt)
        files = sorted((tmp_path / fmt).iterdir())
        assert count == len(files), fmt
        sniff = resolve(input_format(fmt).sniff)
        assert any(sniff(f.read_bytes()[:1 << 16], f) for f in files), f"{fmt}: no seed looks like {fmt}"


def test_chakra_and_et_json_seeds_are_whole_files_our_writers_made(tmp_path):
    seeds.write_seeds("chakra", tmp_path / "chakra")
    written = [f for f in (tmp_path / "chakra").iterdir() if ".w." in f.name]
    assert len(written) >= 20 and max(f.stat().st_size for f in written) > 16 << 10
    seeds.write_seeds("et-json", tmp_path / "et-json")
    dumps = [f for f in (tmp_path / "et-json").iterdir() if f.read_bytes().startswith(b'{"format":"et-convert.et-json"')]
    assert len(dumps) >= 10


def test_the_malformed_corpus_is_part_of_the_seeds(tmp_path):
    seeds.write_seeds("neusight", tmp_path)
    assert any(f.name.startswith("malformed.neusight-") for f in tmp_path.iterdir())


def test_profiler_traces_are_fuzzed_from_gpu_fixtures_too_and_with_their_options(tmp_path):
    seeds.write_seeds("kineto", tmp_path)
    names = {f.name for f in tmp_path.iterdir()}
    assert {"rank-0.pt.trace.json.gz", "kineto_nccl.rank-0.json", "kineto_nccl_old.rank-0.pt.trace.json.gz.inflated"} <= names
    assert seeds.input_name("kineto") == "rank-0.pt.trace.json.gz"  # a rank in the name, as traces have
    variants = [(o.step, o.merge_compute) for o in seeds.option_variants("kineto")]
    assert variants == [(None, True), (1, True), (None, False)]


def finished(code: int) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", f"raise SystemExit({code})"])
    process.wait()
    return process


def test_a_clean_run_reports_its_edges_and_executions(tmp_path):
    log = tmp_path / "simai.log"
    log.write_text("#2\tINITED cov: 301 ft: 700 corp: 20/1Kb exec/s: 0 rss: 60Mb\n"
                   "#4096\tpulse  cov: 330 ft: 760 corp: 24/1Kb lim: 4096 exec/s: 900 rss: 60Mb\n"
                   "#9000\tDONE   cov: 338 ft: 770 corp: 24/1Kb lim: 4096 exec/s: 900 rss: 60Mb\n")
    r = fuzz_run.result("simai", finished(0), log, 0.0)
    assert (r.edges, r.executions, r.failure) == (338, 9000, "")


def test_a_crash_is_reported_with_the_saved_input(tmp_path):
    log = tmp_path / "chakra.log"
    log.write_text("#500\tNEW    cov: 120 ft: 300 corp: 9/1Kb exec/s: 250 rss: 60Mb\n"
                   "\n=== Uncaught Python exception: ===\nKeyError: 3\n"
                   "==77== ERROR: libFuzzer: deadly signal\n"
                   "artifact_prefix='fuzz/crashes/chakra-'; Test unit written to fuzz/crashes/chakra-crash-ab12\n")
    r = fuzz_run.result("chakra", finished(1), log, 0.0)
    assert (r.edges, r.executions) == (120, 500)
    assert r.failure == "KeyError: 3; input saved as fuzz/crashes/chakra-crash-ab12"
    assert r.row().split()[-1] == "1"


def test_a_timeout_that_does_not_happen_again_is_a_note_not_a_hang(tmp_path):
    pytest.importorskip("atheris")  # the saved input is run again under the fuzzer
    saved = tmp_path / "neusight-timeout-cd34"
    saved.write_bytes(b"not a table\n")  # read at once: an InputError
    log = tmp_path / "neusight.log"
    log.write_text("#70\tpulse  cov: 200 ft: 300 corp: 9/1Kb exec/s: 250 rss: 60Mb\n"
                   f"Test unit written to {tmp_path / 'neusight-slow-unit-ef56'}\n"
                   f"artifact_prefix='x'; Test unit written to {saved}\n"
                   "==9== ERROR: libFuzzer: timeout after 40 seconds\n")
    r = fuzz_run.result("neusight", finished(70), log, 0.0)
    assert r.failure == "" and r.note.startswith("timeout after 40 seconds; input saved as ")
    assert r.row().split()[-1] == "0"


def test_every_option_variant_converts_a_sample():
    """A variant that fails on every sample would only ever fuzz the option check."""
    from converters.diagnostics import Diagnostics

    for fmt in INPUT_NAMES:
        load = resolve(input_format(fmt).load)
        samples = seeds.accepted_samples(fmt)
        for options in seeds.option_variants(fmt):
            converted = 0
            for sample in samples:
                try:
                    converted += bool(load([sample], options, Diagnostics()).ranks)
                except Exception:  # noqa: BLE001 (counted as not converted)
                    pass
            assert converted or not samples, f"{fmt}: no sample converts with {options}"


def test_a_gzip_sample_is_also_a_seed_inflated(tmp_path, monkeypatch):
    import gzip

    plain = (ROOT / "samples" / "chakra_data" / "workload.1.et").read_bytes()
    (tmp_path / "w.1.et.gz").write_bytes(gzip.compress(plain, mtime=0))
    monkeypatch.setattr(seeds, "SAMPLES", tmp_path)
    monkeypatch.setattr(seeds, "written_samples", lambda fmt: {})
    monkeypatch.setattr(seeds, "malformed_inputs", lambda fmt: {})
    assert seeds.write_seeds("chakra", tmp_path / "seeds") == 2
    assert (tmp_path / "seeds" / "w.1.et.gz.inflated").read_bytes() == plain
    assert seeds.input_name("chakra") == "w.1.et.gz"  # the sample's own name: its rank is in it
