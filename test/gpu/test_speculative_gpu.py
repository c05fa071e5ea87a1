"""Speculative decoding on CUDA: verify passes replay the decode CUDA graphs (one row per verified
token) and greedy output stays token-identical to plain decoding, for NGRAM and a draft model."""

from __future__ import annotations

import itertools

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

_rid = itertools.count()


def _run(path, prompts, setup=None, **kw):
    from sglang.srt.core.io_struct.to_scheduler import TokenizedGenerateReqInput
    from sglang.srt.core.sampling_params import SamplingParams
    from sglang.srt.managers.scheduler.scheduler import Scheduler
    from sglang.srt.server_args import ServerArgs

    sa = ServerArgs(
        model_path=path,
        skip_tokenizer_init=True,
        max_total_tokens=8192,
        max_running_requests=8,
        cuda_graph_max_bs=32,
        grammar_backend="none",
        strict_memory_check=True,
        **kw,
    )
    sched = Scheduler(sa, None)
    if setup is not None:
        setup(sched)
    reqs = []
    for ids in prompts:
        sp = SamplingParams(max_new_tokens=24, temperature=0.0, ignore_eos=True)
        sp.normalize(None)
        rid = f"g{next(_rid)}"
        sched.intake.handle_generate_request(
            TokenizedGenerateReqInput(rid=rid, input_ids=ids, sampling_params=sp)
        )
        reqs.append(sched.state.rid_to_req[rid])
    while not sched._is_fully_idle():
        sched.step()
    sched.step()
    return [list(r.output_ids) for r in reqs], sum(r.spec_accepted for r in reqs), sched


@pytest.mark.parametrize("algo", ["NGRAM", "STANDALONE"])
def test_greedy_tokens_identical_on_cuda(tiny_ckpts, algo):
    path = tiny_ckpts["llama"]
    base = list(range(300, 340))
    prompts = [base * 3, [7, 8, 9] * 20, base[::2] * 4, list(range(500, 530))]
    plain, _, _ = _run(path, prompts)
    kw = dict(speculative_algorithm=algo)
    if algo == "STANDALONE":
        kw["speculative_draft_model_path"] = path  # drafting for itself: everything is accepted
    spec, accepted, sched = _run(path, prompts, **kw)
    assert spec == plain
    assert sched.model_runner.graph_runner is not None
    if algo == "STANDALONE":
        # Most drafts are accepted; draft (few rows) and verify (more rows) round differently, so
        # near-tied logits of a random model may still disagree.
        assert accepted > 0.6 * 4 * 20
        # The draft's decode steps replay its own graphs over the target's request table.
        assert sched.spec.proposer.runner.graph_runner.num_replays > 0


@pytest.mark.parametrize("variant", ["EAGLE", "EAGLE3"])
def test_eagle_greedy_tokens_identical_on_cuda(tiny_ckpts, tmp_path, variant, monkeypatch):
    """A random EAGLE / EAGLE-3 head on the device (its KV paged at the target's slot numbers, its
    chain steps and short absorbs replaying its own decode graphs; the target's verify passes
    replay graphs that also return the hidden states the head reads): the same tokens as plain
    decoding, with the head's per-request-cache twin (SGLANG_EAGLE_EAGER=1) too."""
    import json

    from model_fixtures import write_eagle_head

    path = tiny_ckpts["llama"]
    cfg = json.load(open(f"{path}/config.json"))
    n = cfg["num_hidden_layers"]
    head = str(tmp_path / variant)
    g = torch.Generator().manual_seed(7)
    write_eagle_head(head, cfg, variant, g, cfg["vocab_size"] // 2, [0, n // 2, n - 1])
    prompts = [list(range(300, 340)) * 3, [7, 8, 9] * 20]
    # fp32: the head's eager step and the target agree on near-ties only at full precision.
    kw = dict(speculative_algorithm=variant, speculative_draft_model_path=head, dtype="float32")
    spec, accepted, sched = _run(path, prompts, **kw)
    plain, _, _ = _run(path, prompts, dtype="float32")
    assert spec == plain
    assert sched.model_runner.graph_runner.capture_hidden == sched.spec.proposer.capture
    assert sched.model_runner.graph_runner.num_replays > 0
    assert sched.spec.proposer.runner.graph_runner.num_replays > 0
    monkeypatch.setenv("SGLANG_EAGLE_EAGER", "1")
    eager, _, sched = _run(path, prompts, **kw)
    assert eager == plain and not hasattr(sched.spec.proposer, "runner")


def test_draft_trees_on_cuda(tiny_ckpts):
    """Tree verify passes (one decode row per node through its scratch table row, under the
    decode CUDA graphs) on the device: NGRAM
    trees, and an oracle whose right continuation is always a later branch (its KV is moved into
    place after each verdict), both token-identical to plain decoding (fp32: no near-tie flips)."""
    from test_spec_trees import BranchOracle, branching_prompts

    path = tiny_ckpts["llama"]
    prompts = branching_prompts()
    plain, _, _ = _run(path, prompts, dtype="float32")
    tree_kw = dict(
        dtype="float32",
        speculative_algorithm="NGRAM",
        speculative_ngram_max_bfs_breadth=4,
        speculative_num_draft_tokens=8,
    )
    spec, _, sched = _run(path, prompts, **tree_kw)
    assert spec == plain
    ref = {tuple(p): out for p, out in zip(prompts, plain)}

    def oracle(s):
        s.spec.proposer = BranchOracle(ref, s.spec.vocab)

    spec, accepted, sched = _run(path, prompts, setup=oracle, **tree_kw)
    assert spec == plain
    assert sched.spec.num_tree_passes > 0 and accepted > 2 * len(prompts)
    assert sched.model_runner.graph_runner.num_replays > 0


@pytest.mark.parametrize("algo", ["STANDALONE", "EAGLE3"])
def test_draft_model_trees_on_cuda(tiny_ckpts, tmp_path, algo):
    """A draft model's (or head's) tree search on the device: frontier nodes as decode rows through
    scratch table rows and scratch KV slots, then tree verify passes; token-identical to plain
    decoding (fp32)."""
    from test_spec_trees import branching_prompts

    path = tiny_ckpts["llama"]
    prompts = branching_prompts()
    plain, _, _ = _run(path, prompts, dtype="float32")
    draft = path
    if algo == "EAGLE3":
        import json

        from model_fixtures import write_eagle_head

        cfg = json.load(open(f"{path}/config.json"))
        g = torch.Generator().manual_seed(7)
        n = cfg["num_hidden_layers"]
        draft = str(tmp_path / "head")
        write_eagle_head(draft, cfg, "EAGLE3", g, cfg["vocab_size"] // 2, [0, n // 2, n - 1])
    spec, _, sched = _run(
        path,
        prompts,
        dtype="float32",
        speculative_algorithm=algo,
        speculative_draft_model_path=draft,
        speculative_eagle_topk=3,
        speculative_num_steps=3,
        speculative_num_draft_tokens=7,
    )
    assert spec == plain
    assert sched.spec.num_tree_passes > 0
    # Frontier batches (up to topk rows a request) replay the draft's (or head's) graphs.
    assert sched.spec.proposer.runner.graph_runner.num_replays > 0
