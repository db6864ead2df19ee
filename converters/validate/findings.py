"""What the validator reports: one `Finding` per problem, rendered as text or JSON.

A finding's code is stable (see the table in `converters.validate`); its title is the fixed
few words that go with the code; its message is the one-line detail a user acts on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

import orjson

from ..model import Group, Node

ERROR, WARNING, INFO = "error", "warning", "info"
_SEVERITY_OF_LETTER = {"E": ERROR, "W": WARNING, "I": INFO}


@dataclass(slots=True)
class Finding:
    code: str  # e.g. "E042"
    check: str  # the check that found it, e.g. "collectives"
    message: str  # one line, without the code and title
    ranks: list[int] = field(default_factory=list)
    group: dict[str, Any] | None = None  # {"kind", "id", "label", "members"}
    node: dict[str, Any] | None = None  # {"id", "name"}
    microbatch: int | None = None
    source: str | None = None  # "file:line"

    @property
    def severity(self) -> str:
        return _SEVERITY_OF_LETTER[self.code[0]]

    @property
    def title(self) -> str:
        from . import CODES

        return CODES.get(self.code, "")

    def text(self) -> str:
        parts = [f"{self.code} {self.title}"]
        if self.group:
            parts.append(f"group {self.group['label']} [{format_ranks(self.group['members'], '..')}]")
        parts.append(self.message)
        if self.microbatch is not None and "microbatch" not in self.message:
            parts.append(f"microbatch {self.microbatch}")
        if self.node:
            parts.append(f'node {self.node["id"]} "{self.node["name"]}"')
        if self.source:
            parts.append(self.source)
        return " · ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "severity": self.severity,
            "check": self.check,
            "title": self.title,
            "message": self.message,
            "ranks": self.ranks,
            "group": self.group,
            "node": self.node,
            "microbatch": self.microbatch,
            "source": self.source,
            "text": self.text(),
        }


def group_ref(group: Group | None, gid: int | None = None, world: Iterable[int] = ()) -> dict[str, Any]:
    """The `group` field of a finding: a known group, an unknown id, or all ranks (None)."""
    if group is not None:
        return {"kind": group.kind, "id": group.id, "label": group.label, "members": list(group.members)}
    if gid is None:
        members = sorted(world)
        return {"kind": "world", "id": None, "label": "all ranks", "members": members}
    return {"kind": "", "id": gid, "label": f"pg {gid}", "members": []}


def node_ref(node: Node | None) -> dict[str, Any] | None:
    return None if node is None else {"id": node.id, "name": node.name}


def format_ranks(ranks: Iterable[int], dots: str = "-") -> str:
    """Compact rank list: `96..103`, `0-4,6,7`, `68..124 step 8`; empty shows as `none`."""
    values = sorted(set(ranks))
    if not values:
        return "none"
    if len(values) > 4:
        step = values[1] - values[0]
        if step > 1 and all(b - a == step for a, b in zip(values, values[1:])):
            return f"{values[0]}..{values[-1]} step {step}"
    runs: list[str] = []
    start = prev = values[0]
    for v in values[1:] + [None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        if prev == start:
            runs.append(str(start))
        elif prev == start + 1:
            runs.append(f"{start},{prev}")
        else:
            runs.append(f"{start}{dots}{prev}")
        if v is not None:
            start = prev = v
    return ",".join(runs)


def rank_words(ranks: Iterable[int]) -> str:
    """`rank 5` or `ranks 0-4,6,7`."""
    values = sorted(set(ranks))
    return f"rank {values[0]}" if len(values) == 1 else f"ranks {format_ranks(values)}"


def format_bytes(size: int) -> str:
    return f"{size} B"


@dataclass
class Report:
    """All findings of one run, with what is needed for the summary line."""

    findings: list[Finding]
    checks: list[str]  # names of the checks that ran, in order
    ranks: int  # how many ranks were checked (processes, for a Chrome trace)
    seconds: float
    unit: str = "rank"  # what `ranks` counts: "rank", or "process" for a Chrome trace's pids

    def counts(self) -> dict[str, int]:
        counts = {ERROR: 0, WARNING: 0, INFO: 0}
        for f in self.findings:
            counts[f.severity] += 1
        return counts

    @property
    def errors(self) -> int:
        return self.counts()[ERROR]

    def summary(self) -> str:
        c = self.counts()
        parts = [_plural(c[ERROR], "error"), _plural(c[WARNING], "warning")]
        if c[INFO]:
            parts.append(_plural(c[INFO], "note"))
        return (
            f"validate: {', '.join(parts)} · {_plural(self.ranks, self.unit)} · "
            f"{_plural(len(self.checks), 'check')} · {self.seconds:.1f} s"
        )

    def by_check(self) -> dict[str, list[Finding]]:
        grouped: dict[str, list[Finding]] = {name: [] for name in self.checks}
        for f in self.findings:
            grouped.setdefault(f.check, []).append(f)
        return grouped

    def text(self, max_per_check: int = 20) -> str:
        lines: list[str] = []
        for check, found in self.by_check().items():
            if not found:
                continue
            lines.append(f"{check}: {_plural(len(found), 'finding')}")
            for f in found[:max_per_check]:
                lines.append(f"  {f.text()}")
            hidden = len(found) - max_per_check
            if hidden > 0:
                codes = sorted({f.code for f in found[max_per_check:]})
                lines.append(f"  ... {hidden} more ({', '.join(codes)}); raise --max-per-check to see them")
        lines.append(self.summary())
        return "\n".join(lines) + "\n"

    def json(self, max_per_check: int = 20) -> bytes:
        shown: list[dict[str, Any]] = []
        hidden: dict[str, int] = {}
        for check, found in self.by_check().items():
            shown.extend(f.as_dict() for f in found[:max_per_check])
            if len(found) > max_per_check:
                hidden[check] = len(found) - max_per_check
        c = self.counts()
        document = {
            "summary": {
                "errors": c[ERROR], "warnings": c[WARNING], "notes": c[INFO],
                _plural_word(self.unit): self.ranks, "checks": self.checks, "seconds": round(self.seconds, 3),
                "by_check": {name: len(found) for name, found in self.by_check().items()},
                "not_shown": hidden,
            },
            "findings": shown,
        }
        return orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {_plural_word(word)}"


def _plural_word(word: str) -> str:
    return word + ("es" if word.endswith("s") else "s")
