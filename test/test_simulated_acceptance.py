"""SGLANG_SIMULATE_ACC_LEN / _METHOD (SGLang's benchmark knob): verify passes accept a set number of
drafts whatever the target says; the emitted tokens are the drafts."""

from __future__ import annotations

import pytest
from test_speculative import make, plain_outputs, repetitive_prompts, run_batch  # noqa: F401

from sglang.srt.speculative.simulated_acceptance import SimulatedAcceptance


def test_counts_have_the_asked_mean_and_fit_the_drafts():
    exact = SimulatedAcceptance(2.5, "match-expected")
    got = [exact.counts([3, 3, 3, 3]) for _ in range(50)]
    assert sum(map(sum, got)) == 300  # 1.5 drafts x 200 request-verifies, no randomness
    drawn = SimulatedAcceptance(2.5, "multinomial", seed=1)
    many = [c for _ in range(2000) for c in drawn.counts([3])]
    assert set(many) == {1, 2} and abs(sum(many) / len(many) - 1.5) < 0.05
    assert SimulatedAcceptance(9.0).counts([2, 0, 5]) == [2, 0, 5]  # clamped to the drafts
    for bad in (0.5, float("nan")):
        with pytest.raises(ValueError):
            SimulatedAcceptance(bad)


@pytest.mark.parametrize("tree", [False, True])
def test_a_self_drafting_server_accepts_what_it_is_told(
    tiny_models,
    plain_outputs,  # noqa: F811 - the fixture imported above
    monkeypatch,
    tree,
):
    """The target drafting for itself would accept every draft; told 2 tokens per verify it accepts
    one draft per pass, and its drafts are its own greedy tokens, so the output is unchanged."""
    monkeypatch.setenv("SGLANG_SIMULATE_ACC_LEN", "2")
    monkeypatch.setenv("SGLANG_SIMULATE_ACC_METHOD", "match-expected")
    kw = dict(speculative_algorithm="STANDALONE", speculative_draft_model_path=tiny_models["llama"])
    if tree:
        kw.update(speculative_eagle_topk=2, speculative_num_steps=3, speculative_num_draft_tokens=6)
    sched = make(tiny_models, **kw)
    got = run_batch(sched, repetitive_prompts(), 24)
    assert [g["ids"] for g in got] == [p["ids"] for p in plain_outputs["rep"]]
    for g in got:
        # Every verify accepted exactly one draft, except where the length cap left none.
        assert g["verify"] - 2 <= g["accepted"] <= g["verify"], g
