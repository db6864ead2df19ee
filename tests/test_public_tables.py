"""Public workload files as their generators write them (issue 14): HYBRID_CUSTOMIZED rows with
their policy last, AICB's BROADCAST rows, truncated tables, ASTRA-sim's row-0 reading."""

from __future__ import annotations

from conftest import run_cli
from converters.model import CollType, NodeKind
from test_workload import WORKLOADS, check_model, load, small_simai

ROW = "l0\t-1\t100\tALLREDUCE\t1024\t90\tALLREDUCE\t1024\t80\tALLREDUCE\t4096\t5"
BROADCAST_SENTENCE = (
    "BROADCAST collectives are converted as no collective, as SimAI and ASTRA-sim 1.0 read them (an unknown "
    "keyword to both); their rows' compute times are kept (--keep-broadcast writes them as Chakra BROADCAST nodes).")


def broadcast_simai(tmp_path, ga: int = 2):
    """An AICB-shaped file whose embedding rows broadcast in the forward column (as AICB's norm rows do);
    the broadcasts are at lines 7 and 13 with ga 2."""
    text = small_simai(tp=2, pp=1, gpus=4, ga=ga).replace(
        "embedding_layer\t-1\t2000\tALLREDUCE\t65536", "embedding_layer\t-1\t2000\tBROADCAST\t16384")
    path = tmp_path / "w.txt"
    path.write_text(text)
    return path


def collectives(trace, rank: int, coll: CollType | None = None) -> list:
    return [n for n in trace.ranks[rank].nodes
            if n.kind == NodeKind.COLLECTIVE and (coll is None or n.coll == coll)]


# ---------------------------------------------------------------- HYBRID_CUSTOMIZED


def test_customized_reads_each_rows_policy_after_the_update_delay(tmp_path):
    """ASTRA-sim 1.0's own layout: `name -1 fwd ... wg_size update POLICY`."""
    path = tmp_path / "w.txt"
    path.write_text("HYBRID_CUSTOMIZED model_parallel_NPU_group: 2\n2\n"
                    f"{ROW}\tMODEL\n{ROW.replace('l0', 'l1')}\tDATA\n")
    trace, diagnostics = load("astra-text", path, num_npus=4)
    names = [n.name for n in collectives(trace, 0)]
    assert "l0 fwd ALLREDUCE" in names and "l1 wg ALLREDUCE" in names  # MODEL row: fwd; DATA row: wg
    assert not any(n.startswith(("l0 wg", "l1 fwd")) for n in names)
    assert [m.removeprefix(f"{path}: ") for m in diagnostics.messages()] == [
        "MODEL issues no wg collectives; ignored 1 (first at line 3)",
        "DATA issues no fwd collectives; ignored 1 (first at line 4)",
        "DATA issues no ig collectives; ignored 1 (first at line 4)"]


def test_the_sample_is_written_the_way_the_simulators_read_it():
    rows = (WORKLOADS / "astra_customized.txt").read_text().splitlines()[2:]
    assert [row.split("\t")[-1] for row in rows] == ["DATA", "HYBRID_DATA_MODEL", "MODEL"]
    assert all(row.split("\t")[1] == "-1" for row in rows)


def test_a_policy_in_the_second_column_names_the_column(tmp_path):
    path = tmp_path / "w.txt"
    path.write_text(f"HYBRID_CUSTOMIZED model_parallel_NPU_group: 2\n1\nl0\tMODEL\t{ROW[3:]}\n")
    result = run_cli(path, "--num-npus", "4", "-o", tmp_path / "o.json")
    assert (result.code, result.stderr) == (
        2, f"et-convert: error: {path}:3: row policy 'MODEL' is in column 2 (reserved); ASTRA-sim 1.0 and SimAI "
           "read it from column 13, after update_delay: move it to the end of the row\n")
    assert not (tmp_path / "o.json").exists()


# ---------------------------------------------------------------- BROADCAST


def test_broadcast_rows_are_no_collective_with_one_counted_warning(tmp_path):
    path = broadcast_simai(tmp_path)
    trace, diagnostics = load("simai", path)
    check_model(trace)
    broadcast = [m for m in diagnostics.messages() if "BROADCAST" in m]
    assert broadcast == [f"{path}: converted 2 BROADCAST collectives as no collective, as SimAI and ASTRA-sim 1.0 "
                         "do; --keep-broadcast keeps them (first at line 7)"]
    assert BROADCAST_SENTENCE in trace.assumptions
    assert collectives(trace, 0, CollType.BROADCAST) == []
    names = [n.name for n in trace.ranks[0].nodes]
    assert names.count("embedding_layer fwd") == 2  # the row's compute stays, once per microbatch
    assert not any("BROADCAST" in n for n in names)


def test_keep_broadcast_writes_chakra_broadcast_nodes(tmp_path):
    from chakra_ref import read_rank

    path = broadcast_simai(tmp_path)
    trace, diagnostics = load("simai", path, keep_broadcast=True)
    assert not any("BROADCAST" in m for m in diagnostics.messages())
    kept = collectives(trace, 0, CollType.BROADCAST)
    assert [(n.size, trace.groups[trace.ranks[0].group_of(n)].kind) for n in kept] == [(16384, "tp")] * 2
    assert ("2 BROADCAST collectives are written as Chakra BROADCAST nodes (--keep-broadcast); SimAI and "
            "ASTRA-sim 1.0 would not simulate them.") in trace.assumptions
    result = run_cli(path, "--keep-broadcast", "--to", "chakra", "-o", tmp_path / "set" / "w")
    assert result.code == 0, result.stderr
    rank = read_rank(tmp_path / "set" / "w.1.et")
    types = [rank.attrs(n).get("comm_type", (None, None))[1] for n in rank.nodes]
    assert types.count(5) == 2  # Chakra's BROADCAST


def test_broadcast_warning_on_the_command_line(tmp_path):
    path = broadcast_simai(tmp_path, ga=3)
    result = run_cli(path, "-o", tmp_path / "o.json")
    assert result.code == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if "BROADCAST" in line]
    assert lines == [f"et-convert: warning: {path}: converted 3 BROADCAST collectives as no collective, as SimAI "
                     "and ASTRA-sim 1.0 do; --keep-broadcast keeps them (first at line 7)"]


def test_broadcast_in_an_astra_text_table(tmp_path):
    path = tmp_path / "w.txt"
    broadcast = ROW.replace("ALLREDUCE\t4096", "BROADCAST\t4096")
    path.write_text(f"DATA\n2\n{ROW.replace('4096', '0')}\n{broadcast}\n")
    trace, diagnostics = load("astra-text", path, num_npus=4)
    assert f"{path}: converted 1 BROADCAST collectives as no collective, as SimAI and ASTRA-sim 1.0 do; " \
           "--keep-broadcast keeps them (first at line 4)" in diagnostics.messages()
    assert collectives(trace, 0) == []


# ---------------------------------------------------------------- truncated tables and row 0


def test_a_truncated_table_says_how_far_it_got(tmp_path):
    path = tmp_path / "w.txt"
    text = small_simai(tp=2, pp=1, gpus=4, ga=2)
    path.write_text("\n".join(text.splitlines()[:9]) + "\n")  # 7 of the 18 rows
    result = run_cli(path, "-o", tmp_path / "o.json")
    assert (result.code, result.stderr) == (
        2, f"et-convert: error: {path}:9: the file ends after 7 of the 18 rows line 2 announces (truncated?)\n")


def test_row_0_without_input_gradient_collective_is_an_assumption_not_a_warning(tmp_path):
    sample = WORKLOADS / "astra_transformer.txt"
    trace, diagnostics = load("astra-text", sample, num_npus=8)
    assert diagnostics.messages() == []
    sentence = ("Row 0's input-gradient collective (attn_col, line 3) is left out: ASTRA-sim 1.0 issues none for "
                "row 0 under HYBRID_TRANSFORMER.")
    assert sentence in trace.assumptions
    quiet = run_cli(sample, "--num-npus", "8", "-o", tmp_path / "o.json")
    assert quiet.code == 0 and "input-gradient" not in quiet.stderr
    verbose = run_cli(sample, "--num-npus", "8", "-v", "-o", tmp_path / "v.json")
    assert f"et-convert: assumed: {sentence}" in verbose.stderr.splitlines()
