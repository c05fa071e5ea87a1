"""Speculative decoding through the real scheduler (in-process, tiny random models).

Greedy output must be token-identical to plain decoding for every draft source (NGRAM; a random
draft model; the target drafting for itself, where every draft is accepted), across batches of
mixed lengths, chunked prompts, retraction in a tiny pool and both loop flags. Sampled output must
be distributed as plain sampling (a chi-square test on the first sampled tokens). No slot leaks:
the busy and idle invariants run after every step.
"""

from __future__ import annotations

import itertools
import time
from typing import Dict, List, Tuple

import pytest
import torch

from sglang.srt.core.io_struct.to_scheduler import TokenizedGenerateReqInput
from sglang.srt.core.sampling_params import SamplingParams
from sglang.srt.managers.scheduler.scheduler import Scheduler
from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo
from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative.ngram_proposer import NgramIndex, _hash
from sglang.srt.speculative.verify import VerifyLayout, launch_verify

_rid = itertools.count()


def make(tiny_models, **kw) -> Scheduler:
    sa = ServerArgs(
        model_path=tiny_models["llama"],
        tokenizer_path=tiny_models["llama"],
        strict_memory_check=True,
        **{"max_total_tokens": 4096, "grammar_backend": "none", **kw},
    )
    return Scheduler(sa, None)


def run_batch(sched: Scheduler, prompts: List[List[int]], max_new: int, **sp_kw) -> List[dict]:
    """All prompts at once; returns each request's tokens and spec counts."""
    reqs = []
    for ids in prompts:
        rid = f"s{next(_rid)}"
        sp = SamplingParams(max_new_tokens=max_new, **{"temperature": 0.0, **sp_kw})
        sp.normalize(None)
        sched.intake.handle_generate_request(
            TokenizedGenerateReqInput(rid=rid, input_ids=ids, sampling_params=sp)
        )
        reqs.append(sched.state.rid_to_req.get(rid))
    for _ in range(3000):
        sched.step()
        sched.invariants.check_busy()
        if sched._is_fully_idle():
            break
    for _ in range(3):
        sched.step()  # idle passes run the idle invariant (strict)
    assert all(r.finished() for r in reqs)
    return [
        dict(ids=list(r.output_ids), verify=r.spec_verify_ct, accepted=r.spec_accepted)
        for r in reqs
    ]


def repetitive_prompts() -> List[List[int]]:
    """Prompts whose continuations repeat earlier spans (what NGRAM drafts from), of mixed lengths."""
    base = list(range(300, 340))
    return [
        base * 3,
        [7, 8, 9] * 20 + base[:10],
        base[::2] * 4,
        list(range(500, 530)),
    ]


# ---------------------------------------------------------------------------- units
def test_ngram_index_bulk_and_incremental_hashes_agree():
    toks = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5] * 6
    bulk = NgramIndex(1, 5)
    bulk.extend(toks)
    inc = NgramIndex(1, 5)
    for t in toks:
        inc.extend([t])
    assert bulk.ends == inc.ends
    assert bulk.ends[3][_hash([1, 5, 9])] == max(
        q for q in range(3, len(toks)) if toks[q - 3 : q] == [1, 5, 9]
    )


def test_ngram_proposes_what_followed_the_longest_earlier_match():
    idx = NgramIndex(1, 4)
    idx.extend([1, 2, 3, 4, 5, 6, 9, 9, 2, 3, 4])
    assert idx.propose(3) == [5, 6, 9]  # "2 3 4" occurred before, followed by 5 6 9
    idx.extend([7])
    assert idx.propose(2) == []  # nothing ends with 7 earlier
    assert NgramIndex(1, 4).propose(3) == []


def test_verify_greedy_accepts_the_longest_matching_prefix():
    V = 16
    logits = torch.full((7, V), -5.0)
    # Request 0: rows 0-3 (pending + 3 drafts); the target's argmax per row is 5, 6, 7, 8.
    for row, best in zip(range(4), [5, 6, 7, 8]):
        logits[row, best] = 5.0
    # Request 1: rows 4-6 (pending + 2 drafts); argmax 1, 2, 3.
    for row, best in zip(range(4, 7), [1, 2, 3]):
        logits[row, best] = 5.0
    ids = torch.tensor([0, 5, 6, 9, 0, 4, 2])  # req 0 drafts 5 6 9; req 1 drafts 4 2
    info = _greedy_info(7, V)
    out = launch_verify(logits, ids, VerifyLayout.of([3, 2]), info).result()
    assert out.accept_lens == [2, 0]
    assert out.tokens == [[5, 6, 7], [1]]  # accepted 5 6, then the target's 7; req 1: just 1


def _greedy_info(rows: int, V: int) -> SamplingBatchInfo:
    z = torch.zeros(rows)
    return SamplingBatchInfo(
        temperatures=torch.ones(rows, 1),
        top_ps=torch.ones(rows),
        top_ks=torch.full((rows,), V),
        min_ps=z,
        greedy=torch.ones(rows, dtype=torch.bool),
        seeds=torch.zeros(rows, dtype=torch.int64),
        steps=torch.arange(rows),
        is_all_greedy=True,
        need_top_p=False,
        need_top_k=False,
        need_min_p=False,
        vocab_size=V,
    )


# ---------------------------------------------------------------------------- greedy identity
@pytest.fixture(scope="module")
def plain_outputs(tiny_models) -> Dict[str, List[dict]]:
    sched = make(tiny_models)
    return {"rep": run_batch(sched, repetitive_prompts(), 24)}


@pytest.mark.parametrize(
    "name,kw",
    [
        ("ngram", dict(speculative_algorithm="NGRAM")),
        (
            "ngram-chunked-page4",
            dict(speculative_algorithm="NGRAM", chunked_prefill_size=32, page_size=4),
        ),
        ("ngram-8-drafts", dict(speculative_algorithm="NGRAM", speculative_num_draft_tokens=8)),
        ("ngram-plain-loop", dict(speculative_algorithm="NGRAM", disable_overlap_schedule=True)),
    ],
)
def test_ngram_greedy_matches_plain_decoding(tiny_models, plain_outputs, name, kw):
    got = run_batch(make(tiny_models, **kw), repetitive_prompts(), 24)
    assert [g["ids"] for g in got] == [p["ids"] for p in plain_outputs["rep"]]
    # Repetitive text gets more than one token per verify on average.
    verify_ct = sum(g["verify"] for g in got)
    emitted = sum(len(g["ids"]) - 1 for g in got)  # the first token comes from the prefill
    assert verify_ct > 0 and emitted / verify_ct > 1.0, (emitted, verify_ct)


@pytest.mark.parametrize("draft,overlap", [("random", True), ("self", True), ("self", False)])
def test_standalone_greedy_matches_plain_decoding(tiny_models, plain_outputs, draft, overlap):
    path = tiny_models["qwen2"] if draft == "random" else tiny_models["llama"]
    sched = make(
        tiny_models,
        speculative_algorithm="STANDALONE",
        speculative_draft_model_path=path,
        disable_overlap_schedule=not overlap,
    )
    got = run_batch(sched, repetitive_prompts(), 24)
    assert [g["ids"] for g in got] == [p["ids"] for p in plain_outputs["rep"]]
    drafted = sum(r["verify"] for r in got) * 3
    accepted = sum(r["accepted"] for r in got)
    if draft == "self":
        # The target drafting for itself: a draft is its own greedy choice, so all are accepted
        # (up to the length cap, which trims the last steps' drafts).
        assert accepted >= 0.9 * drafted - 3 * len(got), (accepted, drafted)


def _eagle_head(tiny_models, tmp_path, variant: str, aux=None, draft_ids=None) -> str:
    import json

    from model_fixtures import write_eagle_head

    cfg = json.load(open(f"{tiny_models['llama']}/config.json"))
    layers = cfg["num_hidden_layers"]
    if variant == "EAGLE3" and aux is None:
        aux = [0, layers // 2, layers - 1]
    path = str(tmp_path / variant)
    g = torch.Generator().manual_seed(7)
    write_eagle_head(path, cfg, variant, g, cfg["vocab_size"] // 2, aux, draft_ids)
    return path


@pytest.mark.parametrize(
    "variant,kw",
    [
        ("EAGLE", {}),
        ("EAGLE3", {}),
        ("EAGLE3", dict(chunked_prefill_size=32)),
        ("EAGLE3", dict(chunked_prefill_size=32, disable_overlap_schedule=True)),
        ("EAGLE", dict(speculative_num_steps=5, speculative_num_draft_tokens=6)),
    ],
)
def test_eagle_greedy_matches_plain_decoding(tiny_models, plain_outputs, tmp_path, variant, kw):
    """A random EAGLE / EAGLE-3 head fed by the target's hidden states: the same tokens as plain
    decoding (the target checks every draft), every request drafted for, no slot leaked (the
    invariants run after every step)."""
    path = _eagle_head(tiny_models, tmp_path, variant)
    sched = make(
        tiny_models, speculative_algorithm=variant, speculative_draft_model_path=path, **kw
    )
    got = run_batch(sched, repetitive_prompts(), 24)
    assert [g["ids"] for g in got] == [p["ids"] for p in plain_outputs["rep"]]
    assert all(g["verify"] > 0 for g in got)
    # Every request's head state follows its sequence: the draft cache ends at the last pending
    # token a verify pass checked, and the features after it are the verified positions'.
    for req in sched.state.rid_to_req.values():
        assert req.spec_state is None or req.spec_state.feat_len() >= 0


def count_head_passes(proposer) -> List[tuple]:
    """Wraps an EagleProposer so that each draft round appends (requests drafted for, most drafts
    of one, head passes it ran) to the returned list."""
    head, layer, draft = proposer.head, proposer.head.layer, proposer.draft
    passes, rounds = [0], []

    def counted_layer(*a):
        passes[0] += 1
        return layer(*a)

    def counted_draft(reqs, num_drafts, prefix_lens):
        before = passes[0]
        out = draft(reqs, num_drafts, prefix_lens)
        rounds.append((sum(k > 0 for k in num_drafts), max(num_drafts), passes[0] - before))
        return out

    head.layer, proposer.draft = counted_layer, counted_draft
    return rounds


def test_eagle_chain_runs_one_head_pass_per_depth_for_the_whole_batch(
    tiny_models, plain_outputs, tmp_path
):
    """Chain drafting batches the requests: a draft round of k tokens over a batch runs the head
    k times (one absorb pass, then k - 1 feedback passes), however many requests it drafts for."""
    path = _eagle_head(tiny_models, tmp_path, "EAGLE")
    sched = make(tiny_models, speculative_algorithm="EAGLE", speculative_draft_model_path=path)
    rounds = count_head_passes(sched.spec.proposer)
    got = run_batch(sched, repetitive_prompts(), 24)
    assert [g["ids"] for g in got] == [p["ids"] for p in plain_outputs["rep"]]
    batched = [r for r in rounds if r[0] > 1]
    assert batched, rounds
    assert all(n_passes == k for _, k, n_passes in batched), rounds


@pytest.mark.parametrize("variant", ["EAGLE", "EAGLE3"])
def test_dummy_load_format_builds_a_random_head_from_its_config(tiny_models, tmp_path, variant):
    """`--load-format dummy` (benchmarks of real shapes) needs only the head's config.json: the
    random head has the layout's tensors (EAGLE-3: a 40-token draft vocabulary) and speculation
    over the dummy target gives the plain dummy run's tokens."""
    import json

    cfg = json.load(open(f"{tiny_models['llama']}/config.json"))
    cfg["draft_vocab_size"] = 40 if variant == "EAGLE3" else cfg["vocab_size"]
    head_dir = tmp_path / "head"
    head_dir.mkdir()
    (head_dir / "config.json").write_text(json.dumps(cfg))
    prompts = repetitive_prompts()
    plain = run_batch(make(tiny_models, load_format="dummy"), prompts, 12)
    sched = make(
        tiny_models,
        load_format="dummy",
        speculative_algorithm=variant,
        speculative_draft_model_path=str(head_dir),
    )
    head = sched.spec.proposer.head
    assert head.c.variant == variant
    if variant == "EAGLE3":
        assert head.lm_head.shape[0] == 40 and head.draft_to_target.unique().numel() == 40
    got = run_batch(sched, prompts, 12)
    assert [g["ids"] for g in got] == [p["ids"] for p in plain]
    assert all(g["verify"] > 0 for g in got)


@pytest.mark.parametrize(
    "variant,chunk,eager",
    [("EAGLE", None, False), ("EAGLE", 16, False), ("EAGLE3", 16, False), ("EAGLE3", 16, True)],
)
def test_eagle_head_cache_is_built_from_the_targets_hidden_states(
    tiny_models, hf_models, plain_outputs, tmp_path, variant, chunk, eager, monkeypatch
):
    """After a run, the head's K / V in its pool over [0, kv_end) must be what one pass of the head
    over the final sequence gives, with HF transformers' hidden states of the target as features
    (EAGLE: the final normed ones; EAGLE-3: layer 0's output, three times): the features that the
    prefill chunks and verify passes stored, with the drafts' KV dropped after each verify,
    assembled exactly the target's. The EAGLE-3 head's draft vocabulary is one token, the one the
    plain run repeats most, so some drafts are accepted and verify rows past the first are kept.
    The head's KV is paged at the target's slots (eagle_paged.py), or with SGLANG_EAGLE_EAGER=1
    (the proposer TP uses) in per-request caches."""
    import collections

    from sglang.srt.speculative.eagle_kv import EagleKV

    prompt = repetitive_prompts()[1]
    common = collections.Counter(plain_outputs["rep"][1]["ids"]).most_common(1)[0][0]
    draft_ids = [common] if variant == "EAGLE3" else None
    path = _eagle_head(tiny_models, tmp_path, variant, aux=[0, 0, 0], draft_ids=draft_ids)
    kw = {} if chunk is None else dict(chunked_prefill_size=chunk)
    if eager:
        monkeypatch.setenv("SGLANG_EAGLE_EAGER", "1")
    sched = make(
        tiny_models, speculative_algorithm=variant, speculative_draft_model_path=path, **kw
    )
    rid = f"e{next(_rid)}"
    sp = SamplingParams(max_new_tokens=24, temperature=0.0)
    sp.normalize(None)
    sched.intake.handle_generate_request(
        TokenizedGenerateReqInput(rid=rid, input_ids=prompt, sampling_params=sp)
    )
    req = sched.state.rid_to_req[rid]
    while not req.finished():
        sched.step()
    assert req.output_ids == plain_outputs["rep"][1]["ids"]
    if variant == "EAGLE3":
        assert req.spec_accepted > 0
    st = req.spec_state
    assert st.kv_end > len(prompt)
    seq = torch.tensor(req.all_ids()[: st.kv_end + 1])
    proposer = sched.spec.proposer
    head = proposer.head
    with torch.no_grad():
        hs = hf_models(tiny_models["llama"])(seq[None], output_hidden_states=True).hidden_states
        if variant == "EAGLE":
            feats = hs[-1][0, : st.kv_end]
        else:
            feats = head.first_feature(torch.cat([hs[1][0, : st.kv_end]] * 3, -1))
        fresh = EagleKV()
        head.step(seq[1:], feats, torch.arange(st.kv_end), fresh)
    if eager:
        assert st.kv_start == 0 and not hasattr(proposer, "runner")
        k, v = st.kv.k, st.kv.v
    else:
        # The head's pool at the sequence's slots (the radix cache holds them after the request).
        slots = sched.pools.tree_cache.match_prefix(seq.tolist()).device_indices[: st.kv_end]
        assert len(slots) == st.kv_end
        pool = proposer.runner.token_to_kv_pool
        k, v = pool.k_buffer[0][slots], pool.v_buffer[0][slots]
    assert k.shape == fresh.k.shape
    assert torch.allclose(k, fresh.k, atol=1e-4, rtol=1e-3)
    assert torch.allclose(v, fresh.v, atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("variant", ["EAGLE", "EAGLE3"])
def test_eagle_head_pool_shares_the_targets_slots_and_is_reserved(tiny_models, tmp_path, variant):
    """The head's runner holds one layer of KV at exactly the target's slot numbers over the
    target's request table, and the target's pool sizing took that layer's bytes per token (and
    the head's weights, counted from its config) out of its budget."""
    path = _eagle_head(tiny_models, tmp_path, variant)
    sched = make(tiny_models, speculative_algorithm=variant, speculative_draft_model_path=path)
    target, head = sched.model_runner, sched.spec.proposer.runner
    assert head.req_to_token_pool is target.req_to_token_pool
    assert head.max_total_num_tokens == target.max_total_num_tokens
    assert head.model_config.num_hidden_layers == 1 and len(head.token_to_kv_pool.k_buffer) == 1
    weights, cell = target._draft_reserve()
    assert cell == head.cell_size() > 0
    params = sum(t.numel() for t in sched.spec.proposer.head.w.values())
    params += sched.spec.proposer.head.fc_w.numel()
    assert weights >= params * target.dtype.itemsize


def test_eagle_head_must_match_the_algorithm_and_the_target(tiny_models, tmp_path):
    path = _eagle_head(tiny_models, tmp_path, "EAGLE")
    with pytest.raises(ValueError, match="is an EAGLE draft head"):
        make(tiny_models, speculative_algorithm="EAGLE3", speculative_draft_model_path=path)
    with pytest.raises(ValueError, match="needs --speculative-draft-model-path"):
        make(tiny_models, speculative_algorithm="EAGLE")


@pytest.mark.parametrize("overlap", [True, False])
def test_logprobs_and_stop_tokens_match_plain_decoding(tiny_models, overlap):
    prompts = repetitive_prompts()[:2]
    plain = make(tiny_models)
    spec = make(tiny_models, speculative_algorithm="NGRAM", disable_overlap_schedule=not overlap)

    def run(sched, **kw):
        rid = f"lp{next(_rid)}"
        sp = SamplingParams(max_new_tokens=20, temperature=0.0, **kw)
        sp.normalize(None)
        sched.intake.handle_generate_request(
            TokenizedGenerateReqInput(
                rid=rid,
                input_ids=prompts[1],
                sampling_params=sp,
                return_logprob=True,
                top_logprobs_num=3,
                logprob_start_len=len(prompts[1]),
            )
        )
        req = sched.state.rid_to_req[rid]
        while not req.finished():
            sched.step()
        for _ in range(3):
            sched.step()
        return req

    a, b = run(plain), run(spec)
    assert b.output_ids == a.output_ids
    for (la, ta), (lb, tb) in zip(a.output_token_logprobs, b.output_token_logprobs):
        assert ta == tb and abs(la - lb) < 1e-4
    assert [[t for _, t in row] for row in b.output_top_logprobs] == [
        [t for _, t in row] for row in a.output_top_logprobs
    ]
    # A stop token that plain decoding meets at output position 6 ends the speculative run there
    # too, even when it sits inside an accepted run of drafts.
    stop = a.output_ids[6]
    first = a.output_ids.index(stop)
    c, d = run(plain, stop_token_ids=[stop]), run(spec, stop_token_ids=[stop])
    assert c.output_ids == d.output_ids == a.output_ids[: first + 1]


@pytest.mark.parametrize("algo,overlap", [("NGRAM", True), ("NGRAM", False), ("EAGLE3", True)])
def test_retraction_in_a_tiny_pool_keeps_tokens_and_accounting(
    tiny_models, tmp_path, algo, overlap
):
    prompts = [[600 + i, 601 + i, 602 + i] * 3 + [700 + i] for i in range(6)]
    ref = run_batch(make(tiny_models), prompts, 60)
    kw = dict(speculative_algorithm=algo, disable_overlap_schedule=not overlap)
    if algo == "EAGLE3":
        kw["speculative_draft_model_path"] = _eagle_head(tiny_models, tmp_path, algo)
    sched = make(tiny_models, max_total_tokens=192, max_running_requests=6, **kw)
    before = sched.stats.num_retracted_total
    got = run_batch(sched, prompts, 60)
    assert sched.stats.num_retracted_total > before
    assert [g["ids"] for g in got] == [r["ids"] for r in ref]


def run_staggered(sched: Scheduler, prompts: List[List[int]], max_new: int, gap: int):
    """One prompt arrives every `gap` steps (so prefills meet running verify passes); returns the
    tokens and, per launch, the launched mode with the modes then in flight."""
    launches = []
    real_launch = sched.launch_batch

    def launch(batch):
        launches.append((batch.forward_mode, [lb.forward_mode for lb in sched.state.in_flight]))
        return real_launch(batch)

    sched.launch_batch = launch
    reqs, pending = [], list(prompts)
    for step in range(3000):
        if pending and step % gap == 0:
            rid = f"st{next(_rid)}"
            sp = SamplingParams(max_new_tokens=max_new, temperature=0.0)
            sp.normalize(None)
            sched.intake.handle_generate_request(
                TokenizedGenerateReqInput(rid=rid, input_ids=pending.pop(0), sampling_params=sp)
            )
            reqs.append(sched.state.rid_to_req[rid])
        sched.step()
        sched.invariants.check_busy()
        if not pending and sched._is_fully_idle():
            break
    for _ in range(3):
        sched.step()
    assert all(r.finished() for r in reqs)
    return [list(r.output_ids) for r in reqs], launches


@pytest.mark.parametrize("algo", ["NGRAM", "EAGLE3"])
def test_overlap_loop_launches_prefills_during_verify_passes(tiny_models, tmp_path, algo):
    """Under the overlap loop a prompt arriving mid-decode is prefilled while a verify pass is in
    flight, and a verify pass is planned only with nothing in flight (drafts need every token);
    tokens equal plain decoding's and the plain loop's, chunked prompts included."""
    prompts = repetitive_prompts()
    kw = dict(speculative_algorithm=algo, chunked_prefill_size=32)
    if algo == "EAGLE3":
        kw["speculative_draft_model_path"] = _eagle_head(tiny_models, tmp_path, algo)
    ref, _ = run_staggered(make(tiny_models, chunked_prefill_size=32), prompts, 24, gap=5)
    off, off_launches = run_staggered(
        make(tiny_models, disable_overlap_schedule=True, **kw), prompts, 24, gap=5
    )
    on, on_launches = run_staggered(make(tiny_models, **kw), prompts, 24, gap=5)
    assert on == off == ref
    assert all(not flight for _, flight in off_launches)
    during_verify = [
        m
        for m, flight in on_launches
        if m.is_extend() and any(f.is_target_verify() for f in flight)
    ]
    assert during_verify, on_launches
    assert all(not flight for m, flight in on_launches if m.is_target_verify())


# ---------------------------------------------------------------------------- sampling
@pytest.fixture(scope="module")
def small_vocab_models(tmp_path_factory):
    from model_fixtures import write_tiny_model

    root = tmp_path_factory.mktemp("small_vocab")
    target = write_tiny_model("llama", str(root / "t"), seed=3, with_tokenizer=False, vocab_size=16)
    draft = write_tiny_model("llama", str(root / "d"), seed=4, with_tokenizer=False, vocab_size=16)
    return target, draft


def sample_second_tokens(path: str, n: int, **kw) -> List[Tuple[int, int]]:
    sa = ServerArgs(
        model_path=path,
        skip_tokenizer_init=True,
        grammar_backend="none",
        strict_memory_check=True,
        max_total_tokens=8192,
        max_running_requests=128,
        **kw,
    )
    sched = Scheduler(sa, None)
    prompt = [1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2, 3]
    reqs = []
    for i in range(n):
        sp = SamplingParams(
            max_new_tokens=4, temperature=1.0, sampling_seed=1000 + i, ignore_eos=True
        )
        sp.normalize(None)
        rid = f"c{next(_rid)}"
        sched.intake.handle_generate_request(
            TokenizedGenerateReqInput(rid=rid, input_ids=prompt, sampling_params=sp)
        )
        reqs.append(sched.state.rid_to_req[rid])
    while not sched._is_fully_idle():
        sched.step()
    sched.step()
    return [(r.output_ids[1], r.output_ids[2]) for r in reqs]


@pytest.mark.parametrize(
    "algo", ["NGRAM", "STANDALONE", "EAGLE3", "STANDALONE-tree", "EAGLE3-tree"]
)
def test_sampled_tokens_follow_the_target_distribution(small_vocab_models, tmp_path, algo):
    """The tokens speculation emits are distributed as plain sampling's: a chi-square test on the
    first two speculated positions (the prefill's token is shared). -tree: the draft grows a
    tree (topk 3), judged by the sibling rule with point-mass drafts."""
    from scipy.stats import chi2_contingency

    target, draft = small_vocab_models
    n = 600
    plain = sample_second_tokens(target, n)
    kw = dict(speculative_algorithm=algo.removesuffix("-tree"))
    if algo.endswith("-tree"):
        kw.update(speculative_eagle_topk=3, speculative_num_steps=2, speculative_num_draft_tokens=6)
    algo = kw["speculative_algorithm"]
    if algo == "STANDALONE":
        kw["speculative_draft_model_path"] = draft
    if algo == "EAGLE3":  # a random head over 10 of the 16 tokens: sampled drafts, rejections
        import json

        from model_fixtures import write_eagle_head

        cfg = json.load(open(f"{target}/config.json"))
        g = torch.Generator().manual_seed(5)
        write_eagle_head(str(tmp_path / "h"), cfg, "EAGLE3", g, 10, [0, 0, 1])
        kw["speculative_draft_model_path"] = str(tmp_path / "h")
    spec = sample_second_tokens(target, n, **kw)
    for pos in (0, 1):
        table = torch.zeros((2, 16), dtype=torch.int64)
        for row, samples in enumerate((plain, spec)):
            for s in samples:
                table[row, s[pos]] += 1
        keep = table.sum(0) > 0
        _, p, _, _ = chi2_contingency(table[:, keep].numpy())
        assert p > 0.001, (pos, table.tolist(), p)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_model_config_counts_the_parameters(tiny_models, arch):
    """The draft model's weights are reserved from the pool by this count (before it loads)."""
    from transformers import AutoModelForCausalLM

    from sglang.srt.configs.model_config import ModelConfig

    model = AutoModelForCausalLM.from_pretrained(tiny_models[arch])
    assert ModelConfig.from_path(tiny_models[arch]).num_params() == sum(
        p.numel() for p in model.parameters()
    )


@pytest.mark.parametrize("overlap", [True, False])
def test_grammar_constrained_drafts_match_plain_decoding(tiny_models, overlap):
    """Drafts for a constrained request are judged under the grammar's mask at each verify row:
    the output is the plain run's, it follows the regex, and its repeats are drafted and kept."""
    import re

    pattern = r"(yes, ){6}done"

    def run(sched):
        rid = f"g{next(_rid)}"
        sp = SamplingParams(max_new_tokens=40, temperature=0.0, regex=pattern)
        sp.normalize(sched.tokenizer)
        sched.intake.handle_generate_request(
            TokenizedGenerateReqInput(rid=rid, input_ids=[300, 301, 302] * 4, sampling_params=sp)
        )
        req = sched.state.rid_to_req[rid]
        deadline = time.time() + 120
        while not (req.finished() and sched._is_fully_idle()) and time.time() < deadline:
            sched.intake.recv_and_process_requests()  # polls the grammar compile (a thread)
            sched.step()
            sched.invariants.check_busy()
            if sched.state.last_batch is None:
                time.sleep(0.01)
        sched.step()
        return req

    plain = run(make(tiny_models, grammar_backend="xgrammar"))
    spec_sched = make(
        tiny_models,
        grammar_backend="xgrammar",
        speculative_algorithm="NGRAM",
        disable_overlap_schedule=not overlap,
    )
    spec = run(spec_sched)
    assert spec.output_ids == plain.output_ids
    text = spec_sched.tokenizer.decode(spec.output_ids, skip_special_tokens=True)
    assert re.fullmatch(pattern, text), text
    assert spec.spec_accepted > 0
