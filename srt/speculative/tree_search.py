"""Growing a draft tree from a draft's distributions: the top-k expansion of EAGLE's trees.

Each step the draft runs once on every frontier node and proposes its topk likeliest next tokens;
a candidate's score is the draft's log-probability of its whole path. The next frontier is the
topk best of the step's new candidates. After the last step the tree keeps the `budget` best
candidates of all: a score never rises along a path (each term is a log-probability, <= 0) and
ties go to the earlier node, so the kept set holds every kept node's parent, and the drafts the
target is likeliest to accept are the ones it checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Sequence

import torch

from sglang.srt.configs.sections import SpecSection
from sglang.srt.core.req import Req
from sglang.srt.speculative.draft_tree import DraftTree

ROOT = -1  # the request's pending token


def tree_capacity(topk: int, steps: int) -> int:
    """Candidates a search of `steps` steps can produce (the most nodes its tree can have)."""
    return 0 if steps <= 0 else topk + (steps - 1) * topk * topk


def tree_topk(spec: SpecSection, req: Req) -> int:
    # A grammar's verify masks are built for chains: its requests draft one.
    return 1 if req.grammar is not None else spec.topk


def tree_budgets(spec: SpecSection, reqs: List[Req], budgets: List[int]) -> List[int]:
    """Drafts per request: its budget, capped by what a tree search can grow (topk > 1)."""
    if spec.topk == 1:
        return list(budgets)
    return [
        min(b, tree_capacity(tree_topk(spec, r), spec.num_steps)) for r, b in zip(reqs, budgets)
    ]


def scratch_slots_for(spec: SpecSection, max_running: int) -> int:
    """A draft model's KV slots for tree search: one per frontier node above the last step."""
    if spec.topk == 1:
        return 0
    return max_running * spec.topk * max(spec.num_steps - 1, 0)


@dataclass
class TreeSearch:
    topk: int
    budget: int  # nodes the tree keeps
    tokens: List[int] = field(default_factory=list)
    parents: List[int] = field(
        default_factory=list
    )  # a node's parent node (ROOT: the pending token)
    scores: List[float] = field(default_factory=list)
    depths: List[int] = field(default_factory=list)
    frontier: List[int] = field(default_factory=lambda: [ROOT])

    def grow(self, top_logprobs: Sequence[Sequence[float]], top_tokens: Sequence[Sequence[int]]):
        """Add the frontier's candidates (row i: frontier node i's topk tokens and their draft
        log-probabilities) and pick the next frontier among them."""
        new: List[int] = []
        for node, lps, toks in zip(self.frontier, top_logprobs, top_tokens):
            base = 0.0 if node == ROOT else self.scores[node]
            depth = 1 if node == ROOT else self.depths[node] + 1
            for lp, tok in zip(lps[: self.topk], toks[: self.topk]):
                new.append(len(self.tokens))
                self.tokens.append(int(tok))
                self.parents.append(node)
                self.scores.append(base + float(lp))
                self.depths.append(depth)
        self.frontier = self._best(new)[: self.topk]

    def _best(self, nodes: Sequence[int]) -> List[int]:
        return sorted(nodes, key=lambda n: (-self.scores[n], n))

    def path(self, node: int) -> List[int]:
        """The nodes from depth 1 down to `node`."""
        out = []
        while node != ROOT:
            out.append(node)
            node = self.parents[node]
        return out[::-1]

    def tree(self) -> DraftTree:
        """The budget best nodes as a DraftTree (breadth-first, siblings best first)."""
        keep = set(self._best(range(len(self.tokens)))[: self.budget])
        children: dict = {}
        for n in self._best(keep):
            children.setdefault(self.parents[n], []).append(n)
        tokens: List[int] = []
        parents: List[int] = []
        index = {ROOT: 0}  # search node -> tree node (0: the pending token)
        level = [ROOT]
        while level:
            nxt = []
            for p in level:
                for c in children.get(p, []):
                    tokens.append(self.tokens[c])
                    parents.append(index[p])
                    index[c] = len(tokens)
                    nxt.append(c)
            level = nxt
        return DraftTree(tokens, parents)


def grow_trees(
    searches: List[TreeSearch],
    lasts: List[int],
    logprobs: torch.Tensor,
    topk: int,
    expand: Callable[[List[int], int], torch.Tensor],
) -> None:
    """Grow searches[b] for lasts[b] steps from logprobs (the drafter's log-probabilities at each
    search's root, one row per search); topk: the candidates read per row. expand(live, depth)
    runs the drafter once over the frontier nodes of the searches `live` (ascending, each one's
    frontier in order) and returns their log-probabilities, one row per node."""
    live, n_rows = list(range(len(searches))), [1] * len(searches)
    for depth in range(1, max(lasts, default=0) + 1):
        top_v, top_i = logprobs.topk(topk, dim=-1)
        top_v, top_i = top_v.tolist(), top_i.tolist()
        at = 0
        for b, n in zip(live, n_rows):
            searches[b].grow(top_v[at : at + n], top_i[at : at + n])
            at += n
        live = [b for b in live if depth < lasts[b]]
        if not live:
            return
        n_rows = [len(searches[b].frontier) for b in live]
        logprobs = expand(live, depth)


def set_tree_drafts(
    reqs: List[Req], trees: Dict[int, DraftTree], num_drafts: List[int]
) -> List[int]:
    """Each request's drafts from its tree (trees[i] for request i; none: no drafts); returns the
    verify ids (pending token, then the tree's tokens, per request)."""
    ids: List[int] = []
    for i, r in enumerate(reqs):
        ids.append(r.output_ids[-1])
        r.spec_drafts = []
        tree = trees.get(i)
        if tree is not None:
            assert tree.num_nodes == num_drafts[i], (tree.num_nodes, num_drafts[i])
            r.spec_drafts = tree.tokens
            r.spec_tree = None if tree.is_chain() else tree
            ids.extend(tree.tokens)
    return ids
