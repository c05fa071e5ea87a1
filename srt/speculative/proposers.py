"""Where draft tokens come from: the request's own tokens (NGRAM) or a draft model (STANDALONE).

Both answer two calls per verify step: plan (how many drafts each request gets, at most its
budget) before the verify slots are allocated, and draft (the tokens, and the draft's distribution
behind each, for the rejection rule) after. STANDALONE's draft model shares the target's request
rows and slot numbers with a KV pool of its own, so drafting writes draft KV into the very slots
the verify pass then fills with target KV. Draft KV only steers acceptance: the target checks every
draft, so stale or missing draft KV costs speed, never correctness.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, List, Optional, Union

import torch

from sglang.srt.configs.sections import SpecSection
from sglang.srt.core.forward_batch_info import build_decode_batch, build_extend_batch
from sglang.srt.core.req import Req
from sglang.srt.distributed.parallel_state import get_tp_size, tp_all_gather
from sglang.srt.speculative.draft_sampling import (
    chain_verify_inputs,
    draft_chains,
    draft_info,
)
from sglang.srt.speculative.draft_tree import DraftTree
from sglang.srt.speculative.ngram_proposer import NgramIndex
from sglang.srt.speculative.scratch_grid import ScratchGrid
from sglang.srt.speculative.tree_search import (
    TreeSearch,
    grow_trees,
    scratch_slots_for,
    set_tree_drafts,
    tree_budgets,
    tree_topk,
)

if TYPE_CHECKING:
    from sglang.srt.model_executor.model_runner import ModelRunner


class NgramProposer:
    capture = None  # the target's hidden states it needs: none (EagleProposer's differ)

    def __init__(self, spec: SpecSection):
        self.spec = spec

    def plan(self, reqs: List[Req], budgets: List[int]) -> List[int]:
        for r, b in zip(reqs, budgets):
            index = r.spec_state
            if index is None:
                index = r.spec_state = NgramIndex(
                    self.spec.ngram_min_window,
                    self.spec.ngram_max_window,
                    history=self.spec.ngram_max_breadth > 1,
                )
            n = len(index.tokens)
            index.extend(r.origin_input_ids[n:] if n < len(r.origin_input_ids) else [])
            out_start = max(len(index.tokens) - len(r.origin_input_ids), 0)
            index.extend(r.output_ids[out_start:])
            r.spec_tree = None
            if b <= 0:
                r.spec_drafts = []
            elif self.spec.ngram_max_breadth > 1 and r.grammar is None:
                # A trie of several continuations (a grammar's masks are built for chains only).
                tree = DraftTree.from_paths(index.propose_paths(b, self.spec.ngram_max_breadth), b)
                r.spec_drafts = tree.tokens
                r.spec_tree = None if tree.is_chain() else tree
            else:
                r.spec_drafts = _grammar_prefix(r, index.propose(b))
        return [len(r.spec_drafts) for r in reqs]

    def draft(self, reqs: List[Req], num_drafts: List[int], prefix_lens: List[int]):
        """Verify ids (pending + drafts, per request) and None: NGRAM drafts are point masses."""
        ids: List[int] = []
        for r, k in zip(reqs, num_drafts):
            ids.append(r.output_ids[-1])
            ids.extend(r.spec_drafts[:k])
        return ids, None

    def on_verified(
        self,
        req: Req,
        accepted: int,
        num_drafts: int,
        prefix_len: int,
        path: Optional[List[int]] = None,
    ) -> None:
        """path: the verify rows of the accepted tree branch (None when the pass checked chains)."""
        req.spec_drafts = []
        req.spec_tree = None


def _grammar_prefix(req: Req, drafts: List[int]) -> List[int]:
    """The drafts a request's grammar allows in a row (a forbidden one could only be rejected)."""
    g = req.grammar
    if g is None or not drafts:
        return drafts
    n = 0
    for t in drafts:
        if g.is_terminated() or not g.accept_token(t):
            break
        n += 1
    g.rollback(n)
    return drafts[:n]


class DraftModelProposer:
    capture = None

    def __init__(
        self,
        spec: SpecSection,
        draft_runner: "ModelRunner",
        target_runner: "ModelRunner",
        chunk: Optional[int],
    ):
        if draft_runner.vocab_size != target_runner.vocab_size:
            raise ValueError(
                f"The draft model's vocabulary ({draft_runner.vocab_size}) differs from the "
                f"target's ({target_runner.vocab_size}): drafts must use the target's tokenizer."
            )
        # Same rows, same slot numbers as the target; the draft's own KV buffers.
        if draft_runner.req_to_token_pool is not target_runner.req_to_token_pool:
            raise ValueError("the draft runner must be built on the target's request table")
        self.spec = spec
        self.runner = draft_runner
        self.pool = target_runner.req_to_token_pool
        self.device = target_runner.device
        self.vocab = target_runner.vocab_size
        self.chunk = chunk or 1 << 30
        # Tree search's scratch slots: after every slot the target's allocator can hand out.
        self.scratch_base = target_runner.max_total_num_tokens + target_runner.page_size
        self.catch_up_rows = catch_up_rows(spec)

    def plan(self, reqs: List[Req], budgets: List[int]) -> List[int]:
        return tree_budgets(self.spec, reqs, budgets)

    @torch.no_grad()
    def draft(self, reqs: List[Req], num_drafts: List[int], prefix_lens: List[int]):
        """Catch the draft's KV up to each pending token, then k - 1 decode steps; returns the verify
        ids and the draft's distribution behind each draft, on the verify rows that judge them.
        With topk > 1, a tree of k nodes per request instead (draft_trees)."""
        for r in reqs:
            r.spec_tree = None
        if self.spec.topk > 1:
            return self._draft_trees(reqs, num_drafts, prefix_lens)
        active = [i for i, k in enumerate(num_drafts) if k > 0]
        drafts: List[List[int]] = [[] for _ in reqs]
        q_parts: List[List[torch.Tensor]] = [[] for _ in reqs]
        if active:
            sub = [reqs[i] for i in active]
            cur = [prefix_lens[i] for i in active]

            def advance(live, step, toks, kept):
                pool_rows = [sub[j].req_pool_idx for j in live]
                return self._decode_rows(pool_rows, [cur[j] + step + 1 for j in live], toks)

            chains, qs = draft_chains(
                draft_info(sub, self.vocab, self.device),
                self._catch_up(sub, cur),
                [num_drafts[i] for i in active],
                advance,
            )
            for i, d, q in zip(active, chains, qs):
                drafts[i], q_parts[i] = d, q
        return chain_verify_inputs(reqs, drafts, q_parts, self.vocab, self.device)

    def on_verified(
        self,
        req: Req,
        accepted: int,
        num_drafts: int,
        prefix_len: int,
        path: Optional[List[int]] = None,
    ) -> None:
        if self.spec.topk > 1:
            # Tree search drafts into scratch slots: only the pending token's KV is in place.
            req.draft_kv_len = prefix_len + 1
        elif num_drafts > 0:
            # Draft KV was written for the pending token and d_1..d_{k-1}; of those, the ones now
            # in the sequence are the pending token and the accepted drafts.
            req.draft_kv_len = prefix_len + 1 + min(accepted, num_drafts - 1)
        req.spec_tree = None

    # ------------------------------------------------------------------ trees
    def _draft_trees(self, reqs: List[Req], num_drafts: List[int], prefix_lens: List[int]):
        """Grow each request's tree (tree_search.py): the draft runs on every frontier node as a
        decode row that reads the request's prefix and the node's ancestors through a scratch
        table row, its KV in a scratch slot of the draft's pool. Returns the verify ids and no
        distributions: tree drafts are chosen, not sampled (point masses)."""
        active = [i for i, k in enumerate(num_drafts) if k > 0]
        searches = [TreeSearch(tree_topk(self.spec, reqs[i]), num_drafts[i]) for i in active]
        if active:
            sub = [reqs[i] for i in active]
            grid = ScratchGrid(
                self.pool, self.spec, self.scratch_base, sub, [prefix_lens[i] for i in active]
            )
            logprobs = torch.log_softmax(grid.catch_up_logits(self._catch_up), dim=-1)

            def expand(live: List[int], depth: int) -> torch.Tensor:
                fb = grid.frontier_batch(live, [searches[b] for b in live], depth, self.device)
                return torch.log_softmax(self.runner.forward(fb).next_token_logits.float(), -1)

            lasts = [min(self.spec.num_steps, num_drafts[i]) for i in active]
            grow_trees(searches, lasts, logprobs, min(self.spec.topk, self.vocab), expand)
        trees = dict(zip(active, (s.tree() for s in searches)))
        return set_tree_drafts(reqs, trees, num_drafts), None

    # ------------------------------------------------------------------ passes
    def _catch_up(self, reqs: List[Req], cur: List[int]) -> torch.Tensor:
        """Draft extend passes over positions [draft_kv_len, pending] (the whole prompt the first
        time), chunked; returns the logits at each request's pending token."""
        out: List[Optional[torch.Tensor]] = [None] * len(reqs)
        start = [min(r.draft_kv_len, c) for r, c in zip(reqs, cur)]
        if max(c - s for s, c in zip(start, cur)) < self.catch_up_rows:
            return self._catch_up_as_decode(reqs, start, cur)
        while True:
            todo = [i for i in range(len(reqs)) if start[i] <= cur[i]]
            if not todo:
                return torch.stack(out)
            ids, pre, ext, rows, locs = [], [], [], [], []
            for i in todo:
                r = reqs[i]
                end = min(cur[i] + 1, start[i] + self.chunk)
                ids.extend(r.all_ids()[start[i] : end])
                pre.append(start[i])
                ext.append(end - start[i])
                rows.append(r.req_pool_idx)
                locs.append(self.pool.read(r.req_pool_idx, start[i], end))
            fb = build_extend_batch(ids, pre, ext, rows, torch.cat(locs), self.device)
            logits = self.runner.forward(fb).next_token_logits
            for n, i in enumerate(todo):
                start[i] = pre[n] + ext[n]
                if start[i] == cur[i] + 1:
                    out[i] = logits[n]
                    reqs[i].draft_kv_len = start[i]

    def _catch_up_as_decode(
        self, reqs: List[Req], start: List[int], cur: List[int]
    ) -> torch.Tensor:
        """The usual catch-up (a few tokens each) as one decode batch of a row per token, as the
        chain verify runs: each layer stores every row's KV before any row attends, so row p sees
        the rows before it; and a decode batch replays the draft's CUDA graphs."""
        rows, lens, ids, last = [], [], [], []
        for r, s, c in zip(reqs, start, cur):
            toks = r.all_ids()
            for p in range(s, c + 1):
                rows.append(r.req_pool_idx)
                lens.append(p + 1)
                ids.append(toks[p])
            last.append(len(rows) - 1)
            r.draft_kv_len = c + 1
        logits = self._decode_rows(rows, lens, ids)
        return logits[torch.tensor(last, device=logits.device)]

    def _decode_rows(
        self, rows: List[int], lens: List[int], tokens: Union[List[int], torch.Tensor]
    ) -> torch.Tensor:
        """One draft decode pass: row i decodes tokens[i] (a list, or int64 ids already on the
        device) at position lens[i] - 1 of table row rows[i], into the slot the table holds there."""
        locs = torch.tensor(
            [int(self.pool.req_to_token_cpu[row, n - 1]) for row, n in zip(rows, lens)],
            dtype=torch.int64,
        )
        ids = (
            tokens if isinstance(tokens, torch.Tensor) else torch.tensor(tokens, dtype=torch.int64)
        )
        fb = build_decode_batch(ids, lens, rows, locs, self.device)
        return self.runner.forward(fb).next_token_logits


def catch_up_rows(spec: SpecSection) -> int:
    """Decode rows per request the draft's graphs hold: a tree frontier's topk, and the catch-up
    after a verify (the pending token plus the accepted drafts the draft has no KV for: one for a
    chain, which fed every draft but the last; up to the deepest node for a tree)."""
    if spec.topk > 1:
        return max(spec.topk, spec.num_steps + 1)
    return 2


def make_proposer(spec: SpecSection, target_runner: "ModelRunner", server_args, chunk):
    if spec.algorithm == "NGRAM":
        return NgramProposer(spec)
    if spec.algorithm in ("EAGLE", "EAGLE3"):
        return _eagle_proposer(spec, target_runner, server_args, chunk)
    import dataclasses

    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_executor.model_runner import ModelRunner

    sa = dataclasses.replace(
        server_args,
        model_path=spec.draft_model_path,
        tokenizer_path=None,
        quantization=None,
        max_total_tokens=target_runner.max_total_num_tokens,
        max_running_requests=target_runner.max_running_requests,
        speculative_algorithm=None,
        speculative_draft_model_path=None,
    )
    from sglang.srt.configs.sections import MemorySection, ModelSection

    draft_cfg = ModelConfig.from_path(spec.draft_model_path, server_args.context_length)
    # Exactly the target's slot count: the draft's KV lives at the target's slot numbers (the
    # target's pool was sized with this pool's bytes taken out).
    memory = dataclasses.replace(
        MemorySection.of(sa),
        exact_pool=True,
        tree_rows_per_request=0,  # the draft reads the target's table (its scratch rows too)
        scratch_slots=scratch_slots_for(spec, target_runner.max_running_requests),
    )
    # The draft's decode passes (chain steps, catch-ups, tree frontiers; catch_up_rows rows per
    # request) replay CUDA graphs captured over the target's request table.
    model = dataclasses.replace(ModelSection.of(sa), decode_rows_per_request=catch_up_rows(spec))
    draft = ModelRunner(
        draft_cfg,
        model,
        memory,
        target_runner.device,
        target_runner.gpu_id,
        req_to_token_pool=target_runner.req_to_token_pool,
    )
    return DraftModelProposer(spec, draft, target_runner, chunk)


def _eagle_proposer(spec: SpecSection, target_runner: "ModelRunner", server_args, chunk):
    from sglang.srt.speculative.eagle_head import load_eagle_head
    from sglang.srt.speculative.eagle_proposer import EagleProposer

    model = target_runner.model
    vocab = target_runner.vocab_size
    # Under TP the target holds a vocabulary shard of each; the head (replicated on every rank,
    # fed the all-reduced hidden states) needs them whole. model.lm_head is the embedding itself
    # when the target ties them.
    embed = tp_all_gather(model.model.embed_tokens.weight.data, dim=0)[:vocab]
    tied = model.lm_head is model.model.embed_tokens
    lm_head = embed if tied else tp_all_gather(model.lm_head.weight.data, dim=0)[:vocab]
    head = load_eagle_head(
        spec.draft_model_path,
        target_runner.model_config.num_hidden_layers,
        embed,
        lm_head,
        dtype=embed.dtype,
        dummy_variant=spec.algorithm if server_args.load_format == "dummy" else None,
    )
    if head.c.variant != spec.algorithm:
        raise ValueError(
            f"--speculative-algorithm {spec.algorithm}, but {spec.draft_model_path} is an "
            f"{head.c.variant} draft head"
        )
    if head.c.vocab != target_runner.vocab_size or head.c.hidden != model.config.hidden_size:
        raise ValueError(
            f"the draft head ({head.c.vocab} tokens, hidden {head.c.hidden}) does not fit the "
            f"target ({target_runner.vocab_size} tokens, hidden {model.config.hidden_size})"
        )
    head.to_device(target_runner.device)
    if get_tp_size() > 1 or os.environ.get("SGLANG_EAGLE_EAGER") == "1":
        # Under TP the head is replicated whole, while a pool of its own would hold this rank's
        # KV heads only: it keeps per-request caches (also the A/B baseline, SGLANG_EAGLE_EAGER=1).
        return EagleProposer(spec, head, target_runner.vocab_size, target_runner.device)
    return _paged_eagle(spec, head, target_runner, server_args, chunk)


def _paged_eagle(spec: SpecSection, head, target_runner: "ModelRunner", server_args, chunk):
    """The head as a one-layer model of its own runner: a KV pool at the target's slot numbers
    (exactly its slot count, plus tree search's scratch slots) over the target's request table;
    its decode passes replay CUDA graphs."""
    import dataclasses

    from sglang.srt.configs.sections import MemorySection, ModelSection
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.speculative.eagle_model import EagleDraftModel, head_model_config
    from sglang.srt.speculative.eagle_paged import PagedEagleProposer, eagle_decode_rows

    sa = dataclasses.replace(
        server_args,
        quantization=None,
        max_total_tokens=target_runner.max_total_num_tokens,
        max_running_requests=target_runner.max_running_requests,
        speculative_algorithm=None,
        speculative_draft_model_path=None,
        dtype=str(target_runner.dtype).replace("torch.", ""),
    )
    memory = dataclasses.replace(
        MemorySection.of(sa),
        exact_pool=True,
        tree_rows_per_request=0,
        scratch_slots=scratch_slots_for(spec, target_runner.max_running_requests),
    )
    model = dataclasses.replace(
        ModelSection.of(sa), decode_rows_per_request=eagle_decode_rows(spec)
    )
    runner = ModelRunner(
        head_model_config(head, target_runner.model_config),
        model,
        memory,
        target_runner.device,
        target_runner.gpu_id,
        req_to_token_pool=target_runner.req_to_token_pool,
        prebuilt=EagleDraftModel(head),
    )
    return PagedEagleProposer(spec, runner, target_runner, chunk)
