"""The sampler against exact expectations: greedy, filtering, penalties, bias, min tokens, seeds, NaN."""

from __future__ import annotations

import math

import pytest
import torch

from sglang.srt.core.req import Req
from sglang.srt.core.sampling_params import SamplingParams
from sglang.srt.layers.sampler import (
    apply_logit_adjustments,
    bits_to_uniform,
    sample,
    uniform_noise,
)
from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo

V = 50


def _req(i=0, output=(), prompt=(1, 2, 3), **sp):
    p = SamplingParams(**sp)
    p.normalize(None)
    r = Req(f"r{i}", list(prompt), p, eos_token_ids={0}, vocab_size=V)
    r.output_ids = list(output)
    r.auto_seed = 1234 + i
    return r


def _info(reqs):
    return SamplingBatchInfo.from_reqs(reqs, V, "cpu")


def _logits(bs=1, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(bs, V, generator=g) * 3


def test_greedy_is_argmax_and_logprobs_are_raw():
    logits = _logits(4)
    reqs = [_req(i, temperature=0.0) for i in range(4)]
    out = sample(logits.clone(), _info(reqs), return_logprob=True, top_logprobs_nums=[3] * 4)
    assert out.next_token_ids.tolist() == logits.argmax(-1).tolist()
    ref = torch.log_softmax(logits, -1)
    assert torch.allclose(out.next_token_logprobs, ref.max(-1).values)
    assert torch.allclose(out.top_logprobs_val, ref.topk(3).values)


@pytest.mark.parametrize("original", [False, True])
def test_sampled_logprobs_are_temperature_scaled_unless_original(monkeypatch, original):
    """SGLang's rule: a sampled row reports log softmax(logits / T), before penalties and top-p;
    SGLANG_RETURN_ORIGINAL_LOGPROB=1 reports log softmax(logits). A greedy row is raw either way."""
    import sglang.srt.layers.sampler as sampler

    monkeypatch.setattr(sampler, "RETURN_ORIGINAL_LOGPROB", original)
    logits = _logits(3, 5)
    temps = [0.5, 0.0, 1.7]
    reqs = [
        _req(0, temperature=0.5, top_p=0.5, frequency_penalty=1.0, output=(4, 4)),
        _req(1, temperature=0.0),
        _req(2, temperature=1.7, top_k=5, sampling_seed=3),
    ]
    out = sample(logits.clone(), _info(reqs), return_logprob=True, top_logprobs_nums=[4] * 3)
    for row, t in enumerate(temps):
        scale = 1.0 if original or t == 0.0 else t
        ref = torch.log_softmax(logits[row] / scale, -1)
        tok = out.next_token_ids[row]
        assert torch.allclose(out.next_token_logprobs[row], ref[tok], atol=1e-6)
        assert torch.allclose(out.top_logprobs_val[row], ref.topk(4).values, atol=1e-6)


def test_same_seed_same_tokens_whatever_the_batch():
    logits = _logits(1, 1)
    alone = sample(
        logits.clone(), _info([_req(0, temperature=1.0, sampling_seed=7)])
    ).next_token_ids[0]
    mates = [_req(i, temperature=1.0) for i in range(1, 5)]
    batch = torch.cat([_logits(4, 2), logits])
    together = sample(
        batch, _info(mates + [_req(0, temperature=1.0, sampling_seed=7)])
    ).next_token_ids[-1]
    assert alone == together
    draws = {
        int(
            sample(
                logits.clone(), _info([_req(0, temperature=1.0, sampling_seed=s)])
            ).next_token_ids[0]
        )
        for s in range(40)
    }
    assert len(draws) > 3  # different seeds really differ


def test_sampling_follows_the_distribution():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0] + [-1e9] * (V - 4)])
    probs = torch.softmax(logits[0, :4], -1)
    n = 4000
    seeds = torch.arange(n)
    u = uniform_noise(seeds, torch.zeros(n, dtype=torch.int64), V)
    assert 0.0 < u.min() and u.max() < 1.0
    counts = torch.zeros(4)
    for s in range(0, n, 400):
        reqs = [_req(i, temperature=1.0, sampling_seed=s + i) for i in range(400)]
        ids = sample(logits.repeat(400, 1), _info(reqs)).next_token_ids
        counts += torch.bincount(ids, minlength=V)[:4].float()
    freq = counts / n
    assert torch.all((freq - probs).abs() < 4 * torch.sqrt(probs * (1 - probs) / n) + 1e-3), (
        freq,
        probs,
    )


@pytest.mark.parametrize("sp", [dict(top_k=1), dict(top_p=1e-6), dict(min_p=1.0)])
def test_filters_that_leave_only_the_top_token(sp):
    logits = _logits(6, 3)
    reqs = [_req(i, temperature=1.5, sampling_seed=i, **sp) for i in range(6)]
    assert sample(logits.clone(), _info(reqs)).next_token_ids.tolist() == logits.argmax(-1).tolist()


def test_top_k_never_picks_outside_the_k_best():
    logits = _logits(200, 4)
    reqs = [_req(i, temperature=2.0, top_k=3, sampling_seed=i) for i in range(200)]
    ids = sample(logits.clone(), _info(reqs)).next_token_ids
    top3 = logits.topk(3, dim=-1).indices
    assert all(int(i) in top3[k].tolist() for k, i in enumerate(ids))


def test_penalties_and_bias_exact():
    logits = _logits(1, 5)
    r = _req(
        0,
        output=[4, 4, 9],
        prompt=[9, 11],
        temperature=0.0,
        frequency_penalty=0.5,
        presence_penalty=0.25,
        repetition_penalty=1.5,
        logit_bias={"17": 2.0},
    )
    adj = logits.clone()
    apply_logit_adjustments(adj, _info([r]))
    ref = logits.clone()
    ref[0, 17] += 2.0
    ref[0, 4] -= 0.5 * 2 + 0.25
    ref[0, 9] -= 0.5 * 1 + 0.25
    for t in (4, 9, 11):
        ref[0, t] = ref[0, t] / 1.5 if ref[0, t] > 0 else ref[0, t] * 1.5
    assert torch.allclose(adj, ref, atol=1e-6)


def test_logit_bias_forces_a_token_and_min_new_tokens_blocks_stops():
    logits = _logits(1, 6)
    forced = sample(logits.clone(), _info([_req(0, temperature=0.0, logit_bias={"23": 100.0})]))
    assert forced.next_token_ids.tolist() == [23]
    logits[0, 0] = 50.0  # EOS (id 0) would win
    r = _req(0, temperature=0.0, min_new_tokens=2, stop_token_ids=[5])
    logits[0, 5] = 40.0
    assert sample(logits.clone(), _info([r])).next_token_ids.tolist() not in ([0], [5])
    r.output_ids = [7, 7]
    assert sample(logits.clone(), _info([r])).next_token_ids.tolist() == [0]


def test_nan_and_inf_logits_do_not_crash():
    logits = _logits(3, 7)
    logits[0] = float("nan")
    logits[1, 3] = float("inf")
    logits[2, :] = float("-inf")
    reqs = [_req(i, temperature=1.0, top_p=0.9, sampling_seed=i) for i in range(3)]
    out = sample(logits, _info(reqs))
    assert out.invalid.tolist() == [True, False, True]
    assert out.next_token_ids[1] == 3
    assert all(0 <= int(t) < V for t in out.next_token_ids)


def test_request_finishes_with_nan_happened_on_invalid_sample():
    r = _req(0, temperature=1.0)
    r.output_ids = [0 if False else 3]
    r.check_finished(None, invalid=True)
    assert r.finished_reason.to_wire() == {"type": "stop", "matched": "NaN happened"}


@pytest.mark.parametrize(
    "field,value",
    [
        ("temperature", math.nan),
        ("top_p", 0.0),
        ("top_k", 0),
        ("min_p", 1.5),
        ("repetition_penalty", 0.0),
        ("frequency_penalty", 3.0),
    ],
)
def test_invalid_sampling_params_are_rejected(field, value):
    p = SamplingParams(**{field: value})
    with pytest.raises(ValueError, match=field):
        p.verify(V)


def test_uniforms_never_reach_zero_or_one():
    h = torch.tensor([0, 1, 2**31, 2**32 - 2, 2**32 - 1], dtype=torch.int64)
    u = bits_to_uniform(h)
    assert bool((u > 0).all()) and bool((u < 1).all())
    assert bool(torch.isfinite(-torch.log(u)).all()) and bool((-torch.log(u) > 0).all())


def test_masked_tokens_are_never_sampled():
    """A row where a single token is allowed must always give that token, whatever the noise."""
    logits = _logits(512, 8)
    logits[:, :] = float("-inf")
    logits[:, 17] = 3.0
    reqs = [_req(i, temperature=1.0, sampling_seed=i) for i in range(512)]
    assert set(sample(logits, _info(reqs)).next_token_ids.tolist()) == {17}


def test_null_sampling_fields_mean_defaults_and_bad_ones_are_errors():
    """JSON null for any field is its default (it once reached verify() as None: a 500); n is bounded."""
    from dataclasses import fields

    from sglang.srt.core.sampling_params import MAX_N, SamplingParams

    names = SamplingParams.field_names()
    sp = SamplingParams.from_dict({name: None for name in names})
    sp.verify(1000)
    default = SamplingParams()
    assert all(
        getattr(sp, f.name) == getattr(default, f.name)
        for f in fields(SamplingParams)
        if f.name in names
    )
    for bad in ({"n": MAX_N + 1}, {"n": 0}, {"top_k": 0}, {"temperature": float("nan")}):
        with pytest.raises(ValueError):
            SamplingParams.from_dict(bad).verify(1000)
