"""Bad SimAI / ASTRA-sim text workloads: one InputError naming file:line, never a silent default."""

from __future__ import annotations

import pytest

from conftest import SAMPLES, run_cli
from converters.diagnostics import Diagnostics, InputError
from converters.readers.workload_text import parse, sniff_astra, sniff_simai
from test_workload import WORKLOADS, load, small_simai

ROW = "l0\t-1\t100\tALLREDUCE\t1024\t90\tALLREDUCE\t1024\t80\tALLREDUCE\t4096\t5"


def astra(tmp_path, text: str):
    path = tmp_path / "w.txt"
    path.write_text(text)
    with pytest.raises(InputError) as e:
        load("astra-text", path, num_npus=8)
    return str(e.value).removeprefix(f"{path}")


def simai(tmp_path, text: str, **options):
    path = tmp_path / "w.txt"
    path.write_text(text)
    with pytest.raises(InputError) as e:
        load("simai", path, **options)
    return str(e.value).removeprefix(f"{path}")


def test_sniffers_tell_the_dialects_apart():
    simai_head = (SAMPLES / "simai_tp8_pp16_1024gpu.txt").read_bytes()
    astra_head = (WORKLOADS / "astra_data.txt").read_bytes()
    assert sniff_simai(simai_head, None) and not sniff_astra(simai_head, None)
    assert sniff_astra(astra_head, None) and not sniff_simai(astra_head, None)
    assert not sniff_astra(b"FOO\n3\n", None) and not sniff_astra(b"DATA\nthree\n", None)


@pytest.mark.parametrize("text, message", [
    ("DATA\n1\nl0\t-1\t1\tNONE\t0\n",
     ":3: expected 12 columns (name, reserved, fwd_compute, fwd_comm_type, ...), found 5"),
    (f"DATA\n1\n{ROW.replace('ALLREDUCE', 'ALLREDUC', 1)}\n",
     ":3: fwd_comm_type: unknown comm type 'ALLREDUC'; expected ALLREDUCE, ALLGATHER, REDUCESCATTER, ALLTOALL or NONE"),
    (f"DATA\n3\n{ROW}\n{ROW}\n", ":4: the file ends after 2 of the 3 rows line 2 announces (truncated?)"),
    (f"DATA\n0\n{ROW}\n", ":2: the workload has no rows"),
    (f"DATA\n1\n{ROW.replace('100', '-100', 1)}\n", ":3: fwd_compute: expected a whole number >= 0, found '-100'"),
    (f"DATA\n1\n{ROW.replace('100', 'nan', 1)}\n", ":3: fwd_compute: expected a whole number >= 0, found 'nan'"),
    (f"DATA\n1\n{ROW.replace('4096', '4096.5')}\n", ":3: wg_comm_size: expected a whole number >= 0, found '4096.5'"),
    (f"DATA\nmany\n{ROW}\n", ":2: expected the row count (one whole number), found 'many'"),
    (f"DATTA\n1\n{ROW}\n", ":1: unknown policy 'DATTA'; expected one of MICRO, DATA, MODEL, HYBRID_DATA_MODEL, "
                           "HYBRID_MODEL_DATA, HYBRID_TRANSFORMER, HYBRID_TRANSFORMER_FWD_IN_BCKWD, HYBRID_DLRM, "
                           "HYBRID_DLRM_ENHANCED, HYBRID_CUSTOMIZED, DISTRIBUTED_INFERENCE"),
    (f"HYBRID_TRANSFORMER model_parallel_NPU_group: two\n1\n{ROW}\n",
     ":1: model_parallel_NPU_group: expected a whole number >= 0, found 'two'"),
    (f"HYBRID_TRANSFORMER model_parallel_NPU_group: 3\n1\n{ROW}\n",
     ":1: model-parallel group size 3 does not divide --num-npus 8"),
    (f"HYBRID_TRANSFORMER 4\n1\n{ROW}\n",
     ":1: expected a header key such as 'model_parallel_NPU_group:', found '4'"),
    (f"DATA\n1\n{ROW.replace('ALLREDUCE', 'ALLTOALL_EP', 1)}\n",
     ":3: fwd_comm_type: 'ALLTOALL_EP' is a SimAI comm type; ASTRA-sim 1.0 knows only ALLREDUCE, ALLGATHER, "
     "REDUCESCATTER, ALLTOALL and NONE (give --from simai if this is a SimAI file)"),
    (f"DATA\n1\n{ROW.replace('ALLREDUCE', 'ALLREDUCEALLTOALL', 1)}\n",
     ":3: fwd_comm_type: ALLREDUCEALLTOALL is parsed by ASTRA-sim 1.0 but it cannot run it; use ALLREDUCE or ALLTOALL"),
    (f"HYBRID_CUSTOMIZED model_parallel_NPU_group: 2\n1\n{ROW}\tPIPELINE\n",
     ":3: policy (column 13, after update_delay): unknown row policy 'PIPELINE'; expected one of DATA, MODEL, "
     "HYBRID_DATA_MODEL, HYBRID_MODEL_DATA, HYBRID_TRANSFORMER"),
    # the way round et-convert once wrote it: the simulators would read DATA as `reserved`
    (f"HYBRID_CUSTOMIZED model_parallel_NPU_group: 2\n1\nl0\tDATA\t{ROW[3:]}\n",
     ":3: row policy 'DATA' is in column 2 (reserved); ASTRA-sim 1.0 and SimAI read it from column 13, after "
     "update_delay: move it to the end of the row"),
    (f"HYBRID_CUSTOMIZED model_parallel_NPU_group: 2\n1\n{ROW}\n",
     ":3: expected 13 columns (name, reserved, fwd_compute, ..., update_delay, policy), found 12"),
    (f"HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 checkpoints: 1 0 checkpoint_initiates: 1 7\n1\n{ROW}\n",
     ":1: checkpoint row 7 is past the last row (0)"),
    (f"HYBRID_DLRM\n1\n{ROW}\n", ":1: HYBRID_DLRM needs the last bottom-MLP row: 'DLRM_LAST_BOTTOM_LAYER: N'"),
    ("DATA\n", ":1: expected the row count on the next line, found the end of the file"),
])
def test_astra_text_errors(tmp_path, text, message):
    assert astra(tmp_path, text) == message


def test_more_rows_than_announced_convert_the_announced_ones_with_a_warning(tmp_path):
    """ASTRA-sim 1.0 and SimAI read as many rows as line 2 announces and never look further."""
    path = tmp_path / "w.txt"
    path.write_text(f"DATA\n1\n{ROW}\n\n{ROW.replace('l0', 'l1')}\nnot a row at all\n")
    diagnostics = Diagnostics()
    workload = parse(path, "astra", diagnostics)
    assert [row.name for row in workload.rows] == ["l0"]
    assert diagnostics.messages() == [
        f"{path}:5: line 2 announces 1 rows, found 3; converted the first 1 and ignored the rest, as the simulators do"]
    trace, _ = load("astra-text", path, num_npus=2)
    assert len(trace.ranks) == 2


def test_non_utf8_bytes_are_an_error_at_their_line(tmp_path):
    path = tmp_path / "w.txt"
    path.write_bytes(b"DATA\n1\nl\xff0\t-1\n")
    with pytest.raises(InputError) as e:
        load("astra-text", path, num_npus=2)
    assert str(e.value) == f"{path}:3:2: not UTF-8 text (byte 0xff)"


def test_simai_header_and_block_errors(tmp_path):
    good = small_simai(tp=2, pp=2, gpus=8, ga=2)
    assert simai(tmp_path, good.replace("all_gpus: 8", "all_gpus: 10")) == ":1: all_gpus 10 is not a multiple of tp*pp = 4"
    assert simai(tmp_path, good.replace("pp: 2", "pp: 0")) == ":1: pp must be at least 1, got 0"
    assert simai(tmp_path, good.replace("ga: 2", "ga: 5")) == (
        ":7: the 12 rows from line 7 to 18 do not split into ga=5 equal microbatch blocks")
    assert simai(tmp_path, good.replace("ga: 2", "ga: 4")) == (
        ":10: microbatch blocks differ: expected row 'embedding_layer' (as at line 7), found 'attention_column'")
    assert simai(tmp_path, good.replace("all_gpus: 8", "all_gpus: 8 pp_comm: lots")) == (
        ":1: pp_comm: expected a whole number of bytes, found 'lots'")
    assert simai(tmp_path, good.replace("ep: 1", "ep: 3")) == ":1: ep 3 does not divide dp 2"
    renamed = good.replace("attention_row", "attention_rowX", 3)  # both of block 0's, one of block 1's
    assert simai(tmp_path, renamed) == (
        ":17: microbatch blocks differ: expected row 'attention_rowX' (as at line 11), found 'attention_row'")


def test_simai_without_all_gpus_needs_num_npus(tmp_path):
    text = small_simai(tp=2, pp=2, gpus=8, ga=2).replace(" all_gpus: 8", "")
    assert simai(tmp_path, text) == ":1: the header has no all_gpus: give --num-npus"
    path = tmp_path / "w.txt"
    trace, _ = load("simai", path, num_npus=8)
    assert len(trace.ranks) == 8


def test_unknown_header_key_is_a_warning_like_the_simulators_skip_it(tmp_path):
    path = tmp_path / "w.txt"
    path.write_text(small_simai(tp=2, pp=1, gpus=2, ga=1, extra=" flavour: 3"))
    _, diagnostics = load("simai", path)
    assert f"{path}:1: ignored unknown header key 'flavour:'" in diagnostics.messages()


def test_cli_prints_one_line_and_exits_2(tmp_path):
    path = tmp_path / "w.txt"
    path.write_text("DATA\n1\nl0\t-1\t1\tNONE\t0\n")
    result = run_cli(path, "--from", "astra-text", "--num-npus", "4", "-o", tmp_path / "o.json")
    assert result.code == 2
    assert result.stderr == (f"et-convert: error: {path}:3: expected 12 columns (name, reserved, fwd_compute, "
                             "fwd_comm_type, ...), found 5\n")
    assert not (tmp_path / "o.json").exists()


def test_cli_asks_for_num_npus(tmp_path):
    result = run_cli(WORKLOADS / "astra_data.txt", "-o", tmp_path / "o.json")
    assert result.code == 2
    assert result.stderr.strip().endswith("ASTRA-sim text workloads carry no rank count: give --num-npus N")
