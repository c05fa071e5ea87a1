"""Scheduler flags end to end: flush refusal, paged KV, priorities with preemption, waiting timeout, lpm."""

from __future__ import annotations

import concurrent.futures
import time

import pytest
import requests
from server_utils import ServerProcess, generate

LONG_SP = {"max_new_tokens": 300, "ignore_eos": True}


def _bg(ex, url, **kw):
    return ex.submit(generate, url, **kw)


def test_flush_cache_refuses_while_requests_run(server_url):
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        fut = _bg(ex, server_url, text="Keep writing", rid="flush-busy", sampling_params=LONG_SP)
        time.sleep(1.5)
        r = requests.post(server_url + "/flush_cache")
        assert r.status_code == 400 and "not flushed" in r.text.lower()
        requests.post(server_url + "/abort_request", json={"rid": "flush-busy"})
        fut.result(60)
    time.sleep(0.5)
    assert requests.post(server_url + "/flush_cache").status_code == 200


# Paged allocation is covered in-process by the radix-cache and accounting hypothesis tests.
@pytest.mark.slow
def test_paged_kv_gives_the_same_tokens_and_aligned_cache_hits(server_url):
    srv = ServerProcess(
        ["--max-total-tokens", "4096", "--page-size", "4", "--chunked-prefill-size", "32"]
    )
    try:
        prompts = [f"Paged attention test number {i}: the quick brown fox" for i in range(5)]
        sp = {"max_new_tokens": 12, "temperature": 0}
        a = generate(server_url, text=prompts, sampling_params=sp).json()
        b = generate(srv.url, text=prompts, sampling_params=sp).json()
        assert [x["output_ids"] for x in a] == [y["output_ids"] for y in b]
        again = generate(srv.url, text=prompts[0] + " jumps", sampling_params=sp).json()
        cached = again["meta_info"]["cached_tokens"]
        assert cached > 0 and cached % 4 == 0
        srv.check_idle_invariant()
    finally:
        srv.stop()


def test_priority_scheduling_orders_queue_and_preempts():
    srv = ServerProcess(
        [
            "--max-total-tokens",
            "4096",
            "--max-running-requests",
            "1",
            "--enable-priority-scheduling",
            "--priority-scheduling-preemption-threshold",
            "5",
        ]
    )
    try:
        done = {}

        def run(rid, prio, n):
            r = requests.post(
                srv.url + "/generate",
                timeout=120,
                json={
                    "text": f"Job {rid}",
                    "rid": rid,
                    "priority": prio,
                    "sampling_params": {"max_new_tokens": n, "ignore_eos": True},
                },
            )
            done[rid] = time.time()
            return r

        with concurrent.futures.ThreadPoolExecutor(4) as ex:
            first = ex.submit(run, "low-running", 0, 60)
            time.sleep(1.0)
            queued = ex.submit(run, "low-queued", 0, 4)
            time.sleep(0.3)
            high = ex.submit(run, "high", 10, 4)
            rs = [first.result(), queued.result(), high.result()]
        assert all(r.status_code == 200 for r in rs)
        # high (10) beats the queued low (0) and, 10 > 0 + 5, preempts the running low one.
        assert done["high"] < done["low-queued"]
        assert done["high"] < done["low-running"]
        assert rs[0].json()["meta_info"]["num_retractions"] >= 1
        srv.check_idle_invariant()
    finally:
        srv.stop()


# A whole server held busy past the timeout; the 503 path is the same one overload takes.
@pytest.mark.slow
def test_request_waiting_timeout_gives_503():
    srv = ServerProcess(
        [
            "--max-total-tokens",
            "4096",
            "--max-running-requests",
            "1",
            "--request-waiting-timeout",
            "1",
        ]
    )
    try:
        with concurrent.futures.ThreadPoolExecutor(3) as ex:
            runner = _bg(
                ex,
                srv.url,
                text="Long job",
                sampling_params={"max_new_tokens": 120, "ignore_eos": True},
            )
            time.sleep(0.5)
            waiter = _bg(ex, srv.url, text="Short job", sampling_params={"max_new_tokens": 2})
            assert runner.result(120).status_code == 200
            r = waiter.result(120)
        assert r.status_code == 503 and r.json()["message"] == "Request waiting timeout reached."
        srv.check_idle_invariant()
    finally:
        srv.stop()


@pytest.mark.slow  # lpm runs in-process in the accounting hypothesis test (overlap-lpm)
def test_lpm_policy_serves_the_same_tokens(server_url):
    srv = ServerProcess(["--max-total-tokens", "4096", "--schedule-policy", "lpm"])
    try:
        base = "A shared instruction block that many prompts start with, repeated for length. " * 4
        prompts = [base + f"Question {i}?" for i in range(6)] + [f"Unrelated {i}" for i in range(3)]
        sp = {"max_new_tokens": 6, "temperature": 0}
        with concurrent.futures.ThreadPoolExecutor(9) as ex:
            outs = list(
                ex.map(lambda p: generate(srv.url, text=p, sampling_params=sp).json(), prompts)
            )
        ref = generate(server_url, text=prompts, sampling_params=sp).json()
        assert [o["output_ids"] for o in outs] == [r["output_ids"] for r in ref]
        assert sum(o["meta_info"]["cached_tokens"] for o in outs) > 4 * len(base) // 8
        srv.check_idle_invariant()
    finally:
        srv.stop()
