"""HiCache through `sglang serve` on the embedded SmolLM2: a small device pool whose prefixes are
pushed out comes back from host memory with the same greedy text as a server that never evicts
(each write policy); a second server on the same storage directory reads the first one's blocks;
a storm of streams with random disconnects leaves both pools exact."""

from __future__ import annotations

import json
import random
import threading
from typing import List

import pytest
import requests
from server_utils import ServerProcess, generate

POOL = 800  # tokens: about three of the groups' prompts at once


def group_prompt(g: int, question: int) -> str:
    facts = " ".join(f"Fact {i} of team {g}: the number {i * 7 + g} is lucky." for i in range(16))
    return f"System for team {g}. {facts}\nQuestion {question}: what is lucky?"


def greedy(url: str, text: str) -> dict:
    r = generate(url, text, sampling_params={"max_new_tokens": 8, "temperature": 0})
    assert r.status_code == 200, r.text
    return r.json()


def hicache_server(policy: str, *extra: str) -> ServerProcess:
    return ServerProcess(
        [
            "--max-total-tokens",
            str(POOL),
            "--enable-hierarchical-cache",
            "--hicache-write-policy",
            policy,
            "--hicache-ratio",
            "4",
            "--skip-server-warmup",
            *extra,
        ]
    )


def run_groups(url: str) -> List[dict]:
    """Four groups once (the first ones get evicted), then each group again."""
    return [greedy(url, group_prompt(g, q)) for q in (0, 1) for g in range(4)]


@pytest.fixture(scope="module")
def storage_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("hicache-storage"))


def storage_args(storage_dir: str) -> List[str]:
    cfg = json.dumps({"storage_dir": storage_dir})
    return ["--hicache-storage-backend", "file", "--hicache-storage-backend-extra-config", cfg]


@pytest.fixture(scope="module")
def tiered_server(storage_dir):
    """write_through with the file tier: the host-hit, storm and first-writer tests share it."""
    srv = hicache_server("write_through", *storage_args(storage_dir))
    yield srv
    srv.stop()


def check_host_hits(got: List[dict], ref: List[dict], policy: str, info: dict) -> None:
    assert [g["text"] for g in got] == [r["text"] for r in ref]
    again = [g["meta_info"] for g in got[4:]]
    host_hits = [m["cached_tokens_details"]["host"] for m in again]
    if policy == "write_through_selective":
        assert host_hits == [0, 0, 0, 0]  # used once before eviction: never copied down
    else:
        assert host_hits[0] > 150 and host_hits[1] > 150, again
        for m in again:
            d = m["cached_tokens_details"]
            assert d["device"] + d["host"] + d["storage"] == m["cached_tokens"]
        assert info["hicache_load_back_bytes_total"] > 0
    assert info["cached_tokens_host_total"] >= sum(host_hits)


def test_prefix_evicted_from_the_device_comes_back_from_host(default_server, tiered_server):
    got = run_groups(tiered_server.url)
    ref = run_groups(default_server.url)
    check_host_hits(got, ref, "write_through", tiered_server.server_info())
    tiered_server.check_idle_invariant()


@pytest.mark.slow  # the same workload runs in-process under each policy (test_hicache_scheduler.py)
@pytest.mark.parametrize("policy", ["write_through_selective", "write_back"])
def test_other_write_policies_through_the_server(default_server, policy):
    srv = hicache_server(policy)
    try:
        got = run_groups(srv.url)
        check_host_hits(got, run_groups(default_server.url), policy, srv.server_info())
        srv.check_idle_invariant()
    finally:
        srv.stop()


def test_storm_with_disconnects_keeps_both_pools_exact(tiered_server):
    srv = tiered_server
    rng = random.Random(7)
    errors: List[str] = []

    def client(i: int) -> None:
        body = {
            "text": group_prompt(i % 5, i),
            "stream": True,
            "sampling_params": {"max_new_tokens": 16, "ignore_eos": True},
        }
        leave_after = rng.choice([1, 3, None])
        try:
            with requests.post(srv.url + "/generate", json=body, stream=True, timeout=120) as r:
                if r.status_code != 200:
                    errors.append(f"{r.status_code} {r.text[:200]}")
                    return
                for n, _line in enumerate(r.iter_lines()):
                    if leave_after is not None and n >= leave_after:
                        return  # the connection closes mid-stream
        except requests.RequestException as e:
            errors.append(str(e))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    srv.check_idle_invariant()
    assert srv.server_info()["hicache_write_bytes_total"] > 0
    assert srv.alive()


# A second whole server; storage-tier hits are counted in-process by test_hicache_scheduler.
@pytest.mark.slow
def test_second_server_on_the_same_storage_gets_storage_hits(
    default_server, tiered_server, storage_dir
):
    text = group_prompt(9, 0)
    a = greedy(tiered_server.url, text)
    tiered_server.check_idle_invariant()  # waits for the storage writes to settle
    assert tiered_server.server_info()["hicache_storage_write_blocks_total"] > 0
    second = hicache_server(
        "write_through",
        *storage_args(storage_dir),
        "--hicache-storage-prefetch-policy",
        "wait_complete",
    )
    try:
        b = greedy(second.url, text)
        assert b["text"] == a["text"] == greedy(default_server.url, text)["text"]
        d = b["meta_info"]["cached_tokens_details"]
        assert d["storage"] >= 256 and d["storage"] % 64 == 0, d
        assert second.server_info()["hicache_storage_read_blocks_total"] == d["storage"] // 64
        second.check_idle_invariant()
    finally:
        second.stop()
