"""Reader for OptimusPrime pipeline training logs (FORMATS.md §3): tokens -> `OptimusLog`.

The log is the stdout of every rank at once: lines of different ranks interleave, sometimes
inside one line (`... - step 2[rank:3 stage:3] ...`). So the text is read as a stream of
tokens (config values, the FX stage graph, per-stage step headers, per-layer forward totals,
ms/batch lines) wherever they occur, never line by line. Each token keeps its `file:line`.

Which step header a layer total belongs to is decided by the order of layer names each stage
prints (learned from its blocks that were not interleaved); when two headers are open at once,
a layer goes to the one that expects that layer next.
"""

from __future__ import annotations

import ast
import bisect
import re
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from ..diagnostics import Diagnostics, InputError, at
from .text import decode, not_utf8, read_bytes

_TOKENS = re.compile(
    r"(?P<header>\[rank:(?P<h_rank>\d+) stage:(?P<h_stage>\d+)\] transformer-block\(module\) forward time "
    r"\(no send/recv\) - step (?P<h_step>\d+))"
    r"|(?P<layer>layer\[(?P<l_name>[^\]\s]+)\]: total=(?P<l_total>\d+(?:\.\d+)?)ms, ops=(?P<l_ops>\d+), "
    r"avg/op=(?P<l_avg>\d+(?:\.\d+)?)ms)"
    r"|(?P<epoch>\| epoch\s+(?P<e_epoch>\d+) \|\s*(?P<e_batch>\d+)/\s*(?P<e_of>\d+) batches \|[^\n|]*\|"
    r"\s*ms/batch\s+(?P<e_ms>\d+(?:\.\d+)?))"
    r"|(?P<config>^> (?P<c_key>World size|World Size|GAS|GBS|MBS|TP|DP|PP): (?P<c_value>\d+)\s*$)"
    r"|(?P<stage2rank>stage2rank = (?P<s_map>\{[^}\n]*\}))"
    r"|(?P<special>special_nodes: (?P<sp_map>\{[^}\n]*\}))"
    r"|(?P<getitem>^n\.op:call_function, n\.name:(?P<g_name>\w+), n\.target:<built-in function getitem>, "
    r"n\.args:\((?P<g_of>\w+), (?P<g_index>\d+)\))"
    r"|(?P<fx>^n\.op:(?P<fx_op>\w+), n\.name:(?P<fx_name>\w+), n\.target:.*?, n\.args:.*, "
    r"n\.all_input_nodes:\[(?P<fx_inputs>[^\]\n]*)\]\s*$)",
    re.MULTILINE,
)
_SNIFF_MARKS = (b"transformer-block(module) forward time", b"stage2rank = {", b"special_nodes: {")


@dataclass(slots=True)
class LayerTime:
    name: str  # "embed", "0", ..., "lm_head"
    total_ns: int  # forward time summed over the step's microbatches
    ops: int
    where: str


@dataclass(slots=True)
class StageStep:
    """One `[rank:R stage:S] ... - step N` block and the layer totals that belong to it."""

    rank: int
    stage: int
    step: int
    where: str
    layers: list[LayerTime] = field(default_factory=list)


@dataclass(slots=True)
class FxNode:
    op: str  # placeholder, call_module, call_function, output
    name: str
    inputs: list[str]
    where: str
    getitem_of: str | None = None  # for getitem nodes: the submodule whose output they pick


@dataclass
class OptimusLog:
    file: str
    config: dict[str, int] = field(default_factory=dict)  # world, gas, gbs, mbs, tp, dp, pp
    config_where: dict[str, str] = field(default_factory=dict)
    stage2rank: dict[int, list[int]] = field(default_factory=dict)
    fx: dict[str, FxNode] = field(default_factory=dict)  # by name, in graph order
    special_nodes: dict[str, tuple[int, int]] = field(default_factory=dict)
    steps: list[StageStep] = field(default_factory=list)
    ms_per_batch: dict[int, tuple[int, str]] = field(default_factory=dict)  # batch -> (ns, where)
    batches_per_epoch: int | None = None


def sniff(head: bytes, path: Path | None = None) -> bool:
    return any(mark in head for mark in _SNIFF_MARKS)


def read_log(path: Path, diagnostics: Diagnostics, strict: bool = False) -> OptimusLog:
    name = str(path)
    data = read_bytes(path)
    # Ranks print whole lines, so a log that does not end in a newline was cut off; the cut
    # line may still match a token with a wrong number (`ms/batch 12` of `ms/batch 1234.5`).
    end = data.rfind(b"\n") + 1
    text = decode(data[:end], name)
    tail = data[end:]
    if tail.strip():
        try:
            tail.decode("utf-8")
        except UnicodeDecodeError as e:
            if e.start < len(tail) - 3:  # not just a character cut in half by the crash
                raise not_utf8(data, end + e.start, name) from None
        _cut_last_line(name, data.count(b"\n", 0, end) + 1, diagnostics, strict)
    return parse_text(text, name, diagnostics)


def _cut_last_line(name: str, number: int, diagnostics: Diagnostics, strict: bool) -> None:
    if strict:
        raise InputError(at(name, number), "last line is cut off (no newline at its end); the run may have crashed "
                                           "while writing it")
    diagnostics.warn(f"optimus-cut-off:{name}",
                     f"{at(name, number)}: last line is cut off; converted the {number - 1} complete lines before it")


def parse_text(text: str, file: str, diagnostics: Diagnostics) -> OptimusLog:
    log = OptimusLog(file)
    newlines = [match.start() for match in re.finditer("\n", text)]

    def where(pos: int) -> str:
        return at(file, bisect.bisect_right(newlines, pos - 1) + 1)

    tokens = []
    for match in _TOKENS.finditer(text):
        kind = match.lastgroup
        loc = where(match.start())
        if kind == "header":
            tokens.append(StageStep(int(match["h_rank"]), int(match["h_stage"]), int(match["h_step"]), loc))
        elif kind == "layer":
            total = int(Decimal(match["l_total"]) * 1_000_000)
            tokens.append(LayerTime(match["l_name"], total, int(match["l_ops"]), loc))
        elif kind == "epoch":
            batch = int(match["e_batch"])
            log.ms_per_batch[batch] = (int(Decimal(match["e_ms"]) * 1_000_000), loc)
            log.batches_per_epoch = int(match["e_of"])
        elif kind == "config":
            key = {"World size": "world", "World Size": "world"}.get(match["c_key"], match["c_key"].lower())
            _set_config(log, key, int(match["c_value"]), loc)
        elif kind == "stage2rank":
            log.stage2rank = _stage2rank(match["s_map"], loc)
        elif kind == "special":
            if not log.special_nodes:
                log.special_nodes = _special_nodes(match["sp_map"], loc)
        elif kind == "getitem":
            node = FxNode("call_function", match["g_name"], [match["g_of"]], loc, getitem_of=match["g_of"])
            log.fx.setdefault(node.name, node)
        elif kind == "fx":
            inputs = [x.strip() for x in match["fx_inputs"].split(",") if x.strip()]
            log.fx.setdefault(match["fx_name"], FxNode(match["fx_op"], match["fx_name"], inputs, loc))
    log.steps = _attribute_layers(tokens, diagnostics)
    return log


def _set_config(log: OptimusLog, key: str, value: int, loc: str) -> None:
    if key in log.config and log.config[key] != value:
        raise InputError(loc, f"{key} is {value} here but {log.config[key]} at {log.config_where[key]}")
    log.config[key] = value
    log.config_where.setdefault(key, loc)


def _literal(text: str, loc: str, what: str, expected: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise InputError(loc, f"cannot parse {what}: expected {expected}") from None


def _stage2rank(text: str, loc: str) -> dict[int, list[int]]:
    value = _literal(text, loc, "stage2rank", "a dict like {0: [0], 1: [1]}")
    ok = isinstance(value, dict) and all(
        isinstance(k, int) and isinstance(v, list) and v and all(isinstance(r, int) for r in v) for k, v in value.items()
    )
    if not ok:
        raise InputError(loc, "cannot parse stage2rank: expected a dict like {0: [0], 1: [1]}")
    return {k: list(v) for k, v in sorted(value.items())}


def _special_nodes(text: str, loc: str) -> dict[str, tuple[int, int]]:
    value = _literal(text, loc, "special_nodes", "a dict like {'getitem_3': (1, 7)}")
    ok = isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, tuple) and len(v) == 2 and all(isinstance(x, int) for x in v)
        for k, v in value.items()
    )
    if not ok:
        raise InputError(loc, "cannot parse special_nodes: expected a dict like {'getitem_3': (1, 7)}")
    return dict(value)


def _attribute_layers(tokens: list, diagnostics: Diagnostics) -> list[StageStep]:
    """Give every layer total to its step header, even where two ranks' output interleaved."""
    signatures = _layer_orders(tokens)
    steps: list[StageStep] = []
    open_steps: list[StageStep] = []
    for token in tokens:
        if isinstance(token, StageStep):
            steps.append(token)
            open_steps.append(token)
            continue
        step = _owner(token, open_steps, signatures)
        if step is None:
            diagnostics.warn(
                "optimus-orphan-layer",
                f"{token.where}: {{count}} layer line(s) belong to no open step header; ignored",
            )
            continue
        step.layers.append(token)
        expected = signatures.get(step.stage)
        if expected is not None and len(step.layers) >= len(expected):
            open_steps.remove(step)
    return steps


def _layer_orders(tokens: list) -> dict[int, tuple[str, ...]]:
    """Per stage, the layer names its step blocks list, from blocks no other header interrupts."""
    seen: dict[int, Counter] = {}
    for i, token in enumerate(tokens):
        if not isinstance(token, StageStep) or (i > 0 and isinstance(tokens[i - 1], StageStep)):
            continue
        names = []
        j = i + 1
        while j < len(tokens) and isinstance(tokens[j], LayerTime):
            names.append(tokens[j].name)
            j += 1
        if names and not (j < len(tokens) and isinstance(tokens[j], StageStep) and j == i + 1):
            seen.setdefault(token.stage, Counter())[tuple(names)] += 1
    return {stage: counts.most_common(1)[0][0] for stage, counts in seen.items()}


def _owner(layer: LayerTime, open_steps: list[StageStep], signatures) -> StageStep | None:
    """The open step that expects this layer next (the earliest such); else the newest without a known order."""
    for step in open_steps:
        expected = signatures.get(step.stage)
        if expected is not None and len(step.layers) < len(expected) and expected[len(step.layers)] == layer.name:
            return step
    unknown = [s for s in open_steps if s.stage not in signatures]
    return unknown[-1] if unknown else None
