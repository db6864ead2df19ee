"""The network cost model: how long a collective or a point-to-point transfer takes.

Parameters come per group kind (`tp`, `dp`, `pp`, `ep`, `dp_ep`, `all`) or per group size
(`[size.8]`: groups of 8 members) with a `default` behind them. Each key is looked up on the
command line (`--net KIND.key=`, then `--net size.N.key=`, then `--net key=`), then in the TOML
file (`[kind]`, then `[size.N]`, then `[default]`), then in the built-in values for the kind;
the first one found wins. Size tables apply to collectives, not to point-to-point transfers.

    [default]                 # across nodes
    bandwidth_gbps = 50       # per rank and direction, GB/s as ASTRA-sim reads it (GB = 2^30 B)
    latency_ns = 5000         # per ring step
    chunks = 1                # a collective runs as this many chunks, one after another
    algorithm = "ring"        # ring or direct
    endpoint_delay_ns = 10    # fixed cost per step at each end (ASTRA-sim's endpoint-delay)
    local_mem_gbps = 1600     # local memory bandwidth for reductions (GB = 10^9 B)
    topology = "flat"         # flat or ring (see below)

    [tp]                      # inside a node (NVLink)
    bandwidth_gbps = 200
    latency_ns = 1000

Built-in defaults: tp and ep groups are assumed to sit inside one node (NVLink class,
200 GB/s, 1 µs per step); every other kind (dp, pp, dp_ep, embedding, all, unknown) crosses
nodes (50 GB/s = 400 Gb/s per GPU, 5 µs per step). All kinds: 1 chunk, ring, 10 ns endpoint
delay, 1600 GB/s local memory. A group whose kind has no table of its own (embedding, or a
group without a kind) uses `[pp]` for embedding groups and `[default]` otherwise; sends and
receives without a group use `[pp]` (they are pipeline transfers in every input we read).

Formula (ASTRA-sim's ring on its analytical, congestion-unaware backend, with one chunk
active at a time). For a group of n ranks, S bytes, C chunks, bandwidth B bytes/ns
(= bandwidth_gbps * 2^30 / 10^9), latency L, endpoint delay E, local memory M bytes/ns:

    chunk = S / C
    step  = L + E + msg / B
    time  = C * (steps * step + reductions * 3 * msg / M)

    collective       steps          msg          reductions (2 reads + 1 write each)
    ALL_REDUCE       2(n-1)         chunk / n    n-1   (reduce-scatter, then all-gather)
    REDUCE_SCATTER   n-1            chunk / n    n-1
    ALL_GATHER       n-1            chunk        0     (S is the per-rank input)
    ALL_TO_ALL       n(n-1)/2       chunk / n    0     (each piece travels d hops, d = 1..n-1)
    BROADCAST        n-1            chunk        0     (approximation: ASTRA-sim does not simulate it)
    REDUCE           n-1            chunk        n-1   (approximation)
    GATHER, SCATTER  n-1            chunk / n    0     (approximation)
    REDUCE_SCATTER_BLOCK  n-1       chunk / n    n-1   (approximation)
    BARRIER          n-1            0            0

With `algorithm = "direct"` (every rank talks to every other at once; uncalibrated) each phase
is one step that carries (n-1) messages: ALL_REDUCE two phases, the others one.

A one-member collective costs 0. A point-to-point transfer costs L + S / B.

Chunks as ASTRA-sim cuts them: chunks of S // C bytes until S is covered, so a size C does not
divide runs C + 1 chunks of that size (1 MiB + 1 B in 4 chunks: 5 chunks of 256 KiB, +25 %;
measured for all-reduce, all-gather, reduce-scatter and all-to-all, ring of 8).

`topology = "ring"` is ASTRA-sim's analytical Ring (what `network_astra_ring8.toml` sets): all
ranks sit on one bidirectional ring in rank order and a message pays L once per hop, the
shorter way round (the source's `compute_hops_count`: hops x latency + size / bandwidth). A
group's ring runs over its members in rank order, so a step between members h hops apart
costs h x L: a DP group of 4 with members 4 apart on a ring of 16 pays 4 L per step, a TP group
[0..3] pays 1, 1, 1 and 3. ASTRA-sim starts a rank's next step when its neighbour's message
has arrived, chunk after chunk, so the latency of a collective is that of the slowest chain of
C x steps consecutive ring edges (every edge steps // n times plus the heaviest run of the
rest). A send costs hops x L + S / B. With `flat` (the default) every step costs L, whatever
the members. Measured with ASTRA-sim (tests/test_scheduler_calibration.py): all-reduce 1 MiB on
[0, 4] of a ring of 8 costs 37,620 ns against 25,620 on [0, 1]; [0, 1, 2, 3] 50,000,
[0, 2, 4, 6] 56,000. Not modelled: the members of such a group finish up to one hop's latency
apart in ASTRA-sim (the member after the long edge last); here all end with the last.

What ASTRA-sim does with several collectives on one rank: they run one after another in issue
order (two all-reduces issued together on 8 ranks: the first ends at 65,440 ns, the second at
129,880, as here), although its queue is LIFO; also in different groups (rank 0 issuing an
all-reduce in [0, 1, 2, 3] and one in [0, 4] at once: 1 MiB each, the second ends at 86,620,
here 86,605). Not modelled: a member that issued a collective early ends it up to one ring step
before the member that issued it last (in that case rank 4 ends the [0, 4] all-reduce at
82,179, rank 0 at 86,620); here every member ends with the last.

Calibration: ring of 8 ranks, 50 GB/s, 500 ns, 4 chunks, endpoint delay 10 ns, local memory
1600 GB/s reproduces ASTRA-sim's iteration times for ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER
and ALL_TO_ALL of 1 and 16 MiB within 0.05% (tests/test_scheduler_calibration.py); with
`topology = "ring"` whole workloads with TP, DP, EP and PP groups agree within 0.5 %
(benchmarks/fidelity.py, the figures in the README).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Mapping

from ..diagnostics import InputError
from ..model import CollType

KINDS = ("tp", "dp", "pp", "ep", "dp_ep", "all")
TABLES = ("default",) + KINDS
ALGORITHMS = ("ring", "direct")
TOPOLOGIES = ("flat", "ring")
_GIB_PER_GB = (1 << 30) / 1e9  # ASTRA-sim reads "GB/s" bandwidths as GiB per second


@dataclass(frozen=True)
class LinkParams:
    bandwidth_gbps: float = 50.0
    latency_ns: float = 5000.0
    chunks: int = 1
    algorithm: str = "ring"
    endpoint_delay_ns: float = 10.0
    local_mem_gbps: float = 1600.0
    topology: str = "flat"

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


KEYS = tuple(f.name for f in fields(LinkParams))

NETWORK_DEFAULT = LinkParams()
NVLINK_DEFAULT = LinkParams(bandwidth_gbps=200.0, latency_ns=1000.0)
BUILTIN: dict[str, LinkParams] = {
    "default": NETWORK_DEFAULT,
    "tp": NVLINK_DEFAULT,
    "ep": NVLINK_DEFAULT,
}

# Which table a model group kind reads; kinds not listed read [default].
_TABLE_OF_KIND = {
    "tp": "tp", "dp": "dp", "pp": "pp", "ep": "ep", "dp_ep": "dp_ep",
    "all": "all", "world": "all", "embedding": "pp",
}


def table_of(kind: str | None) -> str:
    return _TABLE_OF_KIND.get(kind or "", "default")


class Network:
    """Link parameters per group kind and size, and the cost functions over them (integer ns).

    `tables` (from the file) and `command_line` both hold "default", kind names, and "size" ->
    {members: {...}}. See the module docstring for the order.
    """

    def __init__(self, tables: Mapping[str, Any] | None = None, origin: str = "built-in defaults",
                 command_line: Mapping[str, Mapping[str, Any]] | None = None):
        self.origin = origin
        self._file = dict(tables or {})
        self._cli = dict(command_line or {})
        self._file_sizes = _size_tables(self._file)
        self._cli_sizes = _size_tables(self._cli)
        self._sizes = sorted(set(self._file_sizes) | set(self._cli_sizes))
        self._resolved: dict[tuple[str, int | None], LinkParams] = {}
        self._cache: dict[tuple, int] = {}

    def params(self, kind: str | None, members: int | None = None) -> LinkParams:
        """Parameters for a group of this kind and (for `[size.N]` tables) member count."""
        table = table_of(kind)
        size = members if members in self._sizes else None
        key = (table, size)
        params = self._resolved.get(key)
        if params is None:
            params = BUILTIN.get(table, NETWORK_DEFAULT)
            layers = [self._file.get("default", {}), self._file_sizes.get(size, {})]
            if table != "default":
                layers.append(self._file.get(table, {}))
            layers += [self._cli.get("default", {}), self._cli_sizes.get(size, {})]
            if table != "default":
                layers.append(self._cli.get(table, {}))
            for layer in layers:
                if layer:  # (most are empty: nothing to replace)
                    params = replace(params, **dict(layer))
            params = self._resolved[key] = params
        return params

    def describe(self) -> dict[str, Any]:
        """What the timeline metadata records as the network parameters used."""
        out: dict[str, Any] = {"source": self.origin}
        for table in TABLES:
            out[table] = self.params(table).as_dict()
        if self._sizes:
            out["size"] = {str(n): {**self._file_sizes.get(n, {}), **self._cli_sizes.get(n, {})} for n in self._sizes}
        return out

    def collective_ns(self, coll: CollType | None, size: int, members: int, kind: str | None,
                      hops: tuple[int, ...] | None = None) -> int:
        """`hops`: the ring's edge lengths (`ring_hops`) when the kind's topology is "ring"."""
        key = (coll, size, members, kind, hops)
        cached = self._cache.get(key)
        if cached is None:
            cached = self._cache[key] = _collective_ns(self.params(kind, members), coll, size, members, hops)
        return cached

    def p2p_ns(self, size: int, kind: str | None, hops: int = 1) -> int:
        key = ("p2p", size, kind or "pp", hops)
        cached = self._cache.get(key)
        if cached is None:
            p = self.params(kind or "pp")
            cached = self._cache[key] = round(hops * p.latency_ns + size / (p.bandwidth_gbps * _GIB_PER_GB))
        return cached

    def uses_ring(self) -> bool:
        """Whether any group kind or size pays latency per hop of a ring of all ranks."""
        return any(self.params(t).topology == "ring" for t in TABLES) or any(
            self.params(t, n).topology == "ring" for t in TABLES for n in self._sizes)

    def on_ring(self, kind: str | None, members: int | None = None) -> bool:
        """Whether this kind's messages pay latency per hop of a ring of all ranks."""
        return self.params(kind, members).topology == "ring"


def ring_distance(a: int, b: int, world: int) -> int:
    """Hops between ranks a and b on a bidirectional ring of `world` ranks in rank order (the
    shorter way round; ASTRA-sim's analytical Ring)."""
    d = (b - a) % world
    return min(d, world - d) if world else 1


def ring_hops(members: tuple[int, ...], world: int) -> tuple[int, ...]:
    """Hops of each edge of a group's logical ring (members in ascending order, the last back to
    the first) laid on the physical ring of `world` ranks."""
    ordered = sorted(members)
    return tuple(ring_distance(a, b, world) for a, b in zip(ordered, ordered[1:] + ordered[:1]))


def _path_hops(hops: tuple[int, ...], steps: int) -> int:
    """Hops on the slowest chain of `steps` consecutive ring steps.

    In ASTRA-sim a rank starts a step when the previous step's message from its ring neighbour
    has arrived, across chunks too, so the last message to arrive has crossed `steps`
    consecutive edges of the logical ring: every edge steps // n times, plus the heaviest run of
    steps % n edges.
    """
    n = len(hops)
    laps, rest = divmod(steps, n)
    total = laps * sum(hops)
    if rest:
        doubled = hops + hops
        total += max(sum(doubled[i:i + rest]) for i in range(n))
    return total


def _size_tables(tables: Mapping[str, Any]) -> dict[int, Mapping[str, Any]]:
    """The `size` tables keyed by member count."""
    return {int(n): values for n, values in tables.get("size", {}).items()}


# collective -> (steps(n), message as a fraction of a chunk(n), reductions(n)) for the ring
_RING = {
    CollType.ALL_REDUCE: (lambda n: 2 * (n - 1), lambda n: 1 / n, lambda n: n - 1),
    CollType.REDUCE_SCATTER: (lambda n: n - 1, lambda n: 1 / n, lambda n: n - 1),
    CollType.ALL_GATHER: (lambda n: n - 1, lambda n: 1.0, lambda n: 0),
    CollType.ALL_TO_ALL: (lambda n: n * (n - 1) // 2, lambda n: 1 / n, lambda n: 0),
    CollType.BROADCAST: (lambda n: n - 1, lambda n: 1.0, lambda n: 0),
    CollType.REDUCE: (lambda n: n - 1, lambda n: 1.0, lambda n: n - 1),
    CollType.GATHER: (lambda n: n - 1, lambda n: 1 / n, lambda n: 0),
    CollType.SCATTER: (lambda n: n - 1, lambda n: 1 / n, lambda n: 0),
    CollType.REDUCE_SCATTER_BLOCK: (lambda n: n - 1, lambda n: 1 / n, lambda n: n - 1),
    CollType.BARRIER: (lambda n: n - 1, lambda n: 0.0, lambda n: 0),
}


def _collective_ns(p: LinkParams, coll: CollType | None, size: int, n: int, hops: tuple[int, ...] | None = None) -> int:
    if n <= 1:
        return 0
    steps_of, msg_of, reductions_of = _RING.get(coll if coll is not None else CollType.ALL_REDUCE, _RING[CollType.ALL_REDUCE])
    bandwidth = p.bandwidth_gbps * _GIB_PER_GB  # bytes per ns
    memory = p.local_mem_gbps  # bytes per ns
    chunk, chunks = split_into_chunks(size, p.chunks)
    msg = chunk * msg_of(n)
    reductions = reductions_of(n)
    if p.algorithm == "direct":
        phases = 2 if coll == CollType.ALL_REDUCE else 1
        fanout = n - 1
        per_chunk = phases * (p.latency_ns + p.endpoint_delay_ns + fanout * msg / bandwidth)
        per_chunk += (fanout * 3 * msg / memory) if reductions else 0.0
        return round(chunks * per_chunk)
    steps = steps_of(n)
    if hops is None or p.topology != "ring" or len(hops) != n:
        per_chunk = steps * (p.latency_ns + p.endpoint_delay_ns + msg / bandwidth)
        per_chunk += reductions * 3 * msg / memory
        return round(chunks * per_chunk)
    per_chunk = steps * (p.endpoint_delay_ns + msg / bandwidth) + reductions * 3 * msg / memory
    return round(chunks * per_chunk + p.latency_ns * _path_hops(hops, chunks * steps))


def split_into_chunks(size: int, chunks: int) -> tuple[int, int]:
    """(bytes per chunk, chunk count) as ASTRA-sim splits a collective: chunks of size // chunks
    bytes until the size is covered, so a size that does not divide runs one more chunk of the
    same size (1 MiB + 1 B in 4 chunks: 5 chunks of 256 KiB; measured, every collective)."""
    if size <= 0:
        return 0, chunks
    chunk = max(1, size // chunks)
    return chunk, -(-size // chunk)


# ---------------------------------------------------------------- reading the TOML file


def load_network(path: Path | None, overrides: Mapping[str, object] | None = None) -> Network:
    """The network for `--network FILE.toml` plus command-line overrides (either may be absent).

    `overrides` maps "key" (applies to every kind) or "kind.key" to a value, e.g.
    {"bandwidth_gbps": 50, "tp.latency_ns": 1000}.
    """
    tables: dict[str, Any] = {}
    origin = "built-in defaults"
    if path is not None:
        tables = read_network_file(Path(path))
        origin = Path(path).name
    command_line = parse_overrides(overrides) if overrides else {}
    if command_line:
        origin = f"{origin} + command line"
    return Network(tables, origin, command_line)


def read_network_file(path: Path) -> dict[str, Any]:
    where = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(where, f"cannot read network file: {e.strerror}") from None
    except UnicodeDecodeError:
        raise InputError(where, "network file is not UTF-8 text") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        line = re.search(r"line (\d+)", str(e))
        message = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(e))
        raise InputError(f"{where}:{line.group(1)}" if line else where, f"not valid TOML: {message}") from None
    tables: dict[str, Any] = {}
    for table, values in data.items():
        if table == "size" and isinstance(values, dict):
            sizes = {}
            for members, sub in values.items():
                name = f"size.{members}"
                if not members.isdigit() or int(members) < 1 or not isinstance(sub, dict):
                    raise InputError(_at(where, text, name), f"[{name}]: expected a table named size.N, N a member count of at least 1")
                sizes[members] = _checked_table(where, text, name, sub)
            tables["size"] = sizes
            continue
        if table not in TABLES:
            raise InputError(_at(where, text, table),
                             f"unknown table [{table}]; expected one of {', '.join(TABLES)} or size.N")
        if not isinstance(values, dict):
            raise InputError(_at(where, text, table), f"{table} must be a table [{table}], found a value")
        tables[table] = _checked_table(where, text, table, values)
    return tables


def _checked_table(where: str, text: str, table: str, values: dict) -> dict[str, Any]:
    checked = {}
    for key, value in values.items():
        try:
            checked[key] = check_value(key, value)
        except ValueError as e:
            raise InputError(_at(where, text, table, key), f"[{table}] {e}") from None
    return checked


def parse_overrides(overrides: Mapping[str, object]) -> dict[str, dict[str, Any]]:
    """`{"bandwidth_gbps": "50", "tp.latency_ns": 1000, "size.8.chunks": "2"}` ->
    {"default": {...}, "tp": {...}, "size": {"8": {...}}}, the shape of a network file."""
    tables: dict[str, dict[str, Any]] = {}
    for name, raw in overrides.items():
        table, _, key = name.rpartition(".")
        values = _override_table(tables, name, table or "default")
        value = _from_text(raw) if isinstance(raw, str) and key not in ("algorithm", "topology") else raw
        try:
            values[key] = check_value(key, value)
        except ValueError as e:
            raise InputError(None, f"network option {name}: {e}") from None
    return tables


def _override_table(tables: dict[str, dict[str, Any]], name: str, table: str) -> dict[str, Any]:
    """The table of `tables` an override named `name` sets: a kind's, "default", or `size.N`'s."""
    if table.startswith("size."):
        members = table.removeprefix("size.")
        if not members.isdigit() or int(members) < 1:
            raise InputError(None, f"network option {name}: expected size.N.KEY, N a member count of at least 1")
        return tables.setdefault("size", {}).setdefault(str(int(members)), {})
    if table not in TABLES:
        raise InputError(None, f"network option {name}: unknown group kind {table!r}; "
                               f"expected one of {', '.join(TABLES)} or size.N")
    return tables.setdefault(table, {})


def check_value(key: str, value: Any) -> Any:
    """The value if `key` takes it, else ValueError with what was expected."""
    if key not in KEYS:
        raise ValueError(f"unknown key {key!r}; expected one of {', '.join(KEYS)}")
    if key == "algorithm":
        if value not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}, found {value!r}")
        return value
    if key == "topology":
        if value not in TOPOLOGIES:
            raise ValueError(f"topology must be one of {', '.join(TOPOLOGIES)}, found {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{key} must be a number, found {value!r}")
    if key == "chunks":
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"chunks must be a whole number of at least 1, found {value!r}")
        return value
    if key in ("bandwidth_gbps", "local_mem_gbps"):
        if not value > 0 or value == float("inf"):
            raise ValueError(f"{key} must be greater than 0, found {value!r}")
        return float(value)
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"{key} must be 0 or more, found {value!r}")
    return float(value)


def _from_text(raw: str) -> Any:
    try:
        return int(raw)
    except ValueError:
        pass
    try:
        return float(raw)
    except ValueError:
        return raw


def _at(where: str, text: str, table: str, key: str | None = None) -> str:
    """'file:line' of `[table]` (or of `key` inside it) when it can be found, else 'file'."""
    lines = text.splitlines()
    header = re.compile(r"^\s*\[\s*" + re.escape(table) + r"\s*\]")
    any_header = re.compile(r"^\s*\[")
    for i, line in enumerate(lines):
        if header.match(line):
            if key is None:
                return f"{where}:{i + 1}"
            for j in range(i + 1, len(lines)):
                if any_header.match(lines[j]):
                    break
                if re.match(r"^\s*" + re.escape(key) + r"\s*=", lines[j]):
                    return f"{where}:{j + 1}"
            return f"{where}:{i + 1}"
        # dotted form: table.key = value at top level
        if key is not None and re.match(r"^\s*" + re.escape(table) + r"\s*\.\s*" + re.escape(key) + r"\s*=", line):
            return f"{where}:{i + 1}"
    return where
