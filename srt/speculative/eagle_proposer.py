"""EAGLE / EAGLE-3 drafts: a draft head fed by the target's own hidden states.

The target's passes (prefill chunks and verify passes) keep their hidden states at every position
(ForwardBatch.capture_hidden); each request holds the features of the positions its draft layer
has not yet seen. A draft step first runs the head over those positions (token p + 1 with the
feature of p; the last output is the first draft), then feeds each draft back with the head's
own output as the next feature. After the verify pass the head's KV past the pending token is
dropped (it was computed from draft features) and the target's features of the pending token and
the accepted drafts replace it. Positions the target never computed (a radix-cache prefix) have no
features: the head's cache starts after them, which costs acceptance, never correctness (the
target checks every draft).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import torch

from sglang.srt.configs.sections import SpecSection
from sglang.srt.core.req import Req
from sglang.srt.speculative.draft_sampling import (
    chain_verify_inputs,
    draft_chains,
    draft_info,
)
from sglang.srt.speculative.eagle_head import EAGLE, EagleHead
from sglang.srt.speculative.eagle_kv import EagleKV
from sglang.srt.speculative.tree_search import (
    ROOT,
    TreeSearch,
    grow_trees,
    set_tree_drafts,
    tree_budgets,
    tree_topk,
)
from sglang.srt.speculative.verify import VerifyLayout


@dataclass
class EagleState:
    """A request's draft-layer cache over positions [kv_start, kv_end) and the target features of
    positions [kv_end, kv_end + len(feats))."""

    kv: EagleKV = field(default_factory=EagleKV)
    kv_start: int = 0
    kv_end: int = 0
    feats: List[torch.Tensor] = field(default_factory=list)
    verify_rows: Optional[torch.Tensor] = (
        None  # the last verify pass's features, pending token first
    )

    def feat_len(self) -> int:
        return sum(f.shape[0] for f in self.feats)

    def restart_at(self, pos: int) -> None:
        self.kv, self.kv_start, self.kv_end, self.feats = EagleKV(), pos, pos, []

    def add_features(self, pos: int, rows: torch.Tensor) -> None:
        """Target features of positions [pos, pos + len(rows)); a gap (or an overlap, after a
        retraction) restarts the cache at pos."""
        if pos != self.kv_end + self.feat_len():
            self.restart_at(pos)
        self.feats.append(rows)

    def take(self, end: int) -> Tuple[int, torch.Tensor]:
        """The stored features of positions [kv_end, end), now absorbed: (kv_end before, rows)."""
        start, f = self.kv_end, torch.cat(self.feats)
        self.kv_end, self.feats = end, [f[end - start :]]
        return start, f[: end - start]

    def truncate_kv(self, end: int) -> None:
        self.kv.truncate(end - self.kv_start)
        self.kv_end = min(self.kv_end, end)


def keep_features(
    out_feat: List[dict], searches: List[TreeSearch], live: List[int], h: torch.Tensor
) -> None:
    """Each live search's frontier node's output feature (rows of h in frontier order): the
    input feature of its children."""
    at = 0
    for b in live:
        for n in searches[b].frontier:
            out_feat[b][n] = h[at]
            at += 1


class EagleProposer:
    def __init__(self, spec: SpecSection, head: EagleHead, vocab: int, device: str):
        self.spec = spec
        self.head = head
        self.vocab = vocab
        self.device = device
        # What the target keeps per position: its last hidden state (EAGLE) or its aux layers.
        self.capture = () if head.c.variant == EAGLE else tuple(head.c.aux_layers)

    # ------------------------------------------------------------------ target passes
    def on_target_extend(
        self, reqs: List[Req], prefix_lens: List[int], ext_lens: List[int], hidden
    ):
        at, ready, ends = 0, [], []
        for r, p, e in zip(reqs, prefix_lens, ext_lens):
            st = self._state(r)
            st.add_features(p, self._features(hidden[at : at + e]))
            at += e
            if p + e - 1 > st.kv_end:
                ready.append(r)
                ends.append(p + e - 1)
        # Every position but a chunk's last already has its next token: the head reads them now,
        # so a long prompt's features never pile up ([tokens, H] each chunk).
        if ready:
            self._absorb_rows(ready, ends)

    def on_verify_pass(self, reqs: List[Req], layout: VerifyLayout, hidden: torch.Tensor) -> None:
        feats = self._features(hidden)
        if feats.data_ptr() == hidden.data_ptr():
            feats = feats.clone()  # a replayed graph's output buffer: the next replay rewrites it
        for r, s, k in zip(reqs, layout.starts, layout.num_drafts):
            self._state(r).verify_rows = feats[s : s + 1 + k]

    def _features(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.head.first_feature(hidden.to(self.head.fc_w.dtype))

    def _state(self, r: Req) -> EagleState:
        if not isinstance(r.spec_state, EagleState):
            r.spec_state = EagleState()
        return r.spec_state

    # ------------------------------------------------------------------ drafting
    def plan(self, reqs: List[Req], budgets: List[int]) -> List[int]:
        return tree_budgets(self.spec, reqs, budgets)

    @torch.no_grad()
    def draft(self, reqs: List[Req], num_drafts: List[int], prefix_lens: List[int]):
        """Verify ids (pending + drafts per request) and the drafts' distributions (None: all
        greedy), as DraftModelProposer.draft."""
        for r in reqs:
            r.spec_tree = None
        if self.spec.topk > 1:
            return self._draft_trees(reqs, num_drafts, prefix_lens), None
        drafts, qs = self._draft_chains(reqs, num_drafts, prefix_lens)
        return chain_verify_inputs(reqs, drafts, qs, self.vocab, self.device)

    def _draft_chains(self, reqs: List[Req], num_drafts: List[int], prefix_lens: List[int]):
        """Every request's chain, one head pass per depth for the whole batch: the first pass
        absorbs each request's new target features, each later one feeds the live rows' drafts
        back. Returns per request its draft tokens and their distributions ([] if greedy)."""
        drafts: List[List[int]] = [[] for _ in reqs]
        qs: List[List[torch.Tensor]] = [[] for _ in reqs]
        active = [
            i for i, k in enumerate(num_drafts) if k > 0 and self._ready(reqs[i], prefix_lens[i])
        ]
        if not active:
            return drafts, qs
        sub = [reqs[i] for i in active]
        cur = [prefix_lens[i] for i in active]
        ks = [num_drafts[i] for i in active]
        logits, advance = self._chain_drafter(sub, cur, ks)
        base = draft_info(sub, self.vocab, self.device)
        chains, chain_qs = draft_chains(base, logits, ks, advance)
        for i, d, q in zip(active, chains, chain_qs):
            drafts[i], qs[i] = d, q
        return drafts, qs

    def _chain_drafter(self, sub: List[Req], cur: List[int], ks: List[int]):
        """The head's logits at each request's pending token (its new target features absorbed)
        and draft_chains' advance over the round's cache."""
        feat, logits, cache = self._absorb_rows(sub, cur, room=max(ks) - 1)
        # Step s feeds each live row its s-th draft, at position cur + s - 1.
        pos = torch.tensor([c - 1 for c in cur], device=self.device)

        def advance(live, step, toks, kept):
            nonlocal feat, pos
            if kept is not None:
                feat, pos = feat[kept], pos[kept]
            lens = [0] * len(sub)
            for j in live:
                lens[j] = 1
            feat, out = self.head.step_rows(toks, feat, pos + step, lens, cache)
            return out

        return logits, advance

    def _ready(self, r: Req, cur: int) -> bool:
        """Whether the head has target features up to the pending token and something to absorb."""
        st = self._state(r)
        return st.kv_end < cur <= st.kv_end + st.feat_len()

    @torch.no_grad()
    def _absorb_rows(self, reqs: List[Req], ends: List[int], room: int = 0):
        """Run the head, in one pass, over each request's stored features of positions
        [kv_end, end) (their next tokens are known; each request has rows to run; the requests'
        caches keep them); returns its output (feature, logits) at each request's last row and
        the round's cache, with room for `room` more entries each."""
        toks, feats, pos, lens, kvs = [], [], [], [], []
        for r, end in zip(reqs, ends):
            st = self._state(r)
            start, rows = st.take(end)
            toks.extend(r.all_ids()[start + 1 : end + 1])
            feats.append(rows)
            pos.extend(range(start, end))
            lens.append(end - start)
            kvs.append(st.kv)
        dev = self.device
        cache = self.head.new_round(kvs, max(lens) + room)
        hidden, logits = self.head.step_rows(
            torch.tensor(toks, dtype=torch.int64, device=dev),
            torch.cat(feats),
            torch.tensor(pos, device=dev),
            lens,
            cache,
        )
        cache.commit(kvs, lens)
        if len(lens) == 1:
            return hidden[-1:], logits[-1:], cache
        last = torch.tensor(lens, device=dev).cumsum(0) - 1
        return hidden[last], logits[last], cache

    def _draft_trees(self, reqs: List[Req], num_drafts: List[int], prefix_lens: List[int]):
        active = [
            i for i, k in enumerate(num_drafts) if k > 0 and self._ready(reqs[i], prefix_lens[i])
        ]
        searches = self._grow_trees(
            [reqs[i] for i in active],
            [num_drafts[i] for i in active],
            [prefix_lens[i] for i in active],
        )
        return set_tree_drafts(reqs, dict(zip(active, (s.tree() for s in searches))), num_drafts)

    def _grow_trees(self, reqs: List[Req], ks: List[int], cur: List[int]) -> List[TreeSearch]:
        """Every request's tree search (tree_search.py), one head pass per depth over all live
        requests' frontier nodes; a node sees its request's cache and its own ancestors among the
        nodes drafted so far."""
        if not reqs:
            return []
        searches = [TreeSearch(tree_topk(self.spec, r), k) for r, k in zip(reqs, ks)]
        lasts = [min(self.spec.num_steps, k) for k in ks]
        logprobs, expand = self._tree_expander(reqs, searches, lasts, cur)
        grow_trees(searches, lasts, logprobs, min(self.spec.topk, self.vocab), expand)
        return searches

    def _tree_expander(
        self, reqs: List[Req], searches: List[TreeSearch], lasts: List[int], cur: List[int]
    ):
        """The head's log-probabilities at each request's pending token (its new target features
        absorbed) and grow_trees' expand over the round's cache."""
        room = self.spec.topk * (max(lasts) - 1)  # frontier nodes drafted below the top
        hidden, logits, cache = self._absorb_rows(reqs, cur, room)
        out_feat = [{ROOT: hidden[b]} for b in range(len(reqs))]  # a node's children's feature
        entry: List[dict] = [{} for _ in reqs]  # a node's index among the entries drafting added

        def expand(live: List[int], depth: int) -> torch.Tensor:
            lens = [0] * len(reqs)
            masks: List[Optional[torch.Tensor]] = [None] * len(reqs)
            toks, feats, pos = [], [], []
            for b in live:
                search, seen = searches[b], entry[b]
                lens[b] = len(search.frontier)
                for n in search.frontier:
                    seen[n] = len(seen)
                    toks.append(search.tokens[n])
                    feats.append(out_feat[b][search.parents[n]])
                    pos.append(cur[b] + depth - 1)
                masks[b] = torch.zeros((lens[b], len(seen)), dtype=torch.bool)
                for j, n in enumerate(search.frontier):
                    masks[b][j, [seen[a] for a in search.path(n)]] = True
            h, lg = self.head.step_rows(
                torch.tensor(toks, device=self.device),
                torch.stack(feats),
                torch.tensor(pos, device=self.device),
                lens,
                cache,
                tree_masks=masks,
            )
            keep_features(out_feat, searches, live, h)
            return torch.log_softmax(lg.float(), dim=-1)

        return torch.log_softmax(logits.float(), dim=-1), expand

    def on_verified(
        self,
        req: Req,
        accepted: int,
        num_drafts: int,
        prefix_len: int,
        path: Optional[List[int]] = None,
    ) -> None:
        st = self._state(req)
        st.truncate_kv(prefix_len)  # the head's KV past the pending token came from draft features
        req.spec_tree = None
        if st.verify_rows is not None:
            # The verified rows now in the sequence: the pending token's, then the accepted
            # drafts' (a tree's accepted branch is the path of rows the verdict followed).
            rows = st.verify_rows[: 1 + accepted] if path is None else st.verify_rows[[0] + path]
            st.add_features(prefix_len, rows)
            st.verify_rows = None
