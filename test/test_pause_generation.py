"""/pause_generation and /continue_generation on the real server: in each mode no pass runs while
paused (the decode-step count stands still), requests that arrive wait in the queue, and after
continuing the paused request's tokens equal an unpaused run's."""

from __future__ import annotations

import concurrent.futures
import time

import pytest
import requests
from server_utils import assert_error_shape, generate

LONG_SP = {"max_new_tokens": 120, "temperature": 0, "ignore_eos": True}
PROMPT = "Write a long story about a lighthouse keeper"


def _info(url: str) -> dict:
    return requests.get(url + "/server_info", timeout=30).json()


def _until(pred, what: str, timeout: float = 120.0) -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _pause(url: str, mode: str) -> None:
    r = requests.post(url + "/pause_generation", json={"mode": mode}, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "ok"


def _continue(url: str) -> None:
    r = requests.post(url + "/continue_generation", timeout=60)
    assert r.status_code == 200, r.text


def _start_long(url: str, pool: concurrent.futures.Executor) -> concurrent.futures.Future:
    """A long greedy request, returned once it is decoding."""
    steps = _info(url)["num_decode_steps"]
    fut = pool.submit(generate, url, text=PROMPT, sampling_params=LONG_SP)
    _until(
        lambda: (
            (info := _info(url))["num_running_reqs"] == 1 and info["num_decode_steps"] > steps + 2
        ),
        "the request to decode",
    )
    return fut


def _assert_stands_still(url: str) -> dict:
    before = _info(url)
    time.sleep(0.3)
    after = _info(url)
    assert after["paused"] is not None
    assert after["num_decode_steps"] == before["num_decode_steps"], (before, after)
    return after


@pytest.fixture(scope="module")
def reference(default_server):
    r = generate(default_server.url, text=PROMPT, sampling_params=LONG_SP)
    assert r.status_code == 200, r.text
    return r.json()["output_ids"]


@pytest.mark.parametrize("mode", ["in_place", "retract"])
def test_paused_request_resumes_with_the_same_tokens(server_url, reference, mode):
    url = server_url
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        fut = _start_long(url, pool)
        try:
            _pause(url, mode)
            info = _assert_stands_still(url)
            total = info["max_total_num_tokens"]
            if mode == "in_place":
                assert (info["num_running_reqs"], info["num_waiting_reqs"]) == (1, 0)
                assert info["available_tokens"] + info["evictable_tokens"] < total  # KV kept
            else:
                assert (info["num_running_reqs"], info["num_waiting_reqs"]) == (0, 1)
                assert info["protected_tokens"] == 0
                assert info["available_tokens"] + info["evictable_tokens"] == total  # KV given back
            assert not fut.done()
        finally:
            _continue(url)
        out = fut.result(120).json()
    assert out["output_ids"] == reference
    assert out["meta_info"]["num_retractions"] == (1 if mode == "retract" else 0)
    assert _info(url)["paused"] is None


def test_abort_mode_ends_running_requests_and_holds_new_ones(server_url):
    url = server_url
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        running = _start_long(url, pool)
        try:
            _pause(url, "abort")
            out = running.result(60).json()
            assert out["meta_info"]["finish_reason"]["type"] == "abort"
            sp = {"max_new_tokens": 8, "temperature": 0}
            late = pool.submit(generate, url, text="Hello", sampling_params=sp)
            _until(lambda: _info(url)["num_waiting_reqs"] == 1, "the new request to queue")
            _assert_stands_still(url)
            assert not late.done()
            (load,) = requests.get(url + "/get_load", timeout=30).json()
            assert (load["dp_rank"], load["num_reqs"], load["num_waiting_reqs"]) == (0, 1, 1)
            assert load["num_tokens"] == 0  # nothing holds KV
        finally:
            _continue(url)
        r = late.result(60)
    assert r.status_code == 200, r.text
    assert r.json()["meta_info"]["finish_reason"]["type"] == "length"
    assert len(r.json()["output_ids"]) == 8


@pytest.mark.parametrize(
    "body,field",
    [
        ({"mode": "sleep"}, "mode"),
        ({"mode": 3}, "mode"),
        ({"mode": "abort", "when": 1}, "when"),
        ([1], "JSON object"),
    ],
)
def test_bad_pause_bodies_are_400(server_url, body, field):
    r = requests.post(server_url + "/pause_generation", json=body, timeout=30)
    assert field in assert_error_shape(r, 400, "BadRequestError")["message"]
    assert _info(server_url)["paused"] is None


def test_continue_without_a_pause_is_a_no_op(server_url):
    _continue(server_url)
    r = generate(server_url, text="Hi", sampling_params={"max_new_tokens": 2})
    assert r.status_code == 200, r.text
