"""Hostile and careless clients: nothing one request sends or fails to read may stall the others, hold
memory without bound, leak request state, or reveal the API key."""

from __future__ import annotations

import functools
import json
import socket
import threading
import time
from typing import Dict, List, Optional, Tuple

import psutil
import requests
from server_utils import GUARD_KEY, generate


# ---------------------------------------------------------------------------- stalls
@functools.lru_cache(maxsize=None)
def _hostile_bodies() -> Tuple[bytes, bytes]:
    huge_prompt = {"text": "a " * (10 << 20), "sampling_params": {"max_new_tokens": 4}}  # 20 MB
    huge_stop_list = {
        "text": "hi",
        "sampling_params": {"stop": ["x"] * (1 << 20)},
    }  # 1M strings, 5 MB
    return json.dumps(huge_prompt).encode(), json.dumps(huge_stop_list).encode()


def _timed_stream(url: str, n_tokens: int) -> List[float]:
    """Gaps between consecutive chunks of one greedy stream."""
    body = {
        "text": "Count from one:",
        "stream": True,
        "sampling_params": {"max_new_tokens": n_tokens, "ignore_eos": True},
    }
    stamps = []
    with requests.post(url + "/generate", json=body, stream=True, timeout=600) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith(b"data: {"):
                stamps.append(time.perf_counter())
    return [b - a for a, b in zip(stamps, stamps[1:])]


def _measure(url: str, hostile: bool) -> Tuple[float, float, List[int]]:
    """(largest token gap of a stream, slowest /health probe, statuses of the hostile requests)."""
    stop = threading.Event()
    probes: List[float] = []
    statuses: List[int] = []

    def probe() -> None:
        while not stop.is_set():
            t0 = time.perf_counter()
            assert requests.get(url + "/health", timeout=600).status_code == 200
            probes.append(time.perf_counter() - t0)
            time.sleep(0.02)

    def attack() -> None:
        bodies = _hostile_bodies()
        while not stop.is_set():
            body = bodies[len(statuses) % 2]
            r = requests.post(
                url + "/generate",
                data=body,
                headers={"content-type": "application/json"},
                timeout=600,
            )
            statuses.append(r.status_code)
            time.sleep(
                0.1
            )  # hostile, not a load test: leave the client's own CPU to the stream it measures

    threads = [threading.Thread(target=probe)] + (
        [threading.Thread(target=attack)] if hostile else []
    )
    for t in threads:
        t.start()
    try:
        time.sleep(0.5)
        gaps = _timed_stream(url, 48)
    finally:
        stop.set()
        for t in threads:
            t.join()
    return max(gaps), max(probes), statuses


def test_huge_prompts_and_stop_lists_do_not_stall_other_clients(server_url):
    """Parsing, tokenizing and checking run off the event loop (or are refused unread), so a stream and
    the health probe see at most a few decode steps of extra delay. Measured against the same stream
    without the hostile requests, so a loaded machine scales both sides alike."""
    base_gap, base_probe, _ = _measure(server_url, hostile=False)
    gap, probe, statuses = _measure(server_url, hostile=True)
    assert statuses and set(statuses) == {400}, statuses
    assert len(statuses) >= 2  # both kinds were sent while the stream ran
    step = max(base_gap, 1e-3)
    print(
        f"\nlargest gap {gap * 1e3:.0f} ms vs {base_gap * 1e3:.0f} ms alone; /health {probe * 1e3:.0f} ms"
    )
    assert gap < 8 * step, (gap, base_gap)
    assert probe < 8 * step + base_probe, (probe, base_gap, base_probe)


# ---------------------------------------------------------------------------- bodies
def _raw(url: str, head: str, body: bytes, timeout: float = 300) -> Tuple[int, bytes]:
    host, port = url.split("//")[1].split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(head.encode() + body)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
            if b"\r\n\r\n" in data and b"}" in data.split(b"\r\n\r\n", 1)[1]:
                break
    return int(data.split()[1]), data.split(b"\r\n\r\n", 1)[1]


def test_a_body_over_the_limit_is_refused_unread(server_url):
    for path in ("/generate", "/v1/chat/completions", "/v1/completions"):
        head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {200 << 20}\r\n\r\n"
        status, body = _raw(server_url, head, b'{"text": ')  # 9 of the 200 MB announced
        assert status == 413 and b"max-request-bytes" in body, body


def test_an_upload_that_never_finishes_gets_408(guarded_server):
    head = (
        "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {GUARD_KEY}\r\nContent-Length: 1000\r\n\r\n"
    )
    status, body = _raw(guarded_server.url, head, b'{"text": ')
    assert status == 408 and b"did not arrive" in body, body


def test_deep_nesting_is_a_400_and_leaves_no_state(server_url):
    nested = '{"x": ' * 1000 + "1" + "}" * 1000
    body = (
        '{"text": "hi", "rid": "deep-1", "sampling_params": {"max_new_tokens": 1, "custom_params": '
        + nested
        + "}}"
    )
    r = requests.post(
        server_url + "/generate",
        data=body,
        headers={"content-type": "application/json"},
        timeout=60,
    )
    assert r.status_code == 400 and "nests deeper" in r.json()["message"], r.text
    r = generate(server_url, text="hi", rid="deep-1", sampling_params={"max_new_tokens": 1})
    assert r.status_code == 200, r.text  # the rid was never registered, so it is free


def test_amplification_caps(server_url):
    r = generate(server_url, text="hi", return_logprob=True, top_logprobs_num=21)
    assert r.status_code == 400 and "max-top-logprobs-num" in r.json()["message"]
    r = generate(server_url, text=["hi"] * 50, sampling_params={"n": 128})
    assert r.status_code == 400 and "6400 generations" in r.json()["message"]
    r = generate(server_url, text=["hi"] * 600)
    assert r.status_code == 400 and "max-batch-requests" in r.json()["message"]
    r = requests.post(
        server_url + "/v1/completions", json={"prompt": ["hi"] * 50, "n": 100, "max_tokens": 1}
    )
    assert r.status_code == 400 and "max-batch-requests" in r.json()["message"]


# ---------------------------------------------------------------------------- slow readers
def _stuck_stream(url: str, body: Dict) -> socket.socket:
    """A streaming request from a client with a tiny receive window that never reads."""
    host, port = url.split("//")[1].split(":")
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect((host, int(port)))
    data = json.dumps(body).encode()
    s.sendall(
        (
            f"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {GUARD_KEY}\r\nContent-Length: {len(data)}\r\n\r\n"
        ).encode()
        + data
    )
    return s


def test_streams_that_never_read_are_cut_and_give_memory_back(guarded_server):
    """8 clients ask for long streams with 20 alternatives per token, then never read. Each is cut
    after --slow-consumer-timeout (3 s) of unread output: the requests are aborted long before their
    4000 tokens, and the HTTP process holds a bounded amount of memory meanwhile and after."""
    srv = guarded_server
    http = psutil.Process(srv.proc.pid)  # the `sglang serve` process is the HTTP process
    rss0 = http.memory_info().rss
    steps0 = srv.server_info()["num_decode_steps"]
    body = {  # every cumulative chunk repeats ~300 x 21 prompt logprob entries: socket buffers fill fast
        "text": "Write a very long story about " + "the sea and " * 100,
        "stream": True,
        "return_logprob": True,
        "logprob_start_len": 0,
        "top_logprobs_num": 20,
        "return_text_in_logprobs": True,
        "sampling_params": {"max_new_tokens": 4000, "ignore_eos": True},
    }
    socks: List[Optional[socket.socket]] = [_stuck_stream(srv.url, body) for _ in range(8)]
    peak = rss0
    try:
        deadline = time.time() + 900
        time.sleep(2)
        while time.time() < deadline:
            peak = max(peak, http.memory_info().rss)
            info = srv.server_info()
            if info["num_running_reqs"] == 0 and info["num_waiting_reqs"] == 0:
                break
            time.sleep(0.5)
        steps = srv.server_info()["num_decode_steps"] - steps0
        assert steps < 4000, f"the stuck streams ran {steps} decode steps: they were not cut"
        assert "closing its connection" in srv.log_text() or "aborting its stream" in srv.log_text()
        # A reading client is served normally meanwhile and afterwards.
        r = requests.post(
            srv.url + "/generate",
            json={"text": "hi", "sampling_params": {"max_new_tokens": 2}},
            headers=srv.headers,
            timeout=120,
        )
        assert r.status_code == 200
    finally:
        for s in socks:
            s.close()
    time.sleep(1)
    grown, kept = (peak - rss0) >> 20, (http.memory_info().rss - rss0) >> 20
    print(f"\nHTTP process: +{grown} MB at peak, +{kept} MB after ({steps} decode steps)")
    assert grown < 200 and kept < 100, (grown, kept)
    srv.check_idle_invariant()


# ---------------------------------------------------------------------------- secrets
def test_the_key_guards_everything_but_health_and_is_never_shown(guarded_server):
    srv = guarded_server
    assert (
        requests.get(srv.url + "/health", timeout=10).status_code == 200
    )  # open, for load balancers
    assert requests.get(srv.url + "/health_generate", timeout=60).status_code == 200
    for path in ("/metrics", "/server_info", "/model_info", "/v1/models"):
        r = requests.get(srv.url + path, timeout=30)
        assert r.status_code == 401, (path, r.status_code)
        assert (
            requests.get(
                srv.url + path, headers={"Authorization": "Bearer " + GUARD_KEY[:-1]}
            ).status_code
            == 401
        )
        ok = requests.get(srv.url + path, headers=srv.headers, timeout=30)
        assert ok.status_code == 200, path
        assert GUARD_KEY not in ok.text, path
    assert (
        requests.get(srv.url + "/server_info", headers=srv.headers).json()["api_key"]
        == "<redacted>"
    )
