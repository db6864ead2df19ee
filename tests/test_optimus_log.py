"""The OptimusPrime log reader: tokens out of interleaved stdout."""

from __future__ import annotations

from collections import Counter

import pytest

from conftest import SAMPLES
from converters.diagnostics import Diagnostics, InputError
from converters.readers.optimus_log import parse_text, read_log, sniff

SAMPLE = SAMPLES / "optimusprime_llama1b_pp8.log"


@pytest.fixture(scope="module")
def log():
    return read_log(SAMPLE, Diagnostics())


def test_sniff():
    assert sniff(SAMPLE.read_bytes()[:65536], SAMPLE)
    assert not sniff((SAMPLES / "megatron_rank4_pp_tp2.log").read_bytes()[:65536], None)
    assert not sniff((SAMPLES / "simai_tp8_pp16_1024gpu.txt").read_bytes()[:65536], None)


def test_config_and_stage_map(log):
    assert log.config == {"world": 8, "gas": 32, "gbs": 32, "mbs": 1, "tp": 1, "dp": 1, "pp": 8}
    assert log.stage2rank == {s: [s] for s in range(8)}
    assert log.special_nodes["getitem_3"] == (1, 7) and log.special_nodes["submod_0"] == (0, 1)
    assert len(log.special_nodes) == 10
    assert log.batches_per_epoch == 323


def test_fx_graph(log):
    assert len(log.fx) == 34
    assert log.fx["getitem_7"].getitem_of == "submod_1"
    assert log.fx["submod_2"].inputs == ["getitem_6", "getitem_7", "getitem_8", "getitem_3", "getitem_4", "getitem_5"]
    assert log.fx["submod_2"].where == f"{SAMPLE}:68"


def test_every_step_of_every_stage(log):
    assert len(log.steps) == 20 * 8
    assert Counter((s.stage, len(s.layers)) for s in log.steps) == {
        **{(stage, 3): 20 for stage in range(7)}, (7, 4): 20,
    }
    step1_stage7 = next(s for s in log.steps if s.step == 1 and s.stage == 7)
    assert [(l.name, l.total_ns, l.ops) for l in step1_stage7.layers] == [
        ("13", 114_492_000, 32), ("14", 52_016_000, 256), ("15", 36_354_000, 256), ("lm_head", 140_487_000, 32),
    ]
    assert len(log.ms_per_batch) == 20
    assert log.ms_per_batch[1][0] == 7_289_550_000 and log.ms_per_batch[20][0] == 1_581_340_000


def test_interleaved_headers_and_layers_inside_lines(log):
    stage0 = next(s for s in log.steps if s.step == 2 and s.stage == 0)
    stage3 = next(s for s in log.steps if s.step == 2 and s.stage == 3)
    assert stage0.where == stage3.where  # both headers on one line
    assert [(l.name, l.total_ns) for l in stage0.layers] == [("embed", 739_000), ("0", 40_903_000), ("1", 30_691_000)]
    assert [(l.name, l.total_ns) for l in stage3.layers] == [("5", 10_070_000), ("6", 41_273_000), ("7", 29_263_000)]


def header(rank, step):
    return f"[rank:{rank} stage:{rank}] transformer-block(module) forward time (no send/recv) - step {step}"


def layer(name, total):
    return f"  layer[{name}]: total={total}ms, ops=32, avg/op=0.1ms"


def test_interleaving_where_a_header_cuts_into_another_block():
    text = "\n".join([
        header(0, 1), layer("a", "1.0"), layer("b", "2.0"),
        header(1, 1), layer("c", "3.0"), layer("d", "4.0"),
        header(0, 2), layer("a", "5.0"), header(1, 2) + layer("c", "7.0"), layer("b", "6.0") + layer("d", "8.0"),
    ]) + "\n"
    parsed = parse_text(text, "mixed.log", Diagnostics())
    got = {(s.stage, s.step): [(l.name, l.total_ns) for l in s.layers] for s in parsed.steps}
    assert got[(0, 2)] == [("a", 5_000_000), ("b", 6_000_000)]
    assert got[(1, 2)] == [("c", 7_000_000), ("d", 8_000_000)]


def test_layer_without_a_header_is_counted_and_ignored():
    diagnostics = Diagnostics()
    parse_text(layer("a", "1.0") + "\n" + layer("b", "1.0") + "\n", "x.log", diagnostics)
    assert diagnostics.messages() == ["x.log:1: 2 layer line(s) belong to no open step header; ignored"]


def test_bad_stage2rank_names_its_line():
    with pytest.raises(InputError) as caught:
        parse_text("hello\nstage2rank = {0: 'x'}\n", "x.log", Diagnostics())
    assert str(caught.value) == "x.log:2: cannot parse stage2rank: expected a dict like {0: [0], 1: [1]}"


def test_conflicting_config_is_an_error():
    with pytest.raises(InputError) as caught:
        parse_text("> GAS: 32\n> GAS: 16\n", "x.log", Diagnostics())
    assert str(caught.value) == "x.log:2: gas is 16 here but 32 at x.log:1"
