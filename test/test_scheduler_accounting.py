"""The scheduler driven in-process by hypothesis: random arrivals, lengths, shared prefixes and aborts
against a tiny KV pool, under every loop/cache/page/chunk configuration. After every step each KV slot
must be free, in the tree, or owned by exactly one live request; at the end all requests finish and
the idle invariant holds."""

from __future__ import annotations

import itertools
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang.srt.core.finish_reason import FinishLength
from sglang.srt.core.io_struct.to_scheduler import AbortReq, TokenizedGenerateReqInput
from sglang.srt.core.sampling_params import SamplingParams
from sglang.srt.managers.scheduler.scheduler import Scheduler
from sglang.srt.server_args import ServerArgs

CONFIGS = {
    "plain": dict(disable_overlap_schedule=True),
    "overlap": dict(),
    "overlap-page4-chunk16": dict(page_size=4, chunked_prefill_size=16),
    "plain-noradix-chunk16": dict(
        disable_overlap_schedule=True, disable_radix_cache=True, chunked_prefill_size=16
    ),
    "overlap-mixed-chunk8": dict(enable_mixed_chunk=True, chunked_prefill_size=8),
    "overlap-lpm": dict(schedule_policy="lpm", chunked_prefill_size=16),
    # HiCache: the host tier under the tiny pool, each write policy.
    "overlap-hicache": dict(enable_hierarchical_cache=True, hicache_ratio=1.5),
    "plain-hicache-writeback-page4-chunk16": dict(
        disable_overlap_schedule=True,
        enable_hierarchical_cache=True,
        hicache_write_policy="write_back",
        page_size=4,
        chunked_prefill_size=16,
    ),
    # Speculative decoding: verify slots allocated and trimmed every step.
    "spec-ngram-page4-chunk16": dict(
        speculative_algorithm="NGRAM", page_size=4, chunked_prefill_size=16
    ),
    "spec-ngram-hicache": dict(speculative_algorithm="NGRAM", enable_hierarchical_cache=True),
    # Draft trees: tree verify passes, the accepted branch's KV moved into place.
    "spec-ngram-tree-page4-chunk16": dict(
        speculative_algorithm="NGRAM",
        speculative_ngram_max_bfs_breadth=4,
        speculative_num_draft_tokens=6,
        page_size=4,
        chunked_prefill_size=16,
    ),
    # The target drafting for itself ("SELF": the fixture puts in the model path).
    "spec-standalone-chunk16": dict(
        speculative_algorithm="STANDALONE",
        speculative_draft_model_path="SELF",
        chunked_prefill_size=16,
    ),
    # A draft model's tree search (scratch rows and slots) under retraction in the tiny pool.
    "spec-standalone-tree-page4": dict(
        speculative_algorithm="STANDALONE",
        speculative_draft_model_path="SELF",
        speculative_eagle_topk=2,
        speculative_num_steps=3,
        speculative_num_draft_tokens=6,
        page_size=4,
    ),
    "overlap-hicache-selective-mixed-smallhost": dict(
        enable_hierarchical_cache=True,
        hicache_write_policy="write_through_selective",
        enable_mixed_chunk=True,
        chunked_prefill_size=8,
        hicache_ratio=0.5,
    ),
}
POOL = 192
_rid = itertools.count()


def _scheduler(model: str, **cfg) -> Scheduler:
    """The tiny model in the tiny pool, strict checks on; cfg overrides."""
    sa = ServerArgs(
        model_path=model,
        tokenizer_path=model,
        **{
            "max_total_tokens": POOL,
            "max_running_requests": 6,
            "grammar_backend": "none",
            "strict_memory_check": True,
            **cfg,
        },
    )
    return Scheduler(sa, None)


@pytest.fixture(scope="module")
def schedulers(tiny_models):
    cache = {}

    def get(name):
        if name not in cache:
            cfg = dict(CONFIGS[name])
            if cfg.get("speculative_draft_model_path") == "SELF":
                cfg["speculative_draft_model_path"] = tiny_models["llama"]
            cache[name] = _scheduler(tiny_models["llama"], **cfg)
        return cache[name]

    return get


request_st = st.fixed_dictionaries(
    {
        # A small alphabet and a shared stem make prefixes collide in the tree.
        "stem": st.integers(0, 2),
        "stem_len": st.integers(0, 40),
        "tail": st.lists(st.integers(100, 104), min_size=1, max_size=30),
        "max_new": st.integers(0, 24),
        "arrive": st.integers(0, 12),
        "abort_at": st.one_of(st.none(), st.integers(0, 30)),
        "logprob": st.booleans(),
    }
)


def _submit(sched: Scheduler, spec: dict) -> str:
    rid = f"r{next(_rid)}"
    stem = [10 + spec["stem"]] * spec["stem_len"]
    sp = SamplingParams(max_new_tokens=spec["max_new"], temperature=0.0)
    sp.normalize(None)
    sched.intake.handle_generate_request(
        TokenizedGenerateReqInput(
            rid=rid,
            input_ids=stem + spec["tail"],
            sampling_params=sp,
            return_logprob=spec["logprob"],
            logprob_start_len=max(len(stem) - 3, 0) if spec["logprob"] else -1,
        )
    )
    return rid


def _run(sched: Scheduler, specs) -> dict:
    reqs, aborts, step = {}, {}, 0
    while True:
        for spec in specs:
            if spec["arrive"] == step:
                rid = _submit(sched, spec)
                reqs[rid] = sched.state.rid_to_req.get(rid)
                if spec["abort_at"] is not None:
                    aborts[step + spec["abort_at"]] = aborts.get(step + spec["abort_at"], []) + [
                        rid
                    ]
        for rid in aborts.get(step, []):
            sched.intake.abort_request(AbortReq(rid=rid))
        sched.intake.recv_and_process_requests()
        sched.step()
        sched.invariants.check_busy()
        step += 1
        if step > max(s["arrive"] for s in specs) and sched._is_fully_idle():
            break
        assert step < 2000, "scheduler did not drain"
    sched.step()  # an idle pass runs the idle invariant check (strict: raises on a leak)
    return reqs


@pytest.mark.parametrize("config", list(CONFIGS))
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(specs=st.lists(request_st, min_size=1, max_size=10))
def test_random_workload_keeps_kv_accounting_exact(config, specs, schedulers):
    sched = schedulers(config)
    reqs = _run(sched, specs)
    for rid, req in reqs.items():
        if req is None:
            continue  # rejected at intake (finished early)
        assert req.finished(), rid
        fr = req.finished_reason.to_wire()
        if fr["type"] == "length":
            assert len(req.output_ids) == req.sampling_params.max_new_tokens
        assert req.req_pool_idx is None
    assert sched.state.rid_to_req == {}
    assert sched.pools.tree_cache.protected_size() == 0
    total = sched.pools.allocator.available_size() + sched.pools.tree_cache.evictable_size()
    assert total == sched.pools.max_total_num_tokens


def test_tiny_pool_retracts_and_recovers(schedulers):
    """Long outputs from many requests overflow the forecast: retraction must happen and all finish."""
    sched = schedulers("overlap")
    before = sched.stats.num_retracted_total
    specs = [
        dict(
            stem=0,
            stem_len=0,
            tail=[100 + i % 5] * 10,
            max_new=60,
            arrive=0,
            abort_at=None,
            logprob=False,
        )
        for i in range(6)
    ]
    reqs = _run(sched, specs)
    assert sched.stats.num_retracted_total > before
    assert all(r.finished() for r in reqs.values())
    lengths = [
        len(r.output_ids) for r in reqs.values() if isinstance(r.finished_reason, FinishLength)
    ]
    assert all(n == 60 for n in lengths)


def _lag_forward_worker(sched: Scheduler) -> None:
    """Hold each forward pass on the CPU overlap worker until the host has built the next batch, the
    order a slow device gives: the host frees and reuses request rows while a pass that read them
    has not run yet. (A wait times out so a pass the host is waiting on still runs.)"""
    cond, builds, targets = threading.Condition(), [0], {}
    build, launch_forward, forward = (
        sched.get_next_batch_to_run,
        sched.launcher.launch_forward,
        sched.launcher._forward,
    )

    def counted_build():
        batch = build()
        with cond:
            builds[0] += 1
            cond.notify_all()
        return batch

    def noted_launch(fb):
        targets[id(fb)] = builds[0] + 1
        return launch_forward(fb)

    def lagged_forward(fb, rec=None):
        with cond:
            cond.wait_for(lambda: builds[0] >= targets.pop(id(fb), 0), timeout=1.0)
        return forward(fb, rec)

    sched.get_next_batch_to_run = counted_build
    sched.launcher.launch_forward = noted_launch
    sched.launcher._forward = lagged_forward


def test_row_freed_while_its_pass_is_in_flight_keeps_its_next_owner(tiny_models):
    """One request row: the first request is aborted while its decode pass is queued on the lagging
    worker, and the next request takes the row at once. The queued pass must not write its slot into
    the row the next owner now holds: every other request's tokens equal the plain loop's."""

    def make(overlap: bool) -> Scheduler:
        return _scheduler(
            tiny_models["llama"], max_running_requests=1, disable_overlap_schedule=not overlap
        )

    specs = [
        dict(stem=0, stem_len=0, tail=[100, 101, 102, 100, 101], max_new=30, arrive=0, abort_at=2),
        dict(stem=1, stem_len=0, tail=[100 + j % 5 for j in range(40)], max_new=6, arrive=0),
        dict(stem=2, stem_len=12, tail=[103], max_new=4, arrive=0),
    ]
    for s in specs:
        s.setdefault("abort_at", None)
        s["logprob"] = False
    want = [list(r.output_ids) for r in _run(make(False), specs).values()]
    lagged = make(True)
    _lag_forward_worker(lagged)
    got = [list(r.output_ids) for r in _run(lagged, specs).values()]
    assert got[1:] == want[1:]
