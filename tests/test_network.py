"""The network cost model: formulas, the TOML file, command-line overrides, bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from converters.diagnostics import InputError
from converters.model import CollType
from converters.scheduler.network import Network, load_network, parse_overrides

ROOT = Path(__file__).resolve().parent.parent
ONE_BYTE_PER_NS = 1e9 / 2**30


def plain(**more) -> Network:
    params = {"bandwidth_gbps": ONE_BYTE_PER_NS, "latency_ns": 100, "chunks": 1, "endpoint_delay_ns": 0,
              "local_mem_gbps": 1e12}
    params.update(more)
    return Network({"default": params})


@pytest.mark.parametrize("coll,expected", [
    (CollType.ALL_REDUCE, 6 * (100 + 1000)),       # 2(n-1) steps of S/n
    (CollType.REDUCE_SCATTER, 3 * (100 + 1000)),   # n-1 steps of S/n
    (CollType.ALL_GATHER, 3 * (100 + 4000)),       # n-1 steps of the per-rank input
    (CollType.ALL_TO_ALL, 6 * (100 + 1000)),       # n(n-1)/2 steps of S/n
])
def test_ring_formulas(coll, expected):
    assert plain().collective_ns(coll, 4000, 4, "dp") == expected


def test_chunks_run_one_after_another():
    # Two chunks: each chunk pays every step's latency, on half the bytes.
    assert plain(chunks=2).collective_ns(CollType.ALL_REDUCE, 4000, 4, "dp") == 2 * 6 * (100 + 500)


def test_reductions_cost_three_memory_passes():
    net = plain(local_mem_gbps=1.0)  # 1 byte/ns (local memory uses GB = 10^9 B)
    # all-reduce on 4 ranks: 3 reduction steps of S/n = 1000 bytes, each 2 reads + 1 write
    assert net.collective_ns(CollType.ALL_REDUCE, 4000, 4, "dp") == 6 * 1100 + 3 * 3000


def test_one_member_and_p2p():
    net = plain()
    assert net.collective_ns(CollType.ALL_REDUCE, 1 << 20, 1, "tp") == 0
    assert net.p2p_ns(5000, "pp") == 100 + 5000


def test_builtin_defaults_put_tp_on_nvlink_and_dp_on_the_network():
    net = Network()
    tp, dp = net.params("tp"), net.params("dp")
    assert tp.bandwidth_gbps > dp.bandwidth_gbps and tp.latency_ns < dp.latency_ns
    assert net.params("embedding") == net.params("pp")
    assert net.params("world") == net.params("all")


def write(tmp_path, text: str) -> Path:
    path = tmp_path / "net.toml"
    path.write_text(text)
    return path


def test_file_layers_kind_over_default_over_builtin(tmp_path):
    path = write(tmp_path, """
[default]
bandwidth_gbps = 50
latency_ns = 500
chunks = 4

[tp]
bandwidth_gbps = 300
""")
    net = load_network(path)
    assert net.params("dp").bandwidth_gbps == 50 and net.params("dp").chunks == 4
    assert net.params("tp").bandwidth_gbps == 300 and net.params("tp").latency_ns == 500
    assert net.describe()["source"] == "net.toml"


def test_command_line_wins_over_the_file(tmp_path):
    path = write(tmp_path, "[tp]\nlatency_ns = 2000\n")
    net = load_network(path, {"latency_ns": "700", "dp.chunks": "3"})
    assert net.params("tp").latency_ns == 700
    assert net.params("dp").chunks == 3 and net.params("dp").latency_ns == 700


def test_sample_network_files_load_their_values():
    ring = load_network(ROOT / "samples" / "network_astra_ring8.toml")
    assert ring.origin == "network_astra_ring8.toml"
    calibrated = {"bandwidth_gbps": 50.0, "latency_ns": 500.0, "chunks": 4, "algorithm": "ring",
                  "endpoint_delay_ns": 10.0, "local_mem_gbps": 1600.0, "topology": "ring"}
    for kind in ("default", "tp", "dp", "ep"):  # [default] replaces the built-in NVLink values too
        assert ring.params(kind).as_dict() == calibrated

    h100 = load_network(ROOT / "samples" / "network_h100_cluster.toml")
    assert h100.params("tp").as_dict() == {"bandwidth_gbps": 400.0, "latency_ns": 1000.0, "chunks": 1,
                                           "algorithm": "ring", "endpoint_delay_ns": 10.0, "local_mem_gbps": 1600.0, "topology": "flat"}
    assert (h100.params("ep").bandwidth_gbps, h100.params("ep").latency_ns) == (400.0, 1000.0)
    assert (h100.params("pp").bandwidth_gbps, h100.params("pp").latency_ns) == (50.0, 3000.0)
    assert (h100.params("dp").bandwidth_gbps, h100.params("dp").latency_ns) == (50.0, 5000.0)
    assert "size" not in h100.describe()  # its [size.8] example is commented out


def test_default_table_replaces_the_builtin_nvlink_values_of_tp_and_ep(tmp_path):
    net = load_network(write(tmp_path, "[default]\nbandwidth_gbps = 25\n"))
    assert net.params("tp").bandwidth_gbps == 25 and net.params("ep").bandwidth_gbps == 25
    assert net.params("tp").latency_ns == 1000  # keys [default] does not set stay built-in


@pytest.mark.parametrize("text,where,message", [
    ("[default]\nbandwidth = 50\n", ":2", "unknown key 'bandwidth'"),
    ("[default]\nchunks = 0\n", ":2", "chunks must be a whole number of at least 1, found 0"),
    ("[default]\nchunks = 2.5\n", ":2", "chunks must be a whole number"),
    ("[tp]\nlatency_ns = -1\n", ":2", "latency_ns must be 0 or more"),
    ("[dp]\n\nbandwidth_gbps = \"fast\"\n", ":3", "bandwidth_gbps must be a number, found 'fast'"),
    ("[default]\nalgorithm = \"tree\"\n", ":2", "algorithm must be one of ring, direct, found 'tree'"),
    ("[nvlink]\nlatency_ns = 1\n", ":1", "unknown table [nvlink]"),
    ("[default]\nlatency_ns = = 3\n", ":2", "not valid TOML"),
    ("[default]\nlatency_ns = true\n", ":2", "latency_ns must be a number, found True"),
])
def test_bad_files_say_where_and_what(tmp_path, text, where, message):
    path = write(tmp_path, text)
    with pytest.raises(InputError) as error:
        load_network(path)
    assert error.value.where == f"{path}{where}"
    assert message in error.value.message


def test_missing_file(tmp_path):
    with pytest.raises(InputError) as error:
        load_network(tmp_path / "nope.toml")
    assert "cannot read network file" in error.value.message


def test_bad_override():
    with pytest.raises(InputError, match="unknown group kind 'nvlink'; expected one of default, tp, dp, pp, ep, "
                                         "dp_ep, all or size.N"):
        parse_overrides({"nvlink.latency_ns": "1"})
    for name in ("size.0.chunks", "size.eight.chunks", "size..chunks"):
        with pytest.raises(InputError) as error:
            parse_overrides({name: "2"})
        assert error.value.message == f"network option {name}: expected size.N.KEY, N a member count of at least 1"
    with pytest.raises(InputError, match="network option size.8.latency: unknown key 'latency'"):
        parse_overrides({"size.8.latency": "1"})
    with pytest.raises(InputError, match="bandwidth_gbps must be greater than 0"):
        parse_overrides({"bandwidth_gbps": "0"})


def test_size_tables_apply_to_groups_of_that_size(tmp_path):
    path = write(tmp_path, """
[default]
bandwidth_gbps = 50

[size.8]
bandwidth_gbps = 300
latency_ns = 700

[tp]
latency_ns = 900
""")
    net = load_network(path)
    assert net.params("dp", 8).bandwidth_gbps == 300 and net.params("dp", 8).latency_ns == 700
    assert net.params("dp", 16).bandwidth_gbps == 50
    assert net.params("tp", 8).latency_ns == 900  # a kind table wins over a size table
    assert net.params("tp", 8).bandwidth_gbps == 300
    assert net.describe()["size"] == {"8": {"bandwidth_gbps": 300.0, "latency_ns": 700.0}}
    # the collective cost uses them
    fast = net.collective_ns(CollType.ALL_REDUCE, 1 << 20, 8, "dp")
    slow = net.collective_ns(CollType.ALL_REDUCE, 1 << 20, 8, "pp")
    assert fast == slow  # pp has no table: the size table applies to it too
    assert net.collective_ns(CollType.ALL_REDUCE, 1 << 20, 16, "dp") > fast


@pytest.mark.parametrize("text,where,message", [
    ("[size.0]\nlatency_ns = 1\n", ":1", "[size.0]: expected a table named size.N"),
    ("[size.eight]\nlatency_ns = 1\n", ":1", "[size.eight]: expected a table named size.N"),
    ("[size.8]\nlatency = 1\n", ":2", "[size.8] unknown key 'latency'"),
])
def test_bad_size_tables(tmp_path, text, where, message):
    path = write(tmp_path, text)
    with pytest.raises(InputError) as error:
        load_network(path)
    assert error.value.where == f"{path}{where}"
    assert message in error.value.message


def test_size_overrides_on_the_command_line(tmp_path):
    assert parse_overrides({"size.8.chunks": "2", "size.08.latency_ns": "700", "tp.chunks": "3"}) == {
        "size": {"8": {"chunks": 2, "latency_ns": 700.0}}, "tp": {"chunks": 3}}
    path = write(tmp_path, "[size.8]\nbandwidth_gbps = 300\nchunks = 4\n[dp]\nlatency_ns = 900\n")
    net = load_network(path, {"size.8.chunks": "2", "size.16.bandwidth_gbps": "10", "dp.chunks": "5"})
    assert net.params("pp", 8).chunks == 2  # the command line's size table wins over the file's
    assert net.params("pp", 8).bandwidth_gbps == 300  # keys it does not set come from the file
    assert net.params("dp", 8).latency_ns == 900  # the file's kind table wins over the file's size table
    assert load_network(path, {"size.8.latency_ns": "600"}).params("dp", 8).latency_ns == 600  # the command line first
    assert net.params("dp", 8).chunks == 5  # the command line's kind wins over its size table
    assert net.params("pp", 16).bandwidth_gbps == 10  # a size only the command line names
    assert net.params("pp", 4).chunks == 1
    assert net.describe()["size"] == {"8": {"bandwidth_gbps": 300.0, "chunks": 2},
                                      "16": {"bandwidth_gbps": 10.0}}


def test_ring_hops_take_the_shorter_way_round():
    from converters.scheduler.network import ring_distance, ring_hops

    assert ring_distance(0, 7, 8) == 1 and ring_distance(1, 6, 8) == 3 and ring_distance(0, 4, 8) == 4
    assert ring_hops((0, 1, 2, 3), 8) == (1, 1, 1, 3)
    assert ring_hops((9, 0, 3, 6), 12) == (3, 3, 3, 3)  # members in rank order
    assert ring_hops((0, 1, 2), 3) == (1, 1, 1)


def test_ring_latency_follows_the_slowest_chain_of_steps():
    from converters.scheduler.network import _path_hops

    assert _path_hops((1, 1, 1, 3), 24) == 36  # whole laps: every edge 6 times
    assert _path_hops((1, 1, 2), 8) == 11  # two laps, then the heaviest two edges in a row
    assert _path_hops((2, 2), 3) == 6


def test_ring_topology_changes_only_the_latency_term():
    flat = plain(chunks=2)
    ring = Network({"default": {"latency_ns": 100, "endpoint_delay_ns": 0, "local_mem_gbps": 1e12,
                                "bandwidth_gbps": 1e9 / (1 << 30), "chunks": 2, "topology": "ring"}})
    size = 4000
    uniform = ring.collective_ns(CollType.ALL_REDUCE, size, 4, "dp", (1, 1, 1, 1))
    assert uniform == flat.collective_ns(CollType.ALL_REDUCE, size, 4, "dp")
    # 12 steps over edges 1,1,1,3 hops: 3 laps of 6 hops instead of 12 x 1.
    assert ring.collective_ns(CollType.ALL_REDUCE, size, 4, "dp", (1, 1, 1, 3)) == uniform + 6 * 100
    assert ring.p2p_ns(5000, "pp", 3) == 3 * 100 + 5000


def test_topology_must_be_flat_or_ring():
    with pytest.raises(InputError) as e:
        load_network(None, {"topology": "torus"})
    assert str(e.value) == "network option topology: topology must be one of flat, ring, found 'torus'"


def test_split_into_chunks_as_astra_sim():
    from converters.scheduler.network import split_into_chunks

    assert split_into_chunks(1 << 20, 4) == (1 << 18, 4)
    assert split_into_chunks((1 << 20) + 1, 4) == (1 << 18, 5)
    assert split_into_chunks(0, 4) == (0, 4)
