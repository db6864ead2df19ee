"""Clean conversions of every sample validate without errors or warnings (the mutation suite's baseline)."""

from __future__ import annotations

import pytest

import converters as etc
from converters.diagnostics import Diagnostics
from converters.options import Options
from converters.validate import gate, run_checks

from conftest import SAMPLES

SAMPLE_FORMATS = {
    "neusight_gpt2_block.tsv": "neusight",
    "optimusprime_llama1b_pp8.log": "optimus-log",
    "megatron_rank4_pp_tp2.log": "megatron-log",
    "megatron_rank2_moe_scaling.log": "megatron-log",
    "simai_tp8_pp16_1024gpu.txt": "simai",
}
PARTIAL = {"megatron_rank4_pp_tp2.log", "megatron_rank2_moe_scaling.log"}  # one rank of a bigger job


@pytest.mark.parametrize("sample", sorted(SAMPLE_FORMATS))
def test_sample_models_are_clean(sample):
    trace = etc.read(SAMPLES / sample, fmt=SAMPLE_FORMATS[sample])
    findings = run_checks(trace)
    assert [f.code for f in findings] == (["I024"] if sample in PARTIAL else []), [f.text() for f in findings]
    diagnostics = Diagnostics()
    gate(trace, Options(), diagnostics)  # does not refuse
    warned = diagnostics.messages()
    if sample in PARTIAL:
        assert len(warned) == 1 and "writing a Chakra set of rank " in warned[0]
    else:
        assert warned == []


@pytest.mark.parametrize("sample", sorted(set(SAMPLE_FORMATS) - {"simai_tp8_pp16_1024gpu.txt"}))
def test_sample_chakra_sets_read_back_clean(sample, tmp_path):
    etc.convert(SAMPLES / sample, tmp_path / "w", to="chakra", fmt=SAMPLE_FORMATS[sample])
    findings = run_checks(etc.read(tmp_path, fmt="chakra"))
    assert [f.code for f in findings] == (["W025"] if sample in PARTIAL else []), [f.text() for f in findings]
