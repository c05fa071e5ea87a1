"""Prometheus /metrics: exact counter movements against a live server, plus the two halves in isolation.

The server tests scrape the shared `server_url` server (started with --enable-metrics) before and
after a few requests and compare the deltas with what the responses' meta_info reported.
"""

from __future__ import annotations

import os
import threading
import time
import types
import uuid
from typing import Dict, List

import pytest
import requests
import zmq
from prometheus_client.parser import text_string_to_metric_families
from server_utils import generate, stream_chunks

from sglang.srt.core.io_struct.ipc import make_socket, recv_obj
from sglang.srt.core.io_struct.to_tokenizer import SchedulerMetrics
from sglang.srt.core.req import Req
from sglang.srt.core.sampling_params import SamplingParams
from sglang.srt.managers.scheduler.new_token_ratio import NewTokenRatio
from sglang.srt.managers.scheduler.scheduler_state import KVPools, SchedulerState
from sglang.srt.managers.scheduler.scheduler_stats import SchedulerStats
from sglang.srt.metrics.collector import ServerMetricsCollector
from sglang.srt.metrics.names import SCHEDULER_METRICS
from sglang.srt.metrics.scheduler_reporter import SchedulerMetricsReporter

pytestmark = pytest.mark.timeout(300)

COUNTERS = (
    "sglang:prompt_tokens_total",
    "sglang:generation_tokens_total",
    "sglang:cached_tokens_total",
    "sglang:num_requests_total",
    "sglang:num_aborted_requests_total",
)
HISTOGRAMS = (
    "sglang:time_to_first_token_seconds",
    "sglang:inter_token_latency_seconds",
    "sglang:e2e_request_latency_seconds",
)


def parse(text: str) -> Dict[str, float]:
    """Sample name -> value, buckets keyed as name{le}; the model_name label is dropped."""
    out: Dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            key = s.name + (f"{{{s.labels['le']}}}" if "le" in s.labels else "")
            out[key] = s.value
    return out


def scrape(url: str) -> Dict[str, float]:
    r = requests.get(url + "/metrics", timeout=30)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    return parse(r.text)


def delta(after: Dict[str, float], before: Dict[str, float], key: str) -> float:
    return after[key] - before.get(key, 0.0)


# ---------------------------------------------------------------------------- live server
def test_counters_and_histograms_move_exactly(server_url):
    before = scrape(server_url)
    sp = {"temperature": 0, "ignore_eos": True}
    prompt = "The lighthouse keeper climbed the stairs and wrote the weather in her book."
    metas: List[dict] = []
    for body in (
        dict(text=prompt, sampling_params=dict(sp, max_new_tokens=6)),
        dict(text=prompt, sampling_params=dict(sp, max_new_tokens=6)),  # prefix-cache hit
        dict(input_ids=list(range(100, 140)), sampling_params=dict(sp, max_new_tokens=5)),
    ):
        r = generate(server_url, **body)
        assert r.status_code == 200, r.text
        metas.append(r.json()["meta_info"])
    stream_outs = [
        (
            7,
            stream_chunks(
                server_url, dict(text=prompt + " Then", sampling_params=dict(sp, max_new_tokens=7))
            ),
        ),
        (
            4,
            stream_chunks(
                server_url,
                dict(input_ids=list(range(200, 230)), sampling_params=dict(sp, max_new_tokens=4)),
            ),
        ),
    ]
    for _, chunks in stream_outs:
        metas.append(chunks[-1]["meta_info"])
    after = scrape(server_url)

    assert [m["completion_tokens"] for m in metas] == [6, 6, 5, 7, 4]
    assert metas[1]["cached_tokens"] > 0
    assert delta(after, before, "sglang:num_requests_total") == 5
    assert delta(after, before, "sglang:num_aborted_requests_total") == 0
    assert delta(after, before, "sglang:prompt_tokens_total") == sum(
        m["prompt_tokens"] for m in metas
    )
    assert delta(after, before, "sglang:generation_tokens_total") == sum(
        m["completion_tokens"] for m in metas
    )
    assert delta(after, before, "sglang:cached_tokens_total") == sum(
        m["cached_tokens"] for m in metas
    )
    assert delta(after, before, "sglang:e2e_request_latency_seconds_count") == 5
    assert delta(after, before, "sglang:e2e_request_latency_seconds_sum") == pytest.approx(
        sum(m["e2e_latency"] for m in metas), rel=1e-6, abs=1e-6
    )
    assert delta(after, before, "sglang:time_to_first_token_seconds_count") == 5
    # Non-streamed short answers arrive in one chunk (no ITL samples); a stream with the default
    # stream_interval 1 delivers its first token alone, then one sample per later token.
    assert delta(after, before, "sglang:inter_token_latency_seconds_count") == (7 - 1) + (4 - 1)
    assert delta(after, before, "sglang:e2e_request_latency_seconds_bucket{+Inf}") == 5
    ttft_sum = delta(after, before, "sglang:time_to_first_token_seconds_sum")
    assert 0 < ttft_sum <= sum(m["e2e_latency"] for m in metas) + 1e-6


def test_abort_is_counted_apart(server_url):
    before = scrape(server_url)
    rid = f"metrics-abort-{uuid.uuid4().hex}"
    chunks: List[dict] = []
    got_first = threading.Event()

    def reader():
        with requests.post(
            server_url + "/generate",
            stream=True,
            timeout=120,
            json={
                "rid": rid,
                "text": "Count slowly from one to one thousand:",
                "stream": True,
                "sampling_params": {"max_new_tokens": 400, "ignore_eos": True, "temperature": 0},
            },
        ) as r:
            for line in r.iter_lines():
                if line.startswith(b"data: {"):
                    import json

                    chunks.append(json.loads(line[6:]))
                    got_first.set()

    t = threading.Thread(target=reader)
    t.start()
    assert got_first.wait(60)
    assert (
        requests.post(server_url + "/abort_request", json={"rid": rid}, timeout=30).status_code
        == 200
    )
    t.join(60)
    assert chunks[-1]["meta_info"]["finish_reason"]["type"] == "abort"
    after = scrape(server_url)
    assert delta(after, before, "sglang:num_requests_total") == 1
    assert delta(after, before, "sglang:num_aborted_requests_total") == 1
    assert delta(after, before, "sglang:time_to_first_token_seconds_count") == 1
    # An aborted request's tokens and latency stay out of the served-work numbers.
    for key in (
        "sglang:prompt_tokens_total",
        "sglang:generation_tokens_total",
        "sglang:e2e_request_latency_seconds_count",
    ):
        assert delta(after, before, key) == 0, key


def test_scheduler_gauges_present_and_final_when_idle(server_url, default_server):
    r = generate(
        server_url,
        text="Gauges after this.",
        sampling_params={"max_new_tokens": 3, "temperature": 0},
    )
    assert r.status_code == 200
    info = default_server.wait_idle()
    deadline = time.time() + 10
    while True:
        m = scrape(server_url)
        info = default_server.server_info()
        final = (
            m["sglang:num_running_reqs"] == 0
            and m["sglang:num_queue_reqs"] == 0
            and m["sglang:cache_hit_rate"] == pytest.approx(info["cache_hit_rate"], abs=1e-12)
        )
        if final or time.time() > deadline:
            break
        time.sleep(0.2)
    for spec in SCHEDULER_METRICS.values():
        assert spec.name in m, spec.name
    for name in COUNTERS:
        assert name in m, name
    for name in HISTOGRAMS:
        assert name + "_count" in m and name + "_sum" in m, name
    assert final, (m, info)
    assert m["sglang:max_total_num_tokens"] == info["max_total_num_tokens"]
    assert m["sglang:token_usage"] == pytest.approx(info["token_usage"], abs=1e-12)
    assert m["sglang:new_token_ratio"] == pytest.approx(info["new_token_ratio"], abs=1e-12)
    assert m["sglang:num_retracted_requests_total"] == info["num_retractions_total"]
    assert m["sglang:num_retracted_reqs"] == 0


# ---------------------------------------------------------------------------- collector alone
def _state(created: float, **kw):
    base = dict(
        req=types.SimpleNamespace(rid="r", log_metrics=True),
        created_time=created,
        first_token_time=None,
        last_chunk_time=None,
    )
    base.update(kw)
    return types.SimpleNamespace(**base)


def _feed_chunk(c: ServerMetricsCollector, st, n: int, now: float) -> None:
    """What ReqState.apply does around the hook."""
    if n and st.first_token_time is None:
        st.first_token_time = now
    c.on_chunk(st, n, now)
    st.last_chunk_time = now


def test_collector_itl_and_ttft_semantics():
    c = ServerMetricsCollector("m")
    st = _state(0.0)  # binary-exact times, so bucket edges compare exactly
    _feed_chunk(c, st, 1, 0.5)  # first token: TTFT 0.5
    _feed_chunk(c, st, 1, 0.75)  # ITL 0.25
    _feed_chunk(c, st, 4, 1.75)  # 4 tokens after 1.0 s: 4 samples of 0.25
    _feed_chunk(c, st, 0, 2.0)  # a bookkeeping chunk adds nothing
    c.on_finish(
        st,
        {
            "meta_info": {
                "finish_reason": {"type": "length"},
                "prompt_tokens": 9,
                "completion_tokens": 6,
                "cached_tokens": 3,
                "e2e_latency": 1.1,
            }
        },
    )
    m = parse(c.render().decode())
    assert m["sglang:time_to_first_token_seconds_count"] == 1
    assert m["sglang:time_to_first_token_seconds_sum"] == pytest.approx(0.5)
    assert m["sglang:inter_token_latency_seconds_count"] == 5
    assert m["sglang:inter_token_latency_seconds_sum"] == pytest.approx(1.25)
    assert m["sglang:inter_token_latency_seconds_bucket{0.2}"] == 0
    assert m["sglang:inter_token_latency_seconds_bucket{0.3}"] == 5
    assert m["sglang:prompt_tokens_total"] == 9 and m["sglang:cached_tokens_total"] == 3
    assert m["sglang:generation_tokens_total"] == 6 and m["sglang:num_requests_total"] == 1
    assert m["sglang:e2e_request_latency_seconds_sum"] == pytest.approx(1.1)


def test_collector_skips_log_metrics_false_and_isolates_registries():
    a, b = ServerMetricsCollector("m"), ServerMetricsCollector("m")
    st = _state(0.0, req=types.SimpleNamespace(rid="x", log_metrics=False))
    _feed_chunk(a, st, 1, 0.2)
    a.on_finish(
        st,
        {
            "meta_info": {
                "finish_reason": {"type": "stop"},
                "prompt_tokens": 5,
                "completion_tokens": 1,
                "cached_tokens": 0,
                "e2e_latency": 0.2,
            }
        },
    )
    a.on_scheduler_metrics({"num_running_reqs": 3.0, "num_retracted_requests_total": 2.0})
    ma, mb = parse(a.render().decode()), parse(b.render().decode())
    assert (
        ma["sglang:num_requests_total"] == 0 and ma["sglang:time_to_first_token_seconds_count"] == 0
    )
    assert ma["sglang:num_running_reqs"] == 3 and ma["sglang:num_retracted_requests_total"] == 2
    assert mb["sglang:num_running_reqs"] == 0


# ---------------------------------------------------------------------------- reporter alone
def _stats() -> SchedulerStats:
    """SchedulerStats over stand-in pools and queues with known numbers."""
    retracted, waiting = Req("a", [1], SamplingParams()), Req("b", [1], SamplingParams())
    retracted.reset_for_retract()
    state = SchedulerState(
        running_batch=types.SimpleNamespace(batch_size=lambda: 2),
        waiting_queue=[retracted, waiting],
    )
    pools = KVPools(
        req_to_token_pool=None,
        allocator=types.SimpleNamespace(available_size=lambda: 700),
        tree_cache=types.SimpleNamespace(evictable_size=lambda: 100, tier_stats=dict),
        max_total_num_tokens=1000,
        page_size=1,
        device="cpu",
    )
    ratio = NewTokenRatio(1.0)
    ratio.raise_to(0.4)
    stats = SchedulerStats(state, pools, ratio, numbers=None, decode_log_interval=40, tp_rank=0)
    stats.last_gen_throughput = 12.5
    stats.num_retracted_total = 3
    stats.total_prefill_input_tokens, stats.total_prefill_cached_tokens = 30, 10
    return stats


@pytest.fixture
def reporter_pair(tmp_path):
    ctx = zmq.Context()
    endpoint = f"ipc://{tmp_path}/metrics-{os.getpid()}"
    pull = make_socket(ctx, zmq.PULL, endpoint, True)
    push = make_socket(ctx, zmq.PUSH, endpoint, False)
    stats = _stats()
    yield stats, SchedulerMetricsReporter(stats.snapshot, push, "pickle", min_interval=60.0), pull
    push.close()
    pull.close()
    ctx.term()


def _drain(pull) -> List[SchedulerMetrics]:
    out = []
    while pull.poll(200):
        out.append(recv_obj(pull, "pickle"))
    return out


def test_reporter_snapshot_and_rate_limit(reporter_pair):
    stats, rep, pull = reporter_pair
    for _ in range(3):
        rep.maybe_push()  # all within min_interval: one push
    msgs = _drain(pull)
    assert len(msgs) == 1 and isinstance(msgs[0], SchedulerMetrics)
    v = msgs[0].values
    assert set(v) == set(SCHEDULER_METRICS)
    assert v["num_running_reqs"] == 2 and v["num_queue_reqs"] == 2 and v["num_retracted_reqs"] == 1
    assert v["num_used_tokens"] == 200 and v["token_usage"] == pytest.approx(0.2)
    assert (
        v["cache_hit_rate"] == 0.25 and v["gen_throughput"] == 12.5 and v["new_token_ratio"] == 0.4
    )
    assert v["num_retracted_requests_total"] == 3 and v["max_total_num_tokens"] == 1000


def test_reporter_idle_and_retract_push_despite_rate_limit(reporter_pair):
    stats, rep, pull = reporter_pair
    rep.maybe_push()
    rep.push_if_changed()  # unchanged since the last push: nothing
    assert len(_drain(pull)) == 1
    stats.state.running_batch = types.SimpleNamespace(batch_size=lambda: 0)
    stats.state.waiting_queue = []
    rep.push_if_changed()  # changed: pushed although within min_interval
    rep.push_if_changed()  # idle polls repeat: no spam
    msgs = _drain(pull)
    assert len(msgs) == 1 and msgs[0].values["num_running_reqs"] == 0
    stats.num_retracted_total = 4
    rep.push_now()
    msgs = _drain(pull)
    assert len(msgs) == 1 and msgs[0].values["num_retracted_requests_total"] == 4
