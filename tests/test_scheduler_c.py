"""The scheduler's loop in C (`converters/scheduler/_loop.c`) is the Python loop, faster.

`Engine.run` takes the C loop where setup.py built it; `Engine._python_run` is the
specification, and runs instead wherever the C loop declines (a rank that cannot finish, a
lookup that raises). Both must give the same starts, ends, causes and compute stretches to the
nanosecond, and the same summary: on every sample, on measured-like logs whose ranks all
differ, on random traces full of ties, and on random graphs of every node kind with several
dependents, unordered ids, missing dependencies and deadlocks (whose report is then the
Python loop's, the same as before).
"""

from __future__ import annotations

import random
import shutil
import sysconfig
from contextlib import contextmanager
from pathlib import Path

import pytest
from helpers.megatron_synth import write_run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_scheduler_tables import _net, _random_nodes, _replica_trace, _tied_trace

from converters.api import read
from converters.diagnostics import Diagnostics, InputError
from converters.model import CollType, ExecutionTrace, NodeKind, Rank
from converters.positions import positions
from converters.scheduler import Deadlock, load_network, network_for
from converters.scheduler import summary as summary_module
from converters.scheduler.engine import IS_TALK, Engine, _loop, indices
from converters.scheduler.network import Network
from converters.scheduler.quotient import find_quotient
from converters.scheduler.summary import _credit_path, _merge, critical_path, summarize

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
needs_c = pytest.mark.skipif(_loop is None, reason="the C scheduler loop was not built (no C compiler)")


def test_the_scheduler_uses_the_c_loop_where_a_compiler_built_it():
    compiler = sysconfig.get_config_var("CC")
    if not compiler or shutil.which(compiler.split()[0]) is None:
        pytest.skip("no C compiler here: the Python loop is used")
    # setup.py builds it optionally: a build that failed silently would leave scheduling 5x slower
    assert _loop is not None


@pytest.mark.parametrize("module", ["converters.scheduler._loop", "converters._proto._head"])
def test_the_c_modules_are_built_from_their_current_source(module):
    """setup.py builds them optionally: a build that fails after a change to the C leaves the
    module of the last build in place, and every test would then run the old C."""
    import importlib

    try:
        built = Path(importlib.import_module(module).__file__)
    except ImportError:
        pytest.skip(f"{module} was not built")
    source = built.parent / (module.rsplit(".", 1)[1] + ".c")
    if not source.exists():
        pytest.skip(f"{module} is installed without its source")
    assert built.stat().st_mtime >= source.stat().st_mtime, (
        f"{built.name} is older than {source.name}: make (or pip install -e .) builds it again")


def same_schedule(trace: ExecutionTrace, net, quotient=None):
    """The C loop's (starts, ends, cause), checked against the Python loop's; None if it declined.
    Where the Python loop raises, the C loop must decline and `run` raise the same."""
    native = Engine(trace, net, quotient)
    got = native._native_run()
    python = Engine(trace, net, quotient, native=False)
    try:
        expected = python.run()
    except InputError as error:
        assert got is None
        with pytest.raises(InputError) as again:
            Engine(trace, net, quotient).run()
        assert str(again.value) == str(error)
        return "raised"
    if got is not None:
        assert got == expected
        assert native.computing == python.computing
        assert native.stride == python.stride
        # the summary from what the C loop adds up (merged communication, traffic sums)
        assert native.talking is not None and native.traffic is not None
        assert_talking_merged(native, got)
        with credits_in_python():
            expected_summary = summarize(python, *expected)
        assert summarize(native, *got) == expected_summary
    return got


@contextmanager
def credits_in_python():
    """summary._credit_path's Python walk (its specification) instead of _loop.credit_path."""
    saved, summary_module._loop = summary_module._loop, None
    try:
        yield
    finally:
        summary_module._loop = saved


def assert_talking_merged(native: Engine, got) -> None:
    """The C loop's record of when each position communicated (merged from pairs it sorts:
    presorted, two runs merged, or qsort) is summary._merge of the communication nodes' times."""
    starts, ends, _ = got
    for r, prog in enumerate(native.progs):
        talk = [(starts[r][i], ends[r][i]) for i in indices(prog.types, IS_TALK) if ends[r][i] > starts[r][i]]
        assert native.talking[r] == _merge(talk)


def sample_inputs() -> list[tuple[Path, dict]]:
    """Every sample input, with the options `make run` gives it (converters/samples.py)."""
    from converters.samples import MEGATRON_SETS

    found = []
    for path in sorted(SAMPLES.iterdir()) + sorted((SAMPLES / "workloads").iterdir()):
        if path.name in MEGATRON_SETS:
            layout = MEGATRON_SETS[path.name]
            found.append((path, {"tp": int(layout[1]), "pp": int(layout[3])}))
        elif path.suffix == ".txt" and not path.name.startswith("simai"):
            found.append((path, {"num_npus": 8}))  # ASTRA-sim text workloads carry no rank count
        elif path.suffix == ".tsv":
            found.append((path, {"dp": 8}))
        elif path.suffix == ".log" or (path.is_dir() and path.name != "workloads") or path.name.startswith("simai"):
            found.append((path, {}))
    return found


@needs_c
@pytest.mark.parametrize("path, options", sample_inputs(), ids=lambda v: v.name if isinstance(v, Path) else "")
def test_every_sample_schedules_the_same(path, options):
    trace = read(path, diagnostics=Diagnostics(), **options)
    net = network_for(None)
    quotient = find_quotient(trace, None)
    if quotient is not None:  # the representatives, as schedule() runs them
        assert same_schedule(trace, net, quotient) is not None
    if quotient is None or len(trace.ranks) <= 64:  # and every rank (1024 in Python: 20 s)
        assert same_schedule(trace, net) is not None


@needs_c
def test_a_ring_network_schedules_the_same():
    trace = read(SAMPLES / "megatron_tp2_pp2_dp1", diagnostics=Diagnostics())
    ring = load_network(SAMPLES / "network_astra_ring8.toml")
    assert ring.uses_ring()
    assert same_schedule(trace, ring, find_quotient(trace, max(trace.ranks) + 1)) is not None


@needs_c
@pytest.mark.parametrize("jitter", [0, 5])
def test_logs_of_every_rank_different_schedule_the_same(tmp_path, jitter):
    logs = write_run(tmp_path, stages=2, tp=2, dp=2, microbatches=8, layers=4, jitter=jitter)
    trace = read(logs, "megatron-log", diagnostics=Diagnostics())
    assert trace.node_count() > 1000
    assert same_schedule(trace, network_for(None)) is not None


@needs_c
@pytest.mark.parametrize("seed", range(30))
def test_traces_full_of_ties_schedule_the_same(seed):
    assert same_schedule(_tied_trace(seed), _net()) is not None
    assert same_schedule(_replica_trace(seed), _net()) is not None


def _random_trace(seed: int) -> ExecutionTrace:
    """Ranks of random graphs (test_scheduler_tables._random_nodes: several dependents, repeated
    and missing dependencies, unordered ids, every kind), with collectives in a few groups and
    sends and receives between random ranks: many cannot finish."""
    rng = random.Random(seed)
    ranks = rng.randint(1, 5)
    trace = ExecutionTrace()
    groups = [None] + [trace.add_group("dp", sorted(rng.sample(range(ranks), rng.randint(1, ranks)))).id
                       for _ in range(2)]
    for r in range(ranks):
        nodes = _random_nodes(rng, rng.randint(1, 40), rng.random() < 0.5)
        for node in nodes:
            if node.kind is NodeKind.COLLECTIVE:
                node.coll = rng.choice((CollType.ALL_REDUCE, CollType.ALL_GATHER))
                node.size = rng.choice((0, 100, 4096))
                node.group = rng.choice([g for g in groups if g is None or r in trace.groups[g].members])
            elif node.kind in (NodeKind.SEND, NodeKind.RECV):
                node.peer, node.tag, node.size = rng.randrange(ranks), rng.randint(0, 1), rng.choice((0, 100))
        trace.ranks[r] = Rank(r, nodes)
    trace.parallel.world = ranks
    return trace


def _finishing_trace(seed: int) -> ExecutionTrace:
    """Random graphs as above without missing dependencies, whose communication is in step: the
    members of a group issue equally many collectives in it, and each send has its receive
    (random nodes of each rank become them, so the order still varies): most finish."""
    rng = random.Random(seed)
    ranks = rng.randint(2, 5)
    trace = ExecutionTrace()
    programs = {r: _random_nodes(rng, rng.randint(8, 40), rng.random() < 0.5) for r in range(ranks)}
    for nodes in programs.values():
        ids = {n.id for n in nodes}
        for node in nodes:
            node.deps = [d for d in node.deps if d in ids]
            if node.kind in (NodeKind.COLLECTIVE, NodeKind.SEND, NodeKind.RECV):
                node.kind = NodeKind.COMPUTE
    free = {r: [n for n in nodes if n.kind is NodeKind.COMPUTE] for r, nodes in programs.items()}

    def take(r: int):
        return free[r].pop(rng.randrange(len(free[r]))) if free[r] else None

    # Collectives of several groups, or sends, can still wait for each other in a cycle (a rank
    # holds its slot for one group while another waits in a second): only some traces have them.
    groups = rng.choice((0, 0, 2))
    for members in ([None], *(sorted(rng.sample(range(ranks), rng.randint(2, ranks))) for _ in range(groups))):
        gid = None if members == [None] else trace.add_group("dp", members).id
        for _ in range(rng.randint(0, 3)):
            chosen = [take(r) for r in (range(ranks) if gid is None else members)]
            if None in chosen:
                break
            size = rng.choice((0, 100, 4096))
            for node in chosen:
                node.kind, node.coll, node.size, node.group = NodeKind.COLLECTIVE, CollType.ALL_REDUCE, size, gid
    for tag in range(rng.choice((0, 0, 1, 4))):
        src, dst = rng.sample(range(ranks), 2)
        sending, receiving = take(src), take(dst)
        if sending is None or receiving is None:
            break
        size = rng.choice((0, 100))
        sending.kind, sending.peer, sending.tag, sending.size = NodeKind.SEND, dst, tag, size
        receiving.kind, receiving.peer, receiving.tag, receiving.size = NodeKind.RECV, src, tag, size
    for r, nodes in programs.items():
        trace.ranks[r] = Rank(r, nodes)
    trace.parallel.world = ranks
    return trace


def outcome(engine: Engine):
    try:
        return engine.run(), engine.computing
    except Deadlock as stuck:
        return str(stuck), stuck.blocked, stuck.chain


@needs_c
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10**9), st.booleans())
def test_random_graphs_schedule_or_stall_the_same(seed, in_step):
    trace = (_finishing_trace if in_step else _random_trace)(seed)
    net = _net()
    expected = outcome(Engine(trace, net, native=False))
    assert outcome(Engine(trace, net)) == expected
    if not isinstance(expected[0], str):  # every rank finished: the C loop did not decline
        native = Engine(trace, net)
        got = native._native_run()
        assert got is not None
        assert_talking_merged(native, got)
        path = critical_path(native, *got)
        with credits_in_python():
            assert path == critical_path(native, *got)


@pytest.mark.parametrize("seed", [189, 1175, 1811, 1957, 2257, 3172])
def test_runs_of_compute_give_the_node_by_node_schedule(seed):
    """Random graphs on which the Python loop's runs of compute nodes once gave other causes,
    and on three of them other starts and ends, than node by node (a run ending in a node of no
    duration released it in the batch that started it): both loops, which set runs the same way,
    give the node-by-node schedule."""
    trace = _finishing_trace(seed)
    node_by_node = Engine(trace, _net(), runs=False).run()
    assert Engine(trace, _net(), native=False).run() == node_by_node
    assert Engine(trace, _net()).run() == node_by_node  # (the C loop sets runs too)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10**9))
def test_runs_of_compute_give_the_node_by_node_schedule_on_random_graphs(seed):
    trace = _finishing_trace(seed)
    node_by_node = outcome(Engine(trace, _net(), runs=False))
    assert outcome(Engine(trace, _net(), native=False)) == node_by_node
    assert outcome(Engine(trace, _net())) == node_by_node


def test_most_random_graphs_in_step_finish():
    """(else the test above would compare little but deadlock reports)"""
    finished = sum(not isinstance(outcome(Engine(_finishing_trace(seed), _net(), native=False))[0], str)
                   for seed in range(100))
    assert finished >= 50


@needs_c
def test_c_loop_declines_what_python_must_report():
    """A collective in a group that does not include its rank: the Python loop raises when it
    meets the node, so the C loop declines and the error stays the same."""
    trace = next(t for t in map(_tied_trace, range(20)) if len(t.ranks) >= 3)
    outsider = trace.add_group("tp", [0, 2])
    next(n for n in trace.ranks[1].nodes if n.kind is NodeKind.COLLECTIVE).group = outsider.id
    engine = Engine(trace, _net())
    assert engine._native_run() is None
    with pytest.raises(InputError, match="does not include rank 1"):
        engine.run()


@needs_c
def test_traffic_past_64_bits_is_summed_in_python():
    """Three all-reduces of nearly 2**62 bytes each: their bytes overflow an int64, so the C
    loop gives no traffic and the summary sums it as the Python loop's does."""
    from helpers.scheduler_synth import coll, shared_trace

    huge = (1 << 62) - 1
    trace = shared_trace(2, [coll(0, CollType.ALL_REDUCE, huge), coll(1, CollType.ALL_REDUCE, huge, deps=[0]),
                             coll(2, CollType.ALL_REDUCE, huge, deps=[1])])
    fast = Network({"default": {"bandwidth_gbps": 1e12, "latency_ns": 100, "chunks": 1, "endpoint_delay_ns": 0,
                                "local_mem_gbps": 1e12}})
    native = Engine(trace, fast)
    got = native._native_run()
    assert got is not None and native.traffic is None and native.talking is not None
    python = Engine(trace, fast, native=False)
    expected = python.run()
    assert got == expected
    summary = summarize(native, *got)
    assert summary == summarize(python, *expected)
    assert sum(row["bytes"] for row in summary["comm"].values()) == 2 * 3 * huge


@needs_c
def test_the_dry_run_keeps_no_times():
    trace = _tied_trace(3)
    engine = Engine(trace, _net(), timeline=False)
    assert engine._native_run() == ([], [], [])
    assert engine.done == [len(p.nodes) for p in engine.progs]
    assert Engine(trace, _net())._native_run()[0]  # with times: a list per rank


class _Fields:
    __slots__ = ("group", "coll", "size")

    def __init__(self, group, coll, size):
        self.group, self.coll, self.size = group, coll, size


@needs_c
@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([None, 1, 2, True]), st.sampled_from([0, 1, 1.0, CollType.ALL_REDUCE]),
                          st.sampled_from([0, 4096, 4096.0, 10**20])), max_size=40))
def test_distinct_numbers_values_as_a_dict_does(values):
    """_loop.distinct (the collectives' rows in Engine._talk_tables) against a dict of tuples:
    values equal but not identical (1 and True, 4096 and 4096.0) are one key, as in a dict."""
    index, firsts = _loop.distinct([_Fields(*v) for v in values], ("group", "coll", "size"))
    numbers: dict[tuple, int] = {}
    expected = [numbers.setdefault(v, len(numbers)) for v in values]
    assert index == expected
    assert firsts == [values.index(v) for v in numbers]
    # the same objects picked out of a longer list by their places
    objects = [_Fields(*v) for v in values]
    padded = [_Fields(None, None, None)] + [item for pair in zip(objects, objects) for item in pair]
    assert _loop.distinct(padded, ("group", "coll", "size"), [2 * j + 1 for j in range(len(values))]) == (index, firsts)


@needs_c
def test_distinct_refuses_places_outside_the_objects():
    objects = [_Fields(1, 0, 8)]
    for places in ([1], [-1], ["0"]):
        with pytest.raises(IndexError, match="outside the objects"):
            _loop.distinct(objects, ("group",), places)
    with pytest.raises(TypeError, match="list of places"):
        _loop.distinct(objects, ("group",), (0,))


def _python_dependents(deps_of, base, index_of):
    """engine.dependents with the C module set aside: its specification."""
    from converters.scheduler import engine

    saved, engine._loop = engine._loop, None
    try:
        return engine.dependents(deps_of, base, index_of)
    finally:
        engine._loop = saved


_IDS = st.one_of(st.integers(-3, 12), st.sampled_from([2**63, -(2**63) - 1, 2**70]))


@needs_c
@settings(max_examples=500, deadline=None)
@given(st.lists(st.one_of(st.lists(_IDS, max_size=5), st.tuples(_IDS, _IDS)), max_size=12),
       st.one_of(st.integers(-2, 3), st.just(2**63 - 1)), st.booleans())
def test_dependents_in_c_are_the_python_tables(deps_of, base, by_dict):
    """_loop.dependents (Program's tables of dependents) against the Python function: the same
    next_of, more, ndeps and missing, in the same insertion order, whether ids run from `base`
    or are looked up in a dict; ids past 64 bits are missing dependencies."""
    from converters.scheduler.engine import dependents

    index_of = {base + 2 * i: i for i in range(len(deps_of))} if by_dict else None
    got = _loop.dependents(deps_of, positions(len(deps_of)), base, index_of)
    assert got is not None
    expected = _python_dependents(deps_of, base, index_of)
    assert got == expected
    assert [list(table.items()) for table in got[1::2]] == [list(table.items()) for table in expected[1::2]]
    assert dependents(deps_of, base, index_of) == expected


@needs_c
def test_dependents_leaves_what_is_not_an_int_to_python():
    """A float or bool id, or a node's deps that are no list, make _loop.dependents decline
    (None); engine.dependents then gives the Python function's result or error."""
    from converters.scheduler.engine import dependents

    for deps_of in ([[0], [0.0]], [[True], []], [None, [0]]):
        assert _loop.dependents(deps_of, positions(2), 0, None) is None
    assert dependents([None, [0]], 0, None) == ([1, -1], {}, [0, 1], {})
    with pytest.raises(TypeError):
        dependents([[0], [0.0]], 0, None)  # a float index: as the Python tables always raised
    assert _loop.dependents([[0]], positions(2), 0, None) is None  # lists of other lengths


def _numbered(values) -> tuple[list[int], list[int]]:
    """distinct()'s answer for these values, by a dict."""
    numbers: dict = {}
    index = [numbers.setdefault(v, len(numbers)) for v in values]
    return index, [index.index(n) for n in range(len(numbers))]


@needs_c
def test_distinct_reads_attributes_as_getattr_does():
    """distinct() finds a type's slot or property once and calls it for each object; what is no
    data descriptor (an instance's own attribute, a class attribute), or another type, is read
    by name. The values are those getattr gives, object by object."""

    class Slotted:
        __slots__ = ("group",)

        def __init__(self, group):
            self.group = group

    class Plain:
        kind = "class attribute"

        def __init__(self, group):
            self.group = group

    class Computed:
        def __init__(self, group):
            self._group = group

        @property
        def group(self):
            return self._group * 10

    class Shadowed(Slotted):  # a subclass whose instances also have a __dict__
        pass

    objects = [Slotted(1), Slotted(1), Plain(1), Computed(1), Slotted(2), Computed(2), Shadowed(3), Plain(10)]
    objects[-2].extra = "instance attribute"
    assert _loop.distinct(objects, ("group",)) == _numbered([o.group for o in objects])
    assert _loop.distinct([Plain(1), Plain(2)], ("kind", "group")) == ([0, 1], [0, 1])
    with pytest.raises(AttributeError):
        _loop.distinct([Slotted(1), Slotted.__new__(Slotted)], ("group",))  # an empty slot


@needs_c
def test_distinct_sees_a_class_changed_while_it_reads():
    """A property that replaces itself on the class when first read: the objects after it read
    the new property, as getattr would (the type's version tag changes)."""

    def make_class():
        class Changing:
            def __init__(self, size):
                self._size = size

            @property
            def size(self):
                Changing.size = property(lambda self: -self._size)  # from now on, negative
                return self._size

        return Changing

    Changing = make_class()
    expected = _numbered([o.size for o in [Changing(s) for s in (1, 2, 1, 3)]])
    Changing = make_class()
    assert _loop.distinct([Changing(s) for s in (1, 2, 1, 3)], ("size",)) == expected
    assert expected == ([0, 1, 2, 3], [0, 1, 2, 3])  # 1, -2, -1, -3


@needs_c
def test_columns_reads_what_getattr_reads():
    """_loop.columns (Program's and the quotient's columns of nodes) against getattr, on nodes,
    on objects of several types in one list, and on a missing attribute."""
    from converters.model import Node
    from converters.scheduler import columns as columns_module

    class Other:
        def __init__(self, i):
            self.id, self.deps, self.kind = i, (i,), "other"

        @property
        def duration_ns(self):
            return -self.id

    names = ("id", "deps", "kind", "duration_ns")
    objects = [Node(3, "a", NodeKind.COMPUTE, 5, [1, 2]), Other(7), Node(4, "b", NodeKind.SEND), Other(8)]
    expected = tuple([getattr(o, name) for o in objects] for name in names)
    assert _loop.columns(objects, names) == expected
    assert columns_module.columns(objects, names) == expected
    saved, columns_module._native_columns = columns_module._native_columns, None
    try:
        assert columns_module.columns(objects, names) == expected  # the stand-in without C
    finally:
        columns_module._native_columns = saved
    assert _loop.columns([], names) == ([], [], [], []) and _loop.columns(objects, ()) == ()
    with pytest.raises(AttributeError, match="size"):
        _loop.columns(objects, ("id", "size"))  # Other has no size
    with pytest.raises(ValueError, match="at most 8"):
        _loop.columns(objects, ("id",) * 9)


def _finishes(trace: ExecutionTrace) -> bool:
    return not isinstance(outcome(Engine(trace, _net()))[0], str)


def _scheduled(trace=None):
    """An engine that has run a small finished trace, its (starts, ends, cause), and the node
    that ends last (where the critical path starts)."""
    trace = trace or next(filter(_finishes, map(_finishing_trace, range(100))))
    engine = Engine(trace, _net())
    starts, ends, cause = engine.run()
    r = max(range(len(ends)), key=lambda p: max(ends[p], default=-1))
    return engine, starts, ends, cause, (r, ends[r].index(max(ends[r])))


@needs_c
def test_credit_path_in_c_is_its_python_specification():
    """The walk back and its sums: the same steps, categories and rows, in the same order."""
    for seed in range(60):
        trace = _finishing_trace(seed)
        if not _finishes(trace):
            continue
        engine, _, ends, cause, last = _scheduled(trace)
        steps, by_category, top = _credit_path(engine, ends, cause, last)
        with credits_in_python():
            assert (steps, by_category, top) == _credit_path(engine, ends, cause, last)
        assert steps >= 1 and sum(by_category.values()) == sum(row[2] for row in top)
        assert sum(row[3] for row in top) == steps


@needs_c
def test_credit_path_tells_categories_by_value_not_identity():
    """Consecutive nodes on the path whose groups are equal but distinct objects, and nodes of
    another rank with the very same kind and group objects: each (rank, kind, group) value is
    asked for its category once, and credited as its value says."""
    from types import SimpleNamespace as Obj

    first, second = int("1000000"), int("1000000")  # equal, two objects
    assert first is not second
    stride = 10
    nodes = [[Obj(kind="k", group=first, name="a"), Obj(kind="k", group=second, name="b"),
              Obj(kind="k", group=first, name="a")],
             [Obj(kind="k", group=first, name="a"), Obj(kind="m", group=None, name="c")]]
    # the path: (1, 1) <- (1, 0) <- (0, 2) <- (0, 1) <- (0, 0)
    cause = [[-1, 0, 1], [2, 10]]
    ends = [[5, 7, 12], [20, 26]]
    asked = []

    def category_of(r, node):
        asked.append((r, node.kind, node.group))
        return f"{r}{node.kind}"

    steps, by_category, top = _loop.credit_path(cause, ends, stride, 1, 1, nodes, 100, category_of)
    assert asked == [(1, "m", None), (1, "k", first), (0, "k", first)]
    assert steps == 5
    assert by_category == {"1m": 6, "1k": 8, "0k": 12}
    assert top == [("1m", "c", 6, 1), ("1k", "a", 8, 1), ("0k", "a", 10, 2), ("0k", "b", 2, 1)]


@needs_c
def test_credit_path_leaves_odd_tables_to_python():
    """A time that is no int of 64 bits, or a cause outside the tables: the C declines (None) and
    the Python sums the times or raises what it raises."""
    engine, _, ends, cause, last = _scheduled()
    nodes = [p.nodes for p in engine.progs]
    limit = sum(map(len, nodes)) + 1

    def in_c(ends, cause, last=last):
        return _loop.credit_path(cause, ends, engine.stride, *last, nodes, limit, lambda r, node: "x")

    assert in_c(ends, cause) is not None
    huge = [list(e) for e in ends]
    huge[last[0]][last[1]] = 1 << 70  # past 64 bits: Python's ints sum it
    assert in_c(huge, cause) is None
    steps, by_category, _ = _credit_path(engine, huge, cause, last)
    assert sum(by_category.values()) >= 1 << 70
    floating = [list(e) for e in ends]
    floating[last[0]][last[1]] = float(floating[last[0]][last[1]])
    assert in_c(floating, cause) is None
    broken = [list(c) for c in cause]
    broken[last[0]][last[1]] = len(ends) * engine.stride + 1  # (a position past the last rank)
    assert in_c(ends, broken) is None
    with pytest.raises(IndexError):
        _credit_path(engine, ends, broken, last)
    assert in_c(ends, cause, (len(ends), 0)) is None and in_c(ends, cause, (0, -1)) is None


@needs_c
def test_credit_path_raises_what_category_of_raises():
    engine, _, ends, cause, last = _scheduled()
    nodes = [p.nodes for p in engine.progs]

    def failing(r, node):
        raise KeyError("no such group")

    with pytest.raises(KeyError, match="no such group"):
        _loop.credit_path(cause, ends, engine.stride, *last, nodes, 10**6, failing)
