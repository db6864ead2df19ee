"""`et-convert report` (one HTML page per run) and `stats --sweep`.

The page is checked the way a person sees it: headless Chromium loads it from disk, dumps the
DOM it built and takes a screenshot; the charts' numbers (in `data-*` attributes) must be
those of `et-convert stats --json`, and the page must ask the network for nothing.
"""

from __future__ import annotations

import re
import struct

import orjson
import pytest
from helpers.browser import CHROMIUM, dump_dom, page_requests, parse, screenshot

from converters.ranks import parse_rank_list

needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="needs headless Chromium at /usr/bin/chromium (Debian package chromium; .ci/run installs it)")

FIELDS = ("finish_ns", "compute_ns", "exposed_comm_ns", "idle_ns")
SIMAI = "simai_tp8_pp16_1024gpu.txt"


def stats_json(cli, *args):
    done = cli("stats", *args, "--json", "-q")
    assert done.code == 0, done.stderr
    return orjson.loads(done.stdout)


def make_report(cli, out, *args):
    done = cli("report", *args, "-o", out, "-q")
    assert done.code == 0, done.stderr
    return out


def bars_of(root, chart: str):
    svgs = root.find_all("svg", data_chart=chart)
    assert len(svgs) == 1, f"expected one {chart} chart, found {len(svgs)}"
    return svgs[0].find_all("g", **{"class": "bar"})


def check_rank_bars(root, stats) -> set[int]:
    """Every bar's numbers are its ranks' numbers in `stats`; returns the ranks the bars cover."""
    covered: set[int] = set()
    for bar in bars_of(root, "ranks"):
        a = bar.attrs
        shown = a["data-rank"]
        members = parse_rank_list(a["data-ranks"])
        # A bar of ranks with identical numbers holds every member's numbers; a bar that stands
        # for a whole stage (slowest / median / fastest) holds its named rank's.
        for rank in members if int(a["data-stands-for"]) == len(members) else [int(shown)]:
            expected = stats["ranks"][str(rank)]
            assert {f: int(a["data-" + f.replace("_", "-")]) for f in FIELDS} == expected, (rank, a)
        segments = {r.attrs["data-segment"]: int(r.attrs["data-value"]) for r in bar.find_all("rect")}
        assert segments == {f: v for f, v in stats["ranks"][shown].items() if f != "finish_ns" and v > 0}
        covered |= members if int(a["data-stands-for"]) == len(members) else set()
    return covered


def assert_loads_nothing(html: str, root) -> None:
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", html, re.I)
    for pattern in ("<script", "<link", "url(", "@import", "<img", "<iframe"):
        assert pattern not in html.lower(), pattern
    for element in _walk(root):
        for attr in ("src", "href", "xlink:href", "action", "poster"):
            value = element.attrs.get(attr)
            assert value is None or value.startswith("#"), (element.tag, attr, value)


def _walk(element):
    for child in element.children:
        yield child
        yield from _walk(child)


def png_size(path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


# ---------------------------------------------------------------- in the browser


@pytest.fixture(scope="module")
def simai_page(tmp_path_factory):
    from conftest import SAMPLES, run_cli

    out = tmp_path_factory.mktemp("report") / "simai.html"
    make_report(run_cli, out, SAMPLES / SIMAI)
    return out, stats_json(run_cli, SAMPLES / SIMAI)


@needs_chromium
def test_1024_rank_page_in_chromium_bars_match_stats(simai_page, tmp_path):
    page, stats = simai_page
    html = page.read_text()
    assert len(html.encode()) < 3_000_000  # "a few MB" at most for 1024 ranks (about 0.3 MB today)
    root = parse(dump_dom(page))
    # grouped by stage: 16 stages whose ranks do the same, so 16 bars cover all 1024 ranks
    assert check_rank_bars(root, stats) == set(range(1024))
    assert len(bars_of(root, "ranks")) == 16
    for chart in ("timeline", "traffic-bytes", "traffic-busy", "critical-path", "collectives"):
        assert root.find_all("svg", data_chart=chart), chart
    # the timeline shows the ranks the Chrome output draws by default
    import converters as etc
    from converters.writers.layout_chrome import default_subset

    drawn, _ = default_subset(etc.read(_sample(SIMAI)))
    lanes = root.find_all("svg", data_chart="timeline")[0].find_all("g", **{"class": "lane"})
    assert [int(g.attrs["data-rank"]) for g in lanes] == drawn
    # traffic bars hold the bytes and busy time of stats
    traffic = {b.attrs["data-kind"]: int(b.attrs["data-bytes"]) for b in bars_of(root, "traffic-bytes")}
    assert traffic == {kind: row["bytes"] for kind, row in stats["comm"].items()}
    cards = {c.attrs["data-metric"]: int(c.attrs["data-value"]) for c in root.find_all("div", **{"class": "card"})}
    assert cards["iteration_time_ns"] == stats["iteration_time_ns"]
    png = tmp_path / "simai.png"
    screenshot(page, png)
    assert png_size(png) == (1400, 3000)
    assert png.stat().st_size > 50_000  # charts drawn, not a blank page


def _sample(name):
    from conftest import SAMPLES

    return SAMPLES / name


@needs_chromium
def test_page_loads_nothing_from_the_network(simai_page, tmp_path):
    page, _ = simai_page
    assert_loads_nothing(page.read_text(), parse(dump_dom(page)))
    assert page_requests(page) == []
    # the probe does see a page that fetches something
    fetching = tmp_path / "fetching.html"
    fetching.write_text('<html><body><img src="http://example.com/chart.png"></body></html>')
    assert page_requests(fetching) == ["example.com"]


@needs_chromium
@pytest.mark.parametrize("sample", ["megatron_rank4_pp_tp2.log", "chakra_data", "optimusprime_llama1b_pp8.log"])
def test_small_pages_have_one_bar_per_rank(cli, tmp_path, sample):
    page = make_report(cli, tmp_path / "r.html", _sample(sample))
    stats = stats_json(cli, _sample(sample))
    root = parse(dump_dom(page))
    assert check_rank_bars(root, stats) == {int(r) for r in stats["ranks"]}
    assert len(bars_of(root, "ranks")) == len(stats["ranks"])
    assert_loads_nothing(page.read_text(), root)
    png = tmp_path / "r.png"
    screenshot(page, png, 1200, 2000)
    assert png_size(png) == (1200, 2000)


# ---------------------------------------------------------------- the page's content, without a browser


def test_measured_log_says_so_and_lists_findings_and_assumptions(cli, tmp_path):
    page = make_report(cli, tmp_path / "m.html", _sample("megatron_rank4_pp_tp2.log"))
    html = page.read_text()
    assert "measured (the log&#x27;s own times)" in html
    assert "I024 partial rank set" in html  # the validator's note about a log of one rank
    assert "op timestamps are end times: start = timestamp - duration" in html  # an assumption
    assert "No critical path: it is found by the scheduler, and this timeline is measured." in html


def test_same_input_same_bytes(cli, tmp_path):
    a = make_report(cli, tmp_path / "a.html", _sample("chakra_data")).read_bytes()
    b = make_report(cli, tmp_path / "b.html", _sample("chakra_data")).read_bytes()
    assert a == b


def test_html_output_name_writes_a_report(cli, tmp_path):
    done = cli(_sample("chakra_data"), "-o", tmp_path / "r.html")
    assert done.code == 0, done.stderr
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")


def test_compare_network_differences_hold_both_runs(cli, tmp_path):
    net = tmp_path / "slow.toml"
    net.write_text("[default]\nbandwidth_gbps = 1\n")
    page = make_report(cli, tmp_path / "c.html", _sample("chakra_data"), "--compare-network", net)
    root = parse(page.read_text())
    rows = {r.attrs["data-metric"]: r for r in root.find_all("tr") if "data-metric" in r.attrs}
    base = stats_json(cli, _sample("chakra_data"))
    other = stats_json(cli, _sample("chakra_data"), "--network", net)
    row = rows["iteration time"]
    assert (int(row.attrs["data-a"]), int(row.attrs["data-b"])) == (base["iteration_time_ns"], other["iteration_time_ns"])
    assert other["iteration_time_ns"] > 1.01 * base["iteration_time_ns"]
    assert row.attrs["class"] == "worse"  # B takes longer: red
    # every section shows both runs, on one scale
    assert len(root.find_all("div", data_run="1")) == 8
    assert len(root.find_all("svg", data_chart="ranks")) == 2
    if CHROMIUM.exists():  # and the browser draws both, each with its own run's numbers
        ranks = parse(dump_dom(page)).find_all("section", id="ranks")[0]
        a, b = (ranks.find_all("div", data_run=side)[0] for side in ("0", "1"))
        assert check_rank_bars(a, base) == check_rank_bars(b, other) == {0, 1, 2, 3}
        png = tmp_path / "c.png"
        screenshot(page, png)
        assert png.stat().st_size > 20_000


def test_compare_two_inputs(cli, tmp_path):
    page = make_report(cli, tmp_path / "c.html", _sample("chakra_data"), "--compare", _sample("chakra_model"))
    html = page.read_text()
    assert "<title>et-convert report · chakra_data vs chakra_model</title>" in html
    root = parse(html)
    rows = {r.attrs["data-metric"]: r for r in root.find_all("tr") if "data-metric" in r.attrs}
    model = stats_json(cli, _sample("chakra_model"))
    assert int(rows["iteration time"].attrs["data-b"]) == model["iteration_time_ns"]


def test_compare_and_compare_network_together_is_a_usage_error(cli, tmp_path):
    done = cli("report", _sample("chakra_data"), "-o", tmp_path / "c.html", "--compare", _sample("chakra_model"),
               "--compare-network", _sample("network_astra_ring8.toml"))
    assert done.code == 2
    assert done.stderr.strip().splitlines()[-1] == "et-convert: error: give --compare or --compare-network, not both"
    assert not (tmp_path / "c.html").exists()


def test_report_never_writes_over_its_input(cli, tmp_path):
    target = tmp_path / "in.html"
    target.write_bytes(_sample("chakra_data_workload.txt").read_bytes())
    done = cli("report", target, "--from", "astra-text", "--num-npus", "4", "-o", target)
    assert done.code == 2
    assert "cannot write over the input" in done.stderr


# ---------------------------------------------------------------- stats --sweep


def test_sweep_is_the_grid_of_single_runs(cli):
    result = stats_json(cli, _sample("chakra_data"), "--sweep", "bandwidth_gbps=25,100", "--sweep", "chunks=1,4")
    points = [(p["bandwidth_gbps"], p["chunks"]) for p in result["sweep"]]
    assert points == [(25, 1), (25, 4), (100, 1), (100, 4)]
    assert result["basis"] == "scheduled with the network model"
    for point in (result["sweep"][1], result["sweep"][2]):
        single = stats_json(cli, _sample("chakra_data"), "--net", f"bandwidth_gbps={point['bandwidth_gbps']}",
                            "--net", f"chunks={point['chunks']}")
        assert point["iteration_time_ns"] == single["iteration_time_ns"]
        assert point["exposed_comm_ns"] == single["ranks"][str(point["slowest_rank"])]["exposed_comm_ns"]
    faster = [p["iteration_time_ns"] for p in result["sweep"] if p["chunks"] == 1]
    assert faster[0] > faster[1]  # 4x the bandwidth is faster


def test_sweep_table(cli):
    done = cli("stats", _sample("chakra_data"), "--sweep", "tp.bandwidth_gbps=100,200")
    assert done.code == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "sweep  2 points, 4 ranks (scheduled with the network model)"
    assert lines[2].split() == ["tp.bandwidth_gbps", "iteration", "slowest", "rank", "compute", "exposed", "comm", "idle"]
    assert lines[3].split()[0] == "100" and len(lines) == 5


def test_sweep_of_a_modelled_log_is_rescheduled_and_says_so(cli):
    result = stats_json(cli, _sample("optimusprime_llama1b_pp8.log"), "--sweep", "pp.bandwidth_gbps=10,100")
    assert result["basis"].startswith("re-scheduled from the modelled compute times")
    plain = stats_json(cli, _sample("optimusprime_llama1b_pp8.log"))
    assert result["modelled_iteration_time_ns"] == plain["iteration_time_ns"]
    slow, fast = (p["iteration_time_ns"] for p in result["sweep"])
    assert slow > fast


@pytest.mark.parametrize("args, message", [
    (["--sweep", "bandwidth_gbps"], "--sweep bandwidth_gbps: expected KEY=V1,V2,... (e.g. tp.bandwidth_gbps=100,200,400)"),
    (["--sweep", "chunks=1,", ], "--sweep chunks=1,: expected KEY=V1,V2,... (e.g. tp.bandwidth_gbps=100,200,400)"),
    (["--sweep", "chunks=1", "--sweep", "chunks=2"], "--sweep chunks is given twice; give each key once with all its values"),
    (["--sweep", "foo=1"], "network option foo: unknown key 'foo'; expected one of bandwidth_gbps, latency_ns, chunks, "
                           "algorithm, endpoint_delay_ns, local_mem_gbps, topology"),
    (["--sweep", "tp.chunks=1,0"], "network option tp.chunks: chunks must be a whole number of at least 1, found 0"),
])
def test_sweep_errors_are_one_line(cli, args, message):
    done = cli("stats", _sample("chakra_data"), *args)
    assert done.code == 2
    assert done.stderr.strip().splitlines()[-1] == f"et-convert: error: {message}"


def test_sweep_of_a_log_with_absent_peers_says_why_it_cannot(cli):
    done = cli("stats", _sample("megatron_rank4_pp_tp2.log"), "-q", "--sweep", "dp.bandwidth_gbps=10,100")
    assert done.code == 2
    assert done.stderr.strip() == ("et-convert: error: cannot re-schedule megatron_rank4_pp_tp2.log: it holds rank 4, "
                                   "and its groups and transfers also name ranks 2,5,6; give every rank's log")


def test_report_draws_the_sweep(cli, tmp_path):
    page = make_report(cli, tmp_path / "s.html", _sample("chakra_data"), "--sweep", "bandwidth_gbps=25,50,100")
    result = stats_json(cli, _sample("chakra_data"), "--sweep", "bandwidth_gbps=25,50,100")
    bars = bars_of(parse(page.read_text()), "sweep")
    assert [b.attrs["data-point"] for b in bars] == ["bandwidth_gbps=25", "bandwidth_gbps=50", "bandwidth_gbps=100"]
    assert [int(b.attrs["data-iteration-time-ns"]) for b in bars] == [p["iteration_time_ns"] for p in result["sweep"]]


def test_sweep_from_python():
    import converters as etc
    from converters.api import sweep

    trace = etc.read(_sample("chakra_data"))
    result = sweep(trace, {"bandwidth_gbps": [50]})
    assert result["sweep"][0]["iteration_time_ns"] == etc.schedule(trace).summary["iteration_time_ns"]


# ---------------------------------------------------------------- grouping many ranks


def test_ranks_of_a_stage_that_differ_show_slowest_median_fastest():
    from helpers.scheduler_synth import compute, trace_of

    from converters.report.data import rank_rows

    trace = trace_of({r: [compute(0, 100 + r)] for r in range(80)})
    for r, rank in trace.ranks.items():
        rank.coords = {"pp": r // 40}
    ranks = {str(r): {"finish_ns": 100 + r, "compute_ns": 100 + r, "exposed_comm_ns": 0, "idle_ns": 0} for r in range(80)}
    rows = rank_rows(trace, ranks)
    assert [row["label"] for row in rows] == [
        "stage 0 · slowest of 40: rank 39", "stage 0 · median of 40: rank 20", "stage 0 · fastest of 40: rank 0",
        "stage 1 · slowest of 40: rank 79", "stage 1 · median of 40: rank 60", "stage 1 · fastest of 40: rank 40"]
    assert rows[0]["values"]["finish_ns"] == 139 and rows[0]["stands_for"] == 40


def test_nice_ticks():
    from converters.report.svg import nice_ticks

    assert nice_ticks(14.98e9) == [0, 5e9, 1e10, 1.5e10]
    assert nice_ticks(7, binary=False) == [0, 2, 4, 6, 8]
    assert nice_ticks(3 << 30, binary=True) == [0, 1 << 30, 2 << 30, 3 << 30]
    assert nice_ticks(0) == [0.0]


def test_a_page_stays_small_when_every_rank_differs():
    """The worst case for size: more ranks than one bar each, all different, none in a stage,
    and lanes that switch between compute and communication at every column."""
    from helpers.scheduler_synth import trace_of

    from converters.model import CollType, Node, NodeKind
    from converters.report.data import run_data
    from converters.report.page import render_page
    from converters.timeline import measured_timeline

    programs = {}
    for r in range(128):
        nodes, t = [], 0
        for i in range(0, 800, 2):  # 400 rounds of compute, sync and a wait: a piece every other column
            nodes.append(Node(i, "step", NodeKind.COMPUTE, duration_ns=1000 + r, start_ns=t))
            nodes.append(Node(i + 1, "sync", NodeKind.COLLECTIVE, coll=CollType.ALL_REDUCE, size=1 << 20,
                              duration_ns=700, start_ns=t + 1000 + r))
            t += 3700
        programs[r] = nodes
    trace = trace_of(programs)
    trace.timing = "measured"
    trace.source.format, trace.source.files = "megatron-log", ["synthetic.log"]
    run = run_data(trace, measured_timeline(trace))
    assert len(run["bars"]) == 3  # all ranks in no stage: slowest, median and fastest
    lanes = run["timeline"]["lanes"]
    assert len(lanes) == 64  # the Chrome default: the first 64 ranks
    assert min(len(lane["compute"]) + len(lane["comm"]) for lane in lanes) >= 400  # hundreds of pieces per lane
    html = render_page([run], version="test")
    assert len(html.encode()) < 3_000_000, len(html.encode())


def test_compare_network_of_a_log_reschedules_both_sides(cli, tmp_path):
    net = tmp_path / "slow.toml"
    net.write_text("[pp]\nbandwidth_gbps = 1\n")
    page = make_report(cli, tmp_path / "c.html", _sample("optimusprime_llama1b_pp8.log"), "--compare-network", net)
    html = page.read_text()
    assert html.count("re-scheduled from the modelled compute times") >= 2  # said for A and for B
    assert "<title>et-convert report · optimusprime_llama1b_pp8.log on the default network vs " \
           "optimusprime_llama1b_pp8.log on slow.toml</title>" in html
    sweep = stats_json(cli, _sample("optimusprime_llama1b_pp8.log"), "--sweep", "pp.bandwidth_gbps=50,1")
    rows = {r.attrs["data-metric"]: r for r in parse(html).find_all("tr") if "data-metric" in r.attrs}
    assert [int(rows["iteration time"].attrs[k]) for k in ("data-a", "data-b")] == [
        p["iteration_time_ns"] for p in sweep["sweep"]]
