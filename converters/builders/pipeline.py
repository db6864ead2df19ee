"""Pipeline schedules: the order in which one stage runs forwards and backwards of microbatches."""

from __future__ import annotations

from typing import Literal

Step = tuple[Literal["F", "B"], int]  # ("F", microbatch) or ("B", microbatch)


def warmup_count(stages: int, stage: int, microbatches: int) -> int:
    """1F1B warmup forwards on `stage`: min(P - s - 1, M)."""
    return min(stages - stage - 1, microbatches)


def one_f_one_b(stages: int, stage: int, microbatches: int) -> list[Step]:
    """Non-interleaved 1F1B: W warmup forwards, M - W (F, B) pairs, W cooldown backwards."""
    w = warmup_count(stages, stage, microbatches)
    order: list[Step] = [("F", m) for m in range(w)]
    for i in range(microbatches - w):
        order.append(("F", w + i))
        order.append(("B", i))
    order.extend(("B", m) for m in range(microbatches - w, microbatches))
    return order


def gpipe(stages: int, stage: int, microbatches: int) -> list[Step]:
    """All forwards, then all backwards (in reverse microbatch order is not needed: FIFO)."""
    return [("F", m) for m in range(microbatches)] + [("B", m) for m in range(microbatches)]


def schedule_for(name: str, stages: int, stage: int, microbatches: int) -> list[Step]:
    if name == "1f1b":
        return one_f_one_b(stages, stage, microbatches)
    if name == "gpipe":
        return gpipe(stages, stage, microbatches)
    raise ValueError(f"unknown pipeline schedule {name!r} (1f1b, gpipe)")


def phase_of(stages: int, stage: int, microbatches: int, index: int) -> str:
    """Megatron's mg_state for the index-th step of the 1F1B order: warmup, steady or cooldown."""
    w = warmup_count(stages, stage, microbatches)
    if index < w:
        return "warmup"
    if index < w + 2 * (microbatches - w):
        return "steady"
    return "cooldown"
