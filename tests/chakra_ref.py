"""Read Chakra sets with the reference reader (mlc-chakra), independently of our own code."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from chakra.schema.protobuf.et_def_pb2 import COMM_COLL_NODE, COMM_RECV_NODE, COMM_SEND_NODE, GlobalMetadata, Node
from chakra.src.third_party.utils.protolib import decodeMessage, openFileRd

COMM_TYPES = (COMM_COLL_NODE, COMM_SEND_NODE, COMM_RECV_NODE)


@dataclass
class RefRank:
    metadata: GlobalMetadata
    nodes: list = field(default_factory=list)

    def attrs(self, node) -> dict:
        """name -> (oneof kind, value) as mlc-chakra reads them."""
        return {a.name: (a.WhichOneof("value"), getattr(a, a.WhichOneof("value"))) for a in node.attr}


def read_rank(path: Path) -> RefRank:
    with openFileRd(str(path)) as f:
        meta = GlobalMetadata()
        assert decodeMessage(f, meta), f"{path}: no GlobalMetadata"
        rank = RefRank(meta)
        while True:
            node = Node()
            if not decodeMessage(f, node):
                break
            rank.nodes.append(node)
    return rank


def rank_files(prefix: Path) -> dict[int, Path]:
    pattern = re.compile(re.escape(prefix.name) + r"\.(\d+)\.et$")
    found = {}
    for p in prefix.parent.iterdir():
        m = pattern.match(p.name)
        if m:
            found[int(m.group(1))] = p
    return dict(sorted(found.items()))


def read_groups(prefix: Path) -> dict[str, list[int]]:
    path = prefix.parent / f"{prefix.name}.comm_group.json"
    return json.loads(path.read_text()) if path.exists() else {}


def check_astra_rules(rank_id: int, rank: RefRank, groups: dict[str, list[int]]) -> None:
    """Assert what ASTRA-sim needs of one rank's file (FORMATS.md §1)."""
    assert rank.metadata.version, "GlobalMetadata.version is empty"
    ids = {n.id for n in rank.nodes}
    assert len(ids) == len(rank.nodes), "node ids repeat"
    for node in rank.nodes:
        for dep in node.data_deps:
            assert dep in ids, f"node {node.id} depends on missing {dep}"
        assert not node.ctrl_deps, "ordering edges must be in data_deps"
        attrs = rank.attrs(node)
        if node.type == 4:  # COMP_NODE
            assert node.duration_micros >= 1 or "num_ops" in attrs, f"compute node {node.id} lasts 0 µs"
        if node.type in COMM_TYPES:
            assert attrs["comm_size"][0] == "int64_val" and attrs["comm_size"][1] > 0, (node.id, attrs.get("comm_size"))
            assert attrs.get("is_cpu_op", ("bool_val", False)) == ("bool_val", False)
        if node.type == COMM_COLL_NODE:
            assert attrs["comm_type"][0] == "int64_val"
            pg = attrs.get("pg_name", ("string_val", ""))
            assert pg[0] == "string_val"
            if pg[1]:
                assert pg[1] in groups, f"pg_name {pg[1]} not in comm_group.json"
                assert rank_id in groups[pg[1]], f"rank {rank_id} not in group {pg[1]}"
                # ASTRA-sim never completes a collective of a one-member group (issue 17)
                assert len(groups[pg[1]]) > 1, f"node {node.id}: collective in one-member group {pg[1]}"
                if attrs["comm_type"][1] == 2:  # ALL_GATHER: a share of 0 B per member runs forever
                    assert attrs["comm_size"][1] >= len(groups[pg[1]]), (node.id, attrs["comm_size"])
        if node.type in (COMM_SEND_NODE, COMM_RECV_NODE):
            for key in ("comm_src", "comm_dst", "comm_tag"):
                assert attrs[key][0] == "int32_val", (key, attrs[key])
            own = "comm_src" if node.type == COMM_SEND_NODE else "comm_dst"
            assert attrs[own][1] == rank_id, f"{own} of node {node.id} is not rank {rank_id}"
            assert attrs["comm_src"][1] != attrs["comm_dst"][1], f"node {node.id} addressed to itself (ASTRA-sim aborts)"


def p2p_keys(rank: RefRank, node_type: int) -> list[tuple[int, int, int, int]]:
    keys = []
    for node in rank.nodes:
        if node.type == node_type:
            a = rank.attrs(node)
            keys.append((a["comm_src"][1], a["comm_dst"][1], a["comm_tag"][1], a["comm_size"][1]))
    return keys


def collective_sequence(rank: RefRank, pg_name: str) -> list[tuple[int, int]]:
    seq = []
    for node in rank.nodes:
        if node.type == COMM_COLL_NODE:
            a = rank.attrs(node)
            if a.get("pg_name", ("", ""))[1] == pg_name:
                seq.append((a["comm_type"][1], a["comm_size"][1]))
    return seq
