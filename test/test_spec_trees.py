"""Draft trees: several continuations per request checked in one verify pass (one decode row
per node, each reading the request's prefix and its own ancestors through a scratch table row).

Units: the trie a tree is built from, NGRAM's continuations per window, the tree verdict (greedy
path choice; on a chain it equals the chain verdict; sampled, each token comes out with exactly
the target's probability, by a chi-square test). Through the real scheduler: NGRAM trees and an
oracle that puts the right continuation on a later branch give the plain run's tokens, on the
overlap and plain loops and with pages, with the accepted branch's KV moved into place and no slot
leaked (the invariants run after every step). Draft-model trees (a draft model or an EAGLE head
with topk > 1): the search keeps the best-scored nodes with their parents; STANDALONE and EAGLE
trees give the plain run's tokens.
"""

from __future__ import annotations

import random
from typing import List

import pytest
import torch
from test_speculative import (
    _eagle_head,
    _greedy_info,
    count_head_passes,
    make,
    repetitive_prompts,
    run_batch,
)

from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative.draft_tree import DraftTree, depths_of
from sglang.srt.speculative.ngram_proposer import NgramIndex
from sglang.srt.speculative.tree_search import TreeSearch, tree_capacity
from sglang.srt.speculative.tree_verify import launch_tree_verify
from sglang.srt.speculative.verify import VerifyLayout, launch_verify


# ---------------------------------------------------------------------------- the tree
def test_tree_from_paths_is_a_breadth_first_trie_cut_to_size():
    t = DraftTree.from_paths([[5, 6, 7], [5, 8], [9]], max_nodes=10)
    # depth 1: 5, 9; depth 2: 6, 8 (children of 5); depth 3: 7.
    assert t.tokens == [5, 9, 6, 8, 7]
    assert t.parents == [0, 0, 1, 1, 3]
    assert t.depths() == [0, 1, 1, 2, 2, 3]
    assert not t.is_chain()
    cut = DraftTree.from_paths([[5, 6, 7], [5, 8], [9]], max_nodes=3)
    assert cut.tokens == [5, 9, 6] and cut.parents == [0, 0, 1]
    assert DraftTree.from_paths([[1, 2, 3]], 8).is_chain()
    assert DraftTree.from_paths([], 8).tokens == []


def test_depths_of_row_parents():
    assert depths_of([-1, 0, 0, 1, 1, 3]) == [0, 1, 1, 2, 2, 3]


def test_ngram_paths_walk_every_earlier_occurrence_longest_window_first():
    toks = [1, 2, 3, 4, 5, 9, 3, 4, 6, 4, 7, 2, 3, 4, 8, 2, 3, 4]
    idx = NgramIndex(1, 3, history=True)
    idx.extend(toks)
    # "2 3 4" was followed by 8, before that by 5; then "3 4" also by 6; "4" also by 7.
    assert idx.propose_paths(2, 8) == [[8, 2], [5, 9], [6, 4], [7, 2]]
    assert idx.propose_paths(2, 1) == [[8, 2]] == [idx.propose(2)]
    # Without history only each window's latest occurrence is known (all the same one here).
    plain = NgramIndex(1, 3)
    plain.extend(toks)
    assert plain.propose_paths(2, 8) == [[8, 2]]


def test_ngram_history_bulk_and_incremental_agree():
    toks = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5] * 6
    bulk, inc, mixed = (NgramIndex(1, 5, history=True) for _ in range(3))
    bulk.extend(toks)
    for t in toks:
        inc.extend([t])
    mixed.extend(toks[:5])
    mixed.extend(toks[5:])  # a bulk batch after incremental ones links to the earlier ends
    for other in (inc, mixed):
        assert other.ends == bulk.ends
        for n in bulk.windows:
            assert other.prev[n] == bulk.prev[n], n


# ---------------------------------------------------------------------------- the verdict
def test_tree_verdict_follows_the_matching_branch():
    V = 16
    # One request, rows: 0 pending; 1 (tok 5) 2 (tok 7) children of 0; 3 (tok 8) child of 2.
    par = [-1, 0, 0, 2]
    logits = torch.full((4, V), -5.0)
    for row, best in zip(range(4), [7, 1, 8, 3]):
        logits[row, best] = 5.0
    ids = torch.tensor([0, 5, 7, 8])
    layout = VerifyLayout.of([3], [par])
    out = launch_tree_verify(logits, ids, layout, _greedy_info(4, V)).result()
    assert out.accept_lens == [2] and out.tokens == [[7, 8, 3]] and out.paths == [[2, 3]]


def _sampled_info(rows: int, V: int, seeds: torch.Tensor, temperature: float = 1.0):
    info = _greedy_info(rows, V)
    info.temperatures = torch.full((rows, 1), temperature)
    info.greedy = torch.zeros(rows, dtype=torch.bool)
    info.is_all_greedy = False
    info.seeds = seeds
    return info


def test_tree_verdict_on_chains_equals_the_chain_verdict():
    V, B, k = 12, 40, 3
    g = torch.Generator().manual_seed(0)
    R = B * (1 + k)
    logits = torch.randn((R, V), generator=g) * 2
    ids = torch.randint(0, V, (R,), generator=g)
    seeds = torch.repeat_interleave(torch.arange(B) * 7919, 1 + k)
    info = _sampled_info(R, V, seeds)
    info.steps = torch.arange(1 + k).repeat(B) + 1
    chain = launch_verify(logits, ids, VerifyLayout.of([k] * B), info).result()
    tree_layout = VerifyLayout.of([k] * B, [[-1, 0, 1, 2]] * B)
    tree = launch_tree_verify(logits, ids, tree_layout, info).result()
    assert tree.accept_lens == chain.accept_lens
    assert tree.tokens == chain.tokens
    assert tree.paths == [list(range(1, 1 + a)) for a in chain.accept_lens]


def test_tree_verdict_samples_exactly_the_target_distribution():
    """Root children tokens 0 and 1 (and a grandchild under 1): the first emitted token must be
    distributed as p, whichever branch takes it; chi-square over many seeds."""
    from scipy.stats import chisquare

    V, B = 6, 6000
    p = torch.tensor([0.35, 0.25, 0.2, 0.1, 0.06, 0.04])
    row_logits = p.log()
    par = [-1, 0, 0, 2]
    logits = row_logits.repeat(B * 4, 1)
    ids = torch.tensor([3, 0, 1, 2]).repeat(B)
    seeds = torch.repeat_interleave(torch.arange(B, dtype=torch.int64) * 104729 + 11, 4)
    info = _sampled_info(B * 4, V, seeds)
    info.steps = torch.tensor([1, 2, 2, 3]).repeat(B)
    out = launch_tree_verify(logits, ids, VerifyLayout.of([3] * B, [par] * B), info).result()
    first = torch.tensor([t[0] for t in out.tokens])
    counts = torch.bincount(first, minlength=V).double()
    _, pval = chisquare(counts.numpy(), (p * B).numpy())
    assert pval > 0.001, (counts.tolist(), pval)
    # Both branches are taken, and a path through token 1 goes on to judge its child.
    assert {tuple(path[:1]) for path in out.paths} >= {(1,), (2,), ()}
    assert any(path == [2, 3] for path in out.paths)


# ---------------------------------------------------------------------------- the scheduler
def branching_prompts() -> List[List[int]]:
    """Prompts after which the tiny model's output repeats spans with different continuations
    (what NGRAM trees branch on), of mixed lengths."""
    rng = random.Random(0)
    return [
        [1, 2, 3, 4, 5, 9, 3, 4, 6, 4, 7, 2, 3, 4] * 3,
        [40, 41, 42, 43, 50, 42, 43, 51, 43, 52] * 4 + [41, 42, 43],
        repetitive_prompts()[0],
    ] + [[rng.randrange(100, 400) for _ in range(30)] * 2 for _ in range(3)]


MAX_NEW = 64


@pytest.fixture(scope="module")
def plain_branching(tiny_models):
    return run_batch(make(tiny_models), branching_prompts(), MAX_NEW)


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(disable_overlap_schedule=True),
        dict(page_size=4, chunked_prefill_size=32),
    ],
    ids=["overlap", "plain-loop", "page4-chunked"],
)
def test_ngram_trees_match_plain_decoding(tiny_models, plain_branching, kw):
    sched = make(
        tiny_models,
        speculative_algorithm="NGRAM",
        speculative_ngram_max_bfs_breadth=4,
        speculative_num_draft_tokens=8,
        **kw,
    )
    got = run_batch(sched, branching_prompts(), MAX_NEW)
    assert [g["ids"] for g in got] == [p["ids"] for p in plain_branching]
    assert sched.spec.num_tree_passes > 0


class BranchOracle:
    """Trees whose first branch is wrong and whose second is the plain run's continuation: every
    accepted token comes through a later sibling, so its KV must be moved into place."""

    capture = None

    def __init__(self, reference: dict, vocab: int):
        self.reference = reference
        self.vocab = vocab

    def plan(self, reqs, budgets):
        for r, b in zip(reqs, budgets):
            ref = self.reference[tuple(r.origin_input_ids)]
            n = len(r.output_ids)
            right = ref[n : n + b]
            wrong = [(t + 1) % self.vocab for t in right[:1]]
            tree = DraftTree.from_paths([wrong, right], b) if right else DraftTree([], [])
            r.spec_drafts, r.spec_tree = tree.tokens, tree
        return [len(r.spec_drafts) for r in reqs]

    def draft(self, reqs, num_drafts, prefix_lens):
        ids = []
        for r, k in zip(reqs, num_drafts):
            ids.append(r.output_ids[-1])
            ids.extend(r.spec_drafts[:k])
        return ids, None

    def on_verified(self, req, accepted, num_drafts, prefix_len, path=None):
        req.spec_drafts, req.spec_tree = [], None


@pytest.mark.parametrize("kw", [dict(), dict(page_size=4), dict(disable_overlap_schedule=True)])
def test_accepted_later_branches_keep_tokens_and_kv(tiny_models, plain_branching, kw):
    sched = make(
        tiny_models,
        speculative_algorithm="NGRAM",
        speculative_num_draft_tokens=5,
        speculative_ngram_max_bfs_breadth=2,  # the tree nodes' table rows
        **kw,
    )
    ref = {tuple(p): g["ids"] for p, g in zip(branching_prompts(), plain_branching)}
    sched.spec.proposer = BranchOracle(ref, sched.spec.vocab)
    moves = []
    pool = sched.spec.runner.token_to_kv_pool
    move = pool.move_kv
    pool.move_kv = lambda dst, src: (moves.append(len(dst)), move(dst, src))
    got = run_batch(sched, branching_prompts(), MAX_NEW)
    assert [g["ids"] for g in got] == [p["ids"] for p in plain_branching]
    # Each verify accepted the whole right branch: 3 drafts (4 tokens) per pass near the cap.
    assert sum(g["accepted"] for g in got) >= 2 * sum(g["verify"] for g in got)
    assert sum(moves) > 0


# ---------------------------------------------------------------------------- draft-model trees
def test_tree_search_keeps_the_best_nodes_with_their_parents():
    s = TreeSearch(topk=2, budget=4)
    s.grow([[-0.1, -2.0]], [[5, 6]])  # depth 1: 5 (-0.1), 6 (-2.0)
    assert s.frontier == [0, 1]
    s.grow([[-0.2, -0.3], [-0.1, -0.5]], [[7, 8], [9, 10]])
    # depth 2: 5-7 (-0.3), 5-8 (-0.4), 6-9 (-2.1), 6-10 (-2.5); frontier = the two best
    assert s.frontier == [2, 3]
    s.grow([[-5.0, -6.0], [-0.05, -9.0]], [[11, 12], [13, 14]])
    # best four overall: 5 (-0.1), 5-7 (-0.3), 5-8 (-0.4), 5-8-13 (-0.45)
    tree = s.tree()
    assert tree.tokens == [5, 7, 8, 13]
    assert tree.row_parents() == [-1, 0, 1, 1, 3]
    assert tree_capacity(2, 3) == 2 + 2 * 4


def test_tree_search_ties_keep_parents_first():
    s = TreeSearch(topk=2, budget=3)
    s.grow([[0.0, 0.0]], [[1, 2]])
    s.grow([[0.0, 0.0], [0.0, 0.0]], [[3, 4], [5, 6]])
    tree = s.tree()  # every score 0: earlier nodes win, so parents come before children
    assert tree.tokens == [1, 2, 3] and tree.row_parents() == [-1, 0, 0, 1]


DRAFT_TREE = dict(speculative_eagle_topk=3, speculative_num_steps=3, speculative_num_draft_tokens=7)


@pytest.mark.parametrize(
    "draft,kw",
    [
        ("self", dict()),
        ("self", dict(disable_overlap_schedule=True)),
        ("random", dict(page_size=4, chunked_prefill_size=32)),
    ],
    ids=["self-overlap", "self-plain-loop", "random-page4-chunked"],
)
def test_draft_model_trees_match_plain_decoding(tiny_models, plain_branching, draft, kw):
    path = tiny_models["qwen2"] if draft == "random" else tiny_models["llama"]
    sched = make(
        tiny_models,
        speculative_algorithm="STANDALONE",
        speculative_draft_model_path=path,
        **DRAFT_TREE,
        **kw,
    )
    got = run_batch(sched, branching_prompts(), MAX_NEW)
    assert [g["ids"] for g in got] == [p["ids"] for p in plain_branching]
    assert sched.spec.num_tree_passes > 0
    if draft == "self":
        # The target's own greedy path is the draft's top-1 path; it is in the tree unless better
        # scored siblings crowd it out, so most drafts on it are accepted.
        verify = sum(g["verify"] for g in got)
        assert sum(g["accepted"] for g in got) >= 1.2 * verify, got


@pytest.mark.parametrize("variant", ["EAGLE", "EAGLE3"])
def test_eagle_trees_match_plain_decoding(tiny_models, plain_branching, tmp_path, variant):
    path = _eagle_head(tiny_models, tmp_path, variant)
    sched = make(
        tiny_models, speculative_algorithm=variant, speculative_draft_model_path=path, **DRAFT_TREE
    )
    rounds = count_head_passes(sched.spec.proposer)
    got = run_batch(sched, branching_prompts(), MAX_NEW)
    assert [g["ids"] for g in got] == [p["ids"] for p in plain_branching]
    assert sched.spec.num_tree_passes > 0
    # The trees grow together: one head pass per depth (the absorb pass, then one per frontier
    # below the top), however many requests draft in the round.
    depth = DRAFT_TREE["speculative_num_steps"]
    batched = [r for r in rounds if r[0] > 1]
    assert batched, rounds
    assert all(n_passes == min(depth, k) for _, k, n_passes in batched), rounds


def test_tree_arguments_are_checked():
    with pytest.raises(ValueError, match="at most 6 drafts"):
        ServerArgs(
            model_path="x",
            speculative_algorithm="STANDALONE",
            speculative_draft_model_path="d",
            speculative_eagle_topk=2,
            speculative_num_steps=2,
            speculative_num_draft_tokens=8,
        )
