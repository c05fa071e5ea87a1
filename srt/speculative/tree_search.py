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
from typing import List, Sequence

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
