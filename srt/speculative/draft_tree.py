"""A draft tree: several candidate continuations of one request, checked in one verify pass.

Node 0 is the request's pending token; nodes 1..n are the drafts in breadth-first order, so a
node's parent always comes before it and its depth (its distance from node 0) never decreases
along the order. A chain is the tree whose node j has parent j - 1. Sibling tokens are distinct:
a trie of the candidate paths, so at most one child of a node can be the target's next token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Sequence


@dataclass
class DraftTree:
    tokens: List[int]  # the drafts (nodes 1..n), breadth-first
    parents: List[int]  # parents[i] is the parent of node i + 1, in [0, i]

    @classmethod
    def chain(cls, tokens: Sequence[int]) -> "DraftTree":
        return cls(list(tokens), list(range(len(tokens))))

    @classmethod
    def from_paths(cls, paths: Sequence[Sequence[int]], max_nodes: int) -> "DraftTree":
        """The trie of `paths` (most likely first), cut to its first `max_nodes` nodes in
        breadth-first order; a node's children keep the order in which the paths first reached them."""
        children: List[dict] = [{}]  # trie node -> {token: child node}, in trie-build order
        for path in paths:
            at = 0
            for tok in path:
                nxt = children[at].get(tok)
                if nxt is None:
                    nxt = len(children)
                    children[at][tok] = nxt
                    children.append({})
                at = nxt
        tokens: List[int] = []
        parents: List[int] = []
        frontier = [0]  # trie nodes of the current depth, their new index alongside
        index = {0: 0}
        while frontier and len(tokens) < max_nodes:
            nxt_frontier = []
            for t in frontier:
                for tok, child in children[t].items():
                    if len(tokens) >= max_nodes:
                        break
                    tokens.append(tok)
                    parents.append(index[t])
                    index[child] = len(tokens)
                    nxt_frontier.append(child)
            frontier = nxt_frontier
        return cls(tokens, parents)

    @property
    def num_nodes(self) -> int:
        return len(self.tokens)

    def is_chain(self) -> bool:
        return all(p == i for i, p in enumerate(self.parents))

    def depths(self) -> List[int]:
        """Depth of nodes 0..n (node 0, the pending token, has depth 0)."""
        return depths_of(self.row_parents())

    def row_parents(self) -> List[int]:
        """The parent of each of nodes 0..n as a row index (-1 for node 0)."""
        return [-1] + list(self.parents)


def depths_of(row_parents: Sequence[int]) -> List[int]:
    """Depth of each row of a tree given as row parents (-1 for the root)."""
    d = [0] * len(row_parents)
    for i, p in enumerate(row_parents):
        if p >= 0:
            d[i] = d[p] + 1
    return d
