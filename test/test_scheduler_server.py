"""Scheduler policies end to end: retraction under a tiny pool, chunked prefill, prefix reuse, overload."""

from __future__ import annotations

import concurrent.futures
import random

import pytest
import requests
from server_utils import ServerProcess, assert_error_shape, generate

STORY = [f"Story number {i}: Once upon a time" for i in range(16)]
SP = {"max_new_tokens": 40, "temperature": 0}


def _run_all(url: str, prompts, sp, workers: int = 16):
    with concurrent.futures.ThreadPoolExecutor(workers) as ex:
        rs = list(ex.map(lambda p: generate(url, text=p, sampling_params=sp), prompts))
    for r in rs:
        assert r.status_code == 200, r.text
    return [r.json() for r in rs]


@pytest.fixture(scope="module")
def tiny_pool_server():
    # A low conservativeness admits nearly everything, so decode must retract on fast and slow machines alike.
    srv = ServerProcess(["--max-total-tokens", "400", "--schedule-conservativeness", "0.05"])
    yield srv
    srv.stop()


def test_tiny_pool_retracts_and_matches_unconstrained(tiny_pool_server, server_url):
    ref = _run_all(server_url, STORY, SP)
    outs = _run_all(tiny_pool_server.url, STORY, SP)
    assert [o["output_ids"] for o in outs] == [r["output_ids"] for r in ref]
    assert sum(o["meta_info"]["num_retractions"] for o in outs) > 0
    assert "KV cache pool is full. Retract requests." in tiny_pool_server.log_text()
    tiny_pool_server.check_idle_invariant()


def test_chunked_prefill_gives_the_same_tokens_and_logprobs(server_url):
    srv = ServerProcess(["--max-total-tokens", "4096", "--chunked-prefill-size", "32"])
    try:
        text = " ".join(f"Item {i} is a {['red', 'blue', 'green'][i % 3]} ball." for i in range(30))
        kw = dict(
            text=text,
            sampling_params={"max_new_tokens": 8, "temperature": 0},
            return_logprob=True,
            logprob_start_len=5,
        )
        a = generate(server_url, **kw).json()
        b = generate(srv.url, **kw).json()
        assert b["meta_info"]["prompt_tokens"] > 5 * 32
        assert a["output_ids"] == b["output_ids"]
        la, lb = a["meta_info"]["input_token_logprobs"], b["meta_info"]["input_token_logprobs"]
        assert len(la) == len(lb) == a["meta_info"]["prompt_tokens"] - 5
        assert all(
            (x[0] is None and y[0] is None) or abs(x[0] - y[0]) < 1e-3 for x, y in zip(la, lb)
        )
        srv.check_idle_invariant()
    finally:
        srv.stop()


def _shared_prefix_workload(
    seed: int = 0, groups: int = 3, per_group: int = 6, sys_len: int = 300, q_len: int = 20
):
    rng = random.Random(seed)
    prompts = []
    for _ in range(groups):
        system = [rng.randrange(1000, 40000) for _ in range(sys_len)]
        prompts.append(
            [system + [rng.randrange(1000, 40000) for _ in range(q_len)] for _ in range(per_group)]
        )
    return prompts


def _prefill_counts(srv: ServerProcess):
    info = srv.server_info()
    return info["prefill_input_tokens_total"], info["prefill_cached_tokens_total"]


def _send_groups(srv: ServerProcess, groups):
    for group in groups:
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            rs = list(
                ex.map(
                    lambda ids: generate(
                        srv.url,
                        input_ids=ids,
                        sampling_params={"max_new_tokens": 4, "temperature": 0},
                    ),
                    group,
                )
            )
        assert all(r.status_code == 200 for r in rs)


def test_shared_prefix_workload_hit_rate_and_prefill_savings(default_server):
    sys_len = 200
    groups = _shared_prefix_workload(seed=5, per_group=4, sys_len=sys_len)
    total_prompt = sum(len(p) for g in groups for p in g)
    on = default_server  # radix on, 20,000 tokens; the counts below are deltas
    off = ServerProcess(["--max-total-tokens", "20000", "--disable-radix-cache"])
    try:
        results = {}
        for name, srv in (("on", on), ("off", off)):
            c0, h0 = _prefill_counts(srv)
            _send_groups(srv, groups)
            c1, h1 = _prefill_counts(srv)
            results[name] = (c1 - c0, h1 - h0)
        computed_on, cached_on = results["on"]
        computed_off, cached_off = results["off"]
        assert (
            computed_on + cached_on == total_prompt
            and computed_off == total_prompt
            and cached_off == 0
        )
        # Only the first request of each group computes the system prompt.
        expected_hit = (len(groups) * (len(groups[0]) - 1) * sys_len) / total_prompt
        assert cached_on / total_prompt >= expected_hit - 0.01
        assert computed_off / computed_on >= 0.95 * total_prompt / (
            total_prompt - expected_hit * total_prompt
        )
        on.check_idle_invariant()
        off.check_idle_invariant()
    finally:
        off.stop()


@pytest.mark.slow  # the default suite keeps another 503 path (the waiting timeout)
def test_max_queued_requests_gives_503_and_the_rest_succeed():
    srv = ServerProcess(
        ["--max-total-tokens", "8192", "--max-queued-requests", "4", "--max-running-requests", "4"]
    )
    try:

        def one(i):
            return requests.post(
                srv.url + "/generate",
                timeout=120,
                json={
                    "text": f"Request {i}: describe the sea",
                    "stream": i % 2 == 0,
                    "sampling_params": {"max_new_tokens": 24, "ignore_eos": True},
                },
            )

        with concurrent.futures.ThreadPoolExecutor(64) as ex:
            rs = list(ex.map(one, range(64)))
        codes = [r.status_code for r in rs]
        assert set(codes) <= {200, 503}, codes
        busy = [r for r in rs if r.status_code == 503]
        assert busy and codes.count(200) >= 4
        for r in busy:  # the one error shape of every route (test_sglang_clients)
            assert (
                assert_error_shape(r, 503, "ServiceUnavailableError")["message"]
                == "The request queue is full."
            )
        chat = {
            "messages": [{"role": "user", "content": "Describe the sea"}],
            "max_tokens": 24,
            "ignore_eos": True,
        }
        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            rs = list(
                ex.map(
                    lambda _: requests.post(
                        srv.url + "/v1/chat/completions", json=chat, timeout=120
                    ),
                    range(16),
                )
            )
        assert {r.status_code for r in rs} <= {200, 503} and any(r.status_code == 503 for r in rs)
        for r in rs:
            if r.status_code == 503:
                assert_error_shape(r, 503, "ServiceUnavailableError")
        srv.check_idle_invariant()
    finally:
        srv.stop()
