"""Protobuf's varint, by hand: framing a message (a Chakra file's length prefixes) and the
`.pftrace` writer's fields. No protobuf import here: the `.pftrace` writer encodes every packet
by hand and loads protobuf only when it must (see writers/perfetto.py)."""

from __future__ import annotations

_SMALL_VARINTS = [bytes((n,)) for n in range(0x80)]  # lengths, ids and slots are mostly small
# Every value below 2**14 encoded (one or two bytes), and the same 14 bits followed by more (two
# bytes, both with the continuation bit): a varint is then a few table look-ups, 14 bits each,
# instead of a Python step per 7 bits (a measured trace's start times take 5 bytes).
_VARINTS_14 = _SMALL_VARINTS + [bytes(((n & 0x7F) | 0x80, n >> 7)) for n in range(0x80, 1 << 14)]
_CONTINUED_14 = [bytes(((n & 0x7F) | 0x80, (n >> 7) | 0x80)) for n in range(1 << 14)]


def varint(value: int) -> bytes:
    """An int as protobuf writes it (unsigned LEB128; a negative one as its 64-bit two's
    complement, ten bytes, as protobuf writes a negative int64)."""
    if 0 <= value < 0x4000:
        return _VARINTS_14[value]
    if value < 0:
        value += 1 << 64
    out = _CONTINUED_14[value & 0x3FFF]
    value >>= 14
    while value >= 0x4000:
        out += _CONTINUED_14[value & 0x3FFF]
        value >>= 14
    return out + _VARINTS_14[value]


def varints(values: list[int]) -> list[bytes]:
    """`varint` of each of `values`, by table look-ups in C when all are below 2**14 (lengths,
    small ids)."""
    if values and 0 <= min(values) and max(values) < 0x4000:
        return list(map(_VARINTS_14.__getitem__, values))
    return list(map(varint, values))
