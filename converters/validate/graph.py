"""Per-rank graph structure: ids, dependencies, cycles and work that can never run.

Checked once per distinct node list (ranks that share a list share its structure). Each kind
of problem is reported once per list, naming the first node and how many more there are, so
a broken 1024-rank set gives a readable list rather than millions of lines.
"""

from __future__ import annotations

from collections import deque
from itertools import chain, compress
from operator import lt

from ..scheduler.columns import columns
from .context import Context, SharedList
from .findings import Finding

CHECK = "graph"


def check_graph(ctx: Context) -> list[Finding]:
    findings: list[Finding] = []
    for shared in ctx.shared:
        findings.extend(_check_list(ctx, shared))
    return findings


def _more(count: int, what: str = "node") -> str:
    return "" if count <= 1 else f" (and {count - 1} more {what}s)"


def _clean_fast(shared: SharedList) -> bool:
    """True when the list obviously has no graph problem: unique ascending ids, every
    dependency an existing earlier node, no ctrl_deps. Mostly C-level work, for big sets."""
    if not shared.in_id_order:
        return False
    ids = shared.ids
    deps, ctrl_deps = columns(shared.nodes, ("deps", "ctrl_deps"))
    if any(map(bool, ctrl_deps)):
        return False
    if not set(chain.from_iterable(deps)) <= set(ids):
        return False
    has_deps = list(map(bool, deps))  # each node with dependencies: its latest one comes before it
    return all(map(lt, map(max, compress(deps, has_deps)), compress(ids, has_deps)))


def _check_list(ctx: Context, shared: SharedList) -> list[Finding]:
    if _clean_fast(shared):
        return []
    nodes = shared.nodes
    rank = shared.ranks[0]
    ranks = shared.rank_ids
    who = shared.who()
    findings: list[Finding] = _edges_only_in_ctrl_deps(ctx, shared)

    index: dict[int, int] = {}
    duplicates: list[int] = []
    for i, node in enumerate(nodes):
        if node.id in index:
            duplicates.append(i)
        else:
            index[node.id] = i
    if duplicates:
        first = nodes[duplicates[0]]
        other = nodes[index[first.id]]
        findings.append(ctx.find(
            "E001", CHECK,
            f'{who}: node id {first.id} is used by "{other.name}" and "{first.name}"{_more(len(duplicates), "duplicate")};'
            " dependencies on it are ambiguous",
            ranks=ranks, node=first, rank=rank))

    missing: list[tuple[int, int]] = []  # (node index, missing dep id)
    self_deps: list[int] = []
    in_order = True  # every dependency points to an earlier node: no cycle possible
    for i, node in enumerate(nodes):
        for deps in (node.deps, node.ctrl_deps):
            for d in deps:
                j = index.get(d)
                if j is None:
                    missing.append((i, d))
                elif j >= i:
                    if j == i:
                        self_deps.append(i)
                    else:
                        in_order = False
    if missing:
        i, d = missing[0]
        node = nodes[i]
        findings.append(ctx.find(
            "E002", CHECK,
            f"{who}: node {node.id} depends on node {d}, which is not in the file{_more(len(missing), 'dangling dependencie')}",
            ranks=ranks, node=node, rank=rank))
    if self_deps:
        node = nodes[self_deps[0]]
        findings.append(ctx.find(
            "E003", CHECK,
            f"{who}: node {node.id} depends on itself and can never start{_more(len(self_deps))}",
            ranks=ranks, node=node, rank=rank))
    if in_order and not missing and not self_deps:
        return findings
    findings.extend(_blocked_work(ctx, shared, index, {i for i, _ in missing}, set(self_deps)))
    return findings


def _edges_only_in_ctrl_deps(ctx: Context, shared: SharedList) -> list[Finding]:
    """Ordering edges that only `ctrl_deps` holds: ASTRA-sim's old feeder ignores `ctrl_deps`
    (FORMATS.md §1), so such a node may start before the nodes it waits for there."""
    offenders = [node for node in shared.nodes if node.ctrl_deps and not set(node.ctrl_deps) <= set(node.deps)]
    if not offenders:
        return []
    first = offenders[0]
    edges = [d for d in first.ctrl_deps if d not in first.deps]
    shown = ", ".join(map(str, edges[:3])) + (" ..." if len(edges) > 3 else "")
    return [ctx.find(
        "W006", CHECK,
        f"{shared.who()}: node {first.id} waits for node{'s' if len(edges) > 1 else ''} {shown} only through ctrl_deps, "
        f"which ASTRA-sim's old feeder ignores{_more(len(offenders))}; `et-convert SET --from chakra --to chakra` "
        "rewrites them into data_deps",
        ranks=shared.rank_ids, node=first, rank=shared.ranks[0])]


def _blocked_work(ctx: Context, shared: SharedList, index: dict[int, int],
                  poisoned: set[int], self_deps: set[int]) -> list[Finding]:
    """Run the graph as a simulator would (Kahn's algorithm) and explain what never runs."""
    nodes = shared.nodes
    rank = shared.ranks[0]
    n = len(nodes)
    succ: list[list[int]] = [[] for _ in range(n)]
    indegree = [0] * n
    for i, node in enumerate(nodes):
        seen: set[int] = set()
        for d in (*node.deps, *node.ctrl_deps):
            j = index.get(d)
            if j is None or j in seen:
                continue
            seen.add(j)
            succ[j].append(i)
            indegree[i] += 1
        if i in poisoned:
            indegree[i] += 1  # a missing dependency never completes
    ready = deque(i for i in range(n) if indegree[i] == 0)
    done = 0
    while ready:
        i = ready.popleft()
        done += 1
        for k in succ[i]:
            indegree[k] -= 1
            if indegree[k] == 0:
                ready.append(k)
    if done == n:
        return []
    stuck = {i for i in range(n) if indegree[i] > 0}
    findings: list[Finding] = []
    cycle = _find_cycle(stuck - self_deps, succ)
    if cycle:
        shown = cycle if len(cycle) <= 8 else cycle[:6]
        path = " -> ".join(f'{nodes[i].id} "{nodes[i].name}"' for i in shown)
        path += f" -> ... ({len(cycle)} nodes)" if len(shown) < len(cycle) else ""
        path += f' -> {nodes[cycle[0]].id} "{nodes[cycle[0]].name}"'
        findings.append(ctx.find(
            "E004", "graph", f"{shared.who()}: dependency cycle {path}",
            ranks=shared.rank_ids, node=nodes[cycle[0]], rank=rank))
    blocked = sorted(stuck - poisoned - self_deps - set(cycle))
    if blocked:
        first = nodes[blocked[0]]
        findings.append(ctx.find(
            "E005", "graph",
            f"{shared.who()}: {len(blocked)} node{'s' if len(blocked) != 1 else ''} can never run: they wait on"
            " a cycle, a missing node or a self-dependency",
            ranks=shared.rank_ids, node=first, rank=rank))
    return findings


def _find_cycle(stuck: set[int], succ: list[list[int]]) -> list[int]:
    """One cycle among `stuck` nodes (indices in program order), or [] when there is none.

    Nodes that nothing stuck depends on cannot be on a cycle: peel them off from the sink side;
    every node left then has a stuck successor, so walking successors must close a cycle.
    """
    remaining = set(stuck)
    out_degree = {i: sum(1 for k in succ[i] if k in remaining) for i in remaining}
    preds: dict[int, list[int]] = {i: [] for i in remaining}
    for i in remaining:
        for k in succ[i]:
            if k in remaining:
                preds[k].append(i)
    sinks = deque(i for i in remaining if out_degree[i] == 0)
    while sinks:
        i = sinks.popleft()
        remaining.discard(i)
        for p in preds[i]:
            if p in remaining:
                out_degree[p] -= 1
                if out_degree[p] == 0:
                    sinks.append(p)
    if not remaining:
        return []
    position: dict[int, int] = {}
    path: list[int] = []
    current = min(remaining)
    while current not in position:
        position[current] = len(path)
        path.append(current)
        current = min(k for k in succ[current] if k in remaining)
    cycle = path[position[current]:]
    start = cycle.index(min(cycle))  # deterministic: start at the earliest node
    return cycle[start:] + cycle[:start]
