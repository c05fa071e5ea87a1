"""HiCache through the real scheduler (in-process, tiny random Llama): prefixes pushed out of a small
device pool come back from host memory as cached tokens, and greedy output is token-identical to a
scheduler whose pool never evicts."""

from __future__ import annotations

import itertools
import json
import time
from typing import Dict, List

import pytest

from sglang.srt.core.io_struct.to_scheduler import AbortReq, TokenizedGenerateReqInput
from sglang.srt.core.sampling_params import SamplingParams
from sglang.srt.managers.scheduler.scheduler import Scheduler
from sglang.srt.server_args import ServerArgs

_rid = itertools.count()
PREFIX = 48  # four prefixes of 48 tokens + questions do not fit a 160-token pool together


def make_scheduler(tiny_models, **kw) -> Scheduler:
    sa = ServerArgs(
        model_path=tiny_models["llama"],
        tokenizer_path=tiny_models["llama"],
        max_running_requests=4,
        grammar_backend="none",
        strict_memory_check=True,
        **kw,
    )
    return Scheduler(sa, None)


def run(sched: Scheduler, prompts: List[List[int]], max_new: int = 6) -> List[dict]:
    """Submit one prompt at a time (each finishes before the next), return what each got."""
    out = []
    for ids in prompts:
        rid = f"h{next(_rid)}"
        sp = SamplingParams(max_new_tokens=max_new, temperature=0.0)
        sp.normalize(None)
        sched.intake.handle_generate_request(
            TokenizedGenerateReqInput(rid=rid, input_ids=ids, sampling_params=sp)
        )
        req = sched.state.rid_to_req[rid]
        for _ in range(2000):
            sched.step()
            sched.invariants.check_busy()
            if req.finished() and sched._is_fully_idle():
                break
            if sched.state.last_batch is None:
                time.sleep(0.002)  # waiting on a storage read: let its thread run
        assert req.finished()
        out.append(
            dict(
                ids=list(req.output_ids),
                cached=req.cached_tokens,
                host=req.cached_host_tokens,
            )
        )
    for _ in range(3):
        sched.step()  # idle passes: the idle invariant (strict) runs
    return out


def workload() -> List[List[int]]:
    prefixes = [[10 + g] * 4 + list(range(20 + g, 20 + g + PREFIX - 4)) for g in range(4)]
    first = [p + [200 + g, 201] for g, p in enumerate(prefixes)]
    again = [p + [210 + g, 211, 212] for g, p in enumerate(prefixes)]
    return first + again


@pytest.mark.parametrize(
    "policy,overlap",
    [("write_through", True), ("write_through_selective", False), ("write_back", True)],
)
def test_evicted_prefixes_return_from_host_with_identical_tokens(tiny_models, policy, overlap):
    prompts = workload()
    ref = run(make_scheduler(tiny_models, max_total_tokens=4096), prompts)
    sched = make_scheduler(
        tiny_models,
        max_total_tokens=160,
        enable_hierarchical_cache=True,
        hicache_write_policy=policy,
        hicache_ratio=4.0,
        disable_overlap_schedule=not overlap,
    )
    got = run(sched, prompts)
    assert [g["ids"] for g in got] == [r["ids"] for r in ref]
    second = got[4:]
    if policy == "write_through_selective":
        # One use before eviction is below the threshold: nothing went down, nothing comes back.
        assert all(g["host"] == 0 for g in second)
    else:
        # The first two groups' prefixes were pushed out of the device by the later ones.
        assert second[0]["host"] > 0 and second[1]["host"] > 0
        assert all(g["cached"] >= PREFIX - 1 for g in second)
    info = sched.internal_state()
    assert info["hicache_host_total_tokens"] == 640
    hits = info["cached_tokens_host_total"]
    assert hits == sum(g["host"] for g in got)
    tree = sched.pools.tree_cache
    assert tree.host_protected_size() == 0
    avail, ev, prot, owned, total = tree.host_accounting()
    assert avail + ev + prot + owned == total


def test_selective_policy_copies_prefixes_used_twice(tiny_models):
    """write_through_selective: a prefix hit twice is copied down and survives eviction."""
    p = [7] * 8 + list(range(30, 30 + PREFIX - 8))
    others = [[9 + g] * 8 + list(range(100 + g, 100 + g + PREFIX - 8)) for g in range(3)]
    prompts = [p + [1], p + [2], *[o + [3] for o in others], p + [4, 5]]
    sched = make_scheduler(
        tiny_models,
        max_total_tokens=160,
        enable_hierarchical_cache=True,
        hicache_write_policy="write_through_selective",
        hicache_ratio=4.0,
    )
    ref = run(make_scheduler(tiny_models, max_total_tokens=4096), prompts)
    got = run(sched, prompts)
    assert [g["ids"] for g in got] == [r["ids"] for r in ref]
    assert got[-1]["host"] > 0


def test_flush_cache_empties_the_host_pool(tiny_models):
    sched = make_scheduler(
        tiny_models, max_total_tokens=160, enable_hierarchical_cache=True, hicache_ratio=2.0
    )
    run(sched, workload()[:4])
    assert sched.internal_state()["hicache_host_used_tokens"] > 0
    ok, _ = sched.flush_cache()
    assert ok
    info: Dict = sched.internal_state()
    assert info["hicache_host_used_tokens"] == 0 and info["evictable_tokens"] == 0


# ---------------------------------------------------------------------------- storage tier
LONG = 320  # over the 256-token prefetch threshold


def storage_scheduler(tiny_models, storage_dir, policy="wait_complete", **kw) -> Scheduler:
    return make_scheduler(
        tiny_models,
        max_total_tokens=1024,
        enable_hierarchical_cache=True,
        hicache_storage_backend="file",
        hicache_storage_prefetch_policy=policy,
        hicache_storage_backend_extra_config=json.dumps({"storage_dir": str(storage_dir)}),
        **kw,
    )


def wait_storage_idle(sched: Scheduler) -> None:
    for _ in range(2000):
        sched.step()
        if not sched.pools.tree_cache.busy():
            return
        time.sleep(0.005)
    raise AssertionError("storage writes did not finish")


@pytest.mark.parametrize("policy", ["wait_complete", "timeout", "best_effort"])
def test_second_scheduler_reads_blocks_the_first_wrote(tiny_models, tmp_path, policy):
    prompt = [5] * 8 + list(range(40, 40 + LONG - 8))
    first = storage_scheduler(tiny_models, tmp_path, disable_overlap_schedule=True)
    a = run(first, [prompt + [1, 2]])[0]
    wait_storage_idle(first)
    written = first.internal_state()["hicache_storage_write_blocks_total"]
    assert written == (LONG + 2) // 64  # every whole block of the prompt (prefix) went down
    files = list(tmp_path.rglob("*.kv"))
    assert len(files) == written
    second = storage_scheduler(tiny_models, tmp_path, policy=policy)
    b = run(second, [prompt + [1, 2]])[0]
    assert b["ids"] == a["ids"]
    info = second.internal_state()
    if policy == "best_effort":
        # Admitted as soon as it could run: whatever the reader had finished by then.
        assert info["hicache_storage_read_blocks_total"] >= 0
    else:
        blocks = info["hicache_storage_read_blocks_total"]
        assert blocks == written and info["cached_tokens_storage_total"] == written * 64
        assert b["cached"] == written * 64
    wait_storage_idle(second)
    tree = second.pools.tree_cache
    avail, ev, prot, owned, total = tree.host_accounting()
    assert prot == 0 and owned == 0 and avail + ev == total


def test_abandoned_prefetch_gives_its_host_slots_back(tiny_models, tmp_path):
    prompt = [6] * 8 + list(range(50, 50 + LONG - 8))
    first = storage_scheduler(tiny_models, tmp_path)
    run(first, [prompt + [3]])
    wait_storage_idle(first)
    second = storage_scheduler(tiny_models, tmp_path)
    sp = SamplingParams(max_new_tokens=4, temperature=0.0)
    sp.normalize(None)
    second.intake.handle_generate_request(
        TokenizedGenerateReqInput(rid="gone", input_ids=prompt + [3], sampling_params=sp)
    )
    assert second.state.waiting_queue[0].prefetch is not None
    second.intake.abort_request(AbortReq(rid="gone"))
    wait_storage_idle(second)
    for _ in range(3):
        second.step()
    avail, ev, prot, owned, total = second.pools.tree_cache.host_accounting()
    assert owned == 0 and avail + ev == total
    assert second.state.rid_to_req == {}
