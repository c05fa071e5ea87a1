"""Tensor parallelism on the CPU (gloo): TP=2 against TP=1, at the model and at the server level."""

from __future__ import annotations

import concurrent.futures
import multiprocessing as mp
import os
import signal
import time

import psutil
import pytest
import requests
import torch
from server_utils import ServerProcess, free_port, generate, stream_chunks

TEXT = "The quick brown fox jumps over the lazy dog. In the beginning"
STEPS = 12


def _greedy_logits(path: str, tp_size: int):
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.model_executor.static_batch import StaticBatch
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.utils.hf_tokenizer import get_tokenizer

    sa = ServerArgs(model_path=path, tp_size=tp_size, max_total_tokens=1024, max_running_requests=4)
    runner = ModelRunner.from_server_args(
        ModelConfig.from_path(path), sa, "cpu", show_progress=False
    )
    sb = StaticBatch(runner)
    out = sb.prefill([get_tokenizer(path).encode(TEXT)])
    logits, toks = [], []
    for _ in range(STEPS):
        logits.append(out.next_token_logits[0].clone())
        toks.append(int(out.next_token_logits[0].argmax()))
        out = sb.decode([toks[-1]])
    return torch.stack(logits), toks


def _tp_worker(rank: int, path: str, port: int, q) -> None:
    import torch.distributed as dist

    from sglang.srt.distributed.parallel_state import init_tensor_parallel

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", world_size=2, rank=rank)
    init_tensor_parallel(rank, 2, dist.group.WORLD, dist.new_group(backend="gloo"))
    logits, toks = _greedy_logits(path, 2)
    if rank == 0:
        q.put((logits.numpy(), toks))
    dist.barrier()


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_tp2_logits_match_tp1(arch, tiny_models):
    path = tiny_models[arch]
    ref_logits, ref_toks = _greedy_logits(path, 1)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_tp_worker, args=(r, path, port, q)) for r in range(2)]
    for p in procs:
        p.start()
    logits, toks = q.get(timeout=180)
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert toks == ref_toks
    assert torch.allclose(torch.from_numpy(logits), ref_logits, atol=1e-4, rtol=1e-4)


@pytest.fixture(scope="module")
def tp_servers(tiny_models):
    path = tiny_models["llama"]
    one = ServerProcess(["--model-path", path, "--max-total-tokens", "4096"])
    two = ServerProcess(["--model-path", path, "--max-total-tokens", "4096", "--tp-size", "2"])
    yield one, two
    one.stop()
    two.stop()


def test_tp2_server_matches_tp1(tp_servers):
    one, two = tp_servers
    prompts = [f"Request {i}: {TEXT}" for i in range(6)]
    kw = dict(
        text=prompts,
        sampling_params={"max_new_tokens": 16, "temperature": 0},
        return_logprob=True,
        logprob_start_len=2,
        top_logprobs_num=2,
    )
    a, b = generate(one.url, **kw).json(), generate(two.url, **kw).json()
    assert [x["output_ids"] for x in a] == [y["output_ids"] for y in b]
    for x, y in zip(a, b):
        for key in ("input_token_logprobs", "output_token_logprobs"):
            for ex, ey in zip(x["meta_info"][key], y["meta_info"][key]):
                assert ex[1] == ey[1] and (ex[0] is None or abs(ex[0] - ey[0]) < 1e-3)
    body = {"text": prompts[0], "sampling_params": {"max_new_tokens": 16, "temperature": 0}}
    assert stream_chunks(two.url, body)[-1]["output_ids"] == a[0]["output_ids"]
    # seeded sampling is identical across ranks and equal to TP=1
    sp = {"max_new_tokens": 16, "temperature": 1.0, "sampling_seed": 7}
    assert (
        generate(one.url, text=TEXT, sampling_params=sp).json()["output_ids"]
        == generate(two.url, text=TEXT, sampling_params=sp).json()["output_ids"]
    )
    one.check_idle_invariant()
    two.check_idle_invariant()


@pytest.mark.slow  # the distributed path of a world of one; test_tp2_server_matches_tp1 covers more
def test_tp2_weight_update_matches_tp1(tp_servers, tmp_path):
    """Both ranks load their shards of the new checkpoint; then back to the old one."""
    from model_fixtures import write_tiny_model

    one, two = tp_servers
    other = write_tiny_model("llama", str(tmp_path / "llama-b"), seed=3)
    kw = dict(text=f"Update: {TEXT}", sampling_params={"max_new_tokens": 12, "temperature": 0})
    before = generate(two.url, **kw).json()["output_ids"]
    original = one.server_info()["model_path"]
    try:
        for srv in (one, two):
            r = requests.post(srv.url + "/update_weights_from_disk", json={"model_path": other})
            assert r.status_code == 200 and r.json()["success"], r.text
        after = [generate(s.url, **kw).json()["output_ids"] for s in (one, two)]
        assert after[0] == after[1] != before
    finally:
        for srv in (one, two):
            r = requests.post(srv.url + "/update_weights_from_disk", json={"model_path": original})
            assert r.json()["success"], r.text
    assert generate(two.url, **kw).json()["output_ids"] == before
    two.check_idle_invariant()


def test_tp2_weights_read_back_whole_and_tensor_updates_match_tp1(tp_servers, tiny_models):
    """get_weights_by_name gathers both ranks' shards (column, row, merged, vocabulary-parallel);
    a tensor update reaches both ranks' shards."""
    import base64
    import pickle

    from safetensors.torch import load_file

    one, two = tp_servers
    ckpt = load_file(os.path.join(tiny_models["llama"], "model.safetensors"))
    names = [
        "model.embed_tokens.weight",
        "lm_head.weight",
        "model.layers.0.self_attn.q_proj.weight",
        "model.layers.0.self_attn.k_proj.weight",
        "model.layers.0.self_attn.v_proj.weight",
        "model.layers.0.self_attn.o_proj.weight",
        "model.layers.1.mlp.up_proj.weight",
        "model.layers.1.mlp.down_proj.weight",
        "model.norm.weight",
    ]
    for name in names:
        r = requests.post(two.url + "/get_weights_by_name", json={"name": name, "truncate_size": 7})
        assert torch.equal(torch.tensor(r.json()), ckpt[name][:7]), name
    kw = dict(text=f"Sync: {TEXT}", sampling_params={"max_new_tokens": 12, "temperature": 0})
    before = generate(two.url, **kw).json()["output_ids"]
    # Swap two layers' attention projections: both ranks must take their shard of each.
    swap = [(n, ckpt[n.replace("layers.0", "layers.1")]) for n in names[2:6]]
    undo = [(n, ckpt[n]) for n in names[2:6]]
    for named in (swap, undo):
        body = {"serialized_named_tensors": [base64.b64encode(pickle.dumps(named)).decode()]}
        for srv in (one, two):
            r = requests.post(srv.url + "/update_weights_from_tensor", json=body, timeout=120)
            assert r.status_code == 200 and r.json()["success"], r.text
        if named is swap:
            after = [generate(s.url, **kw).json()["output_ids"] for s in (one, two)]
            assert after[0] == after[1] != before
    assert generate(two.url, **kw).json()["output_ids"] == before
    two.check_idle_invariant()


def test_forced_world_of_one_matches_plain_tp1(tp_servers, tiny_models):
    """--force-distributed runs every collective of the TP path (all-reduce, vocab gather, object
    broadcasts) through torch.distributed with one rank: on the GPU machine this is NCCL on one GPU."""
    one, _ = tp_servers
    forced = ServerProcess(
        ["--model-path", tiny_models["llama"], "--max-total-tokens", "4096", "--force-distributed"]
    )
    try:
        kw = dict(
            text=[f"Request {i}: {TEXT}" for i in range(3)],
            sampling_params={"max_new_tokens": 12, "temperature": 0},
        )
        assert [x["output_ids"] for x in generate(forced.url, **kw).json()] == [
            y["output_ids"] for y in generate(one.url, **kw).json()
        ]
        assert "tensor parallel rank 0/1 ready (gloo)" in forced.log_text()
        forced.check_idle_invariant()
    finally:
        forced.stop()


@pytest.mark.slow  # the default suite keeps under its time budget; TP=2 tokens stay checked there
def test_tp2_abort_and_retraction(tiny_models, tp_servers):
    one, _ = tp_servers
    path = tiny_models["llama"]
    tiny = ServerProcess(
        [
            "--model-path",
            path,
            "--max-total-tokens",
            "300",
            "--tp-size",
            "2",
            "--schedule-conservativeness",
            "0.05",
        ]
    )
    try:
        prompts = [f"Story number {i}: once upon a time" for i in range(12)]
        sp = {"max_new_tokens": 40, "temperature": 0}
        with concurrent.futures.ThreadPoolExecutor(13) as ex:
            ref = list(
                ex.map(lambda p: generate(one.url, text=p, sampling_params=sp).json(), prompts)
            )
            futs = [ex.submit(generate, tiny.url, text=p, sampling_params=sp) for p in prompts]
            victim = ex.submit(
                generate,
                tiny.url,
                text="endless",
                rid="tp-abort",
                sampling_params={"max_new_tokens": 200, "ignore_eos": True},
            )
            time.sleep(1.0)
            requests.post(tiny.url + "/abort_request", json={"rid": "tp-abort"})
            outs = [f.result().json() for f in futs]
            assert victim.result().json()["meta_info"]["finish_reason"]["type"] == "abort"
        assert [o["output_ids"] for o in outs] == [r["output_ids"] for r in ref]
        assert sum(o["meta_info"]["num_retractions"] for o in outs) > 0
        tiny.check_idle_invariant()
    finally:
        tiny.stop()


# Process teardown is covered by the lifecycle tests; this adds only the tp=2 rank case.
@pytest.mark.slow
def test_a_dying_rank_takes_the_server_down(tiny_models):
    srv = ServerProcess(
        ["--model-path", tiny_models["llama"], "--max-total-tokens", "1024", "--tp-size", "2"]
    )
    try:
        pids = srv.server_info()["process_pids"]
        os.kill(pids["scheduler-tp1"], signal.SIGKILL)
        r = requests.post(
            srv.url + "/generate",
            json={"text": "hi", "sampling_params": {"max_new_tokens": 4}},
            timeout=60,
        )
        assert r.status_code >= 500
        deadline = time.time() + 30
        while srv.proc.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        assert srv.proc.poll() is not None
        time.sleep(1)
        for pid in pids.values():
            assert (
                not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
            )
    finally:
        srv.stop()


# total_tokens differs from round_robin only in the replica it picks; the plumbing is the same.
@pytest.mark.parametrize(
    "method", ["round_robin", pytest.param("total_tokens", marks=pytest.mark.slow)]
)
def test_data_parallel_replicas(method, tiny_models, tp_servers):
    one, _ = tp_servers
    srv = ServerProcess(
        [
            "--model-path",
            tiny_models["llama"],
            "--max-total-tokens",
            "2048",
            "--dp-size",
            "2",
            "--load-balance-method",
            method,
        ]
    )
    try:
        prompts = [f"Question {i}: {TEXT}" for i in range(8)]
        sp = {"max_new_tokens": 8, "temperature": 0}
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            outs = list(
                ex.map(lambda p: generate(srv.url, text=p, sampling_params=sp).json(), prompts)
            )
        ref = generate(one.url, text=prompts, sampling_params=sp).json()
        assert [o["output_ids"] for o in outs] == [r["output_ids"] for r in ref]
        info = srv.server_info()
        per_replica = [st["prefill_input_tokens_total"] for st in info["dp_states"]]
        assert len(per_replica) == 2 and all(n > 0 for n in per_replica), per_replica
        assert info["max_total_num_tokens"] == 2 * 2048
        _paused_requests_wait_on_every_replica(srv.url, method)
        assert requests.post(srv.url + "/flush_cache").status_code == 200
        srv.check_idle_invariant()
    finally:
        srv.stop()


@pytest.mark.slow  # the multi-node address plumbing; tp2 on one node runs by default
def test_two_nodes_on_one_machine(tiny_models, tp_servers):
    """--nnodes 2: node 1 runs scheduler rank 1 only; node 0 serves HTTP and rank 0 broadcasts."""
    import subprocess
    import sys

    one, _ = tp_servers
    path = tiny_models["llama"]
    addr = f"127.0.0.1:{free_port()}"
    common = [
        "--model-path",
        path,
        "--max-total-tokens",
        "1024",
        "--tp-size",
        "2",
        "--nnodes",
        "2",
        "--dist-init-addr",
        addr,
    ]
    node1 = subprocess.Popen(
        [sys.executable, "-m", "sglang.srt.entrypoints.cli", "serve", *common, "--node-rank", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        node0 = ServerProcess(common + ["--node-rank", "0"])
        try:
            kw = dict(
                text=[f"Node test {i}: {TEXT}" for i in range(3)],
                sampling_params={"max_new_tokens": 8, "temperature": 0},
            )
            a, b = generate(one.url, **kw).json(), generate(node0.url, **kw).json()
            assert [x["output_ids"] for x in a] == [y["output_ids"] for y in b]
            node0.check_idle_invariant()
        finally:
            node0.stop()
        node1.wait(30)  # rank 1 exits once its peer is gone
    finally:
        if node1.poll() is None:
            os.killpg(node1.pid, signal.SIGKILL)


def _spec_args(kind: str, path: str, tmp_path) -> list:
    if kind == "ngram":
        return ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "5"]
    if kind == "standalone-tree":  # the target drafting for itself, sharded like it
        return [
            "--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", path,
            "--speculative-eagle-topk", "2", "--speculative-num-steps", "3",
            "--speculative-num-draft-tokens", "6",
        ]  # fmt: skip
    import json

    from model_fixtures import write_eagle_head

    cfg = json.load(open(f"{path}/config.json"))
    n = cfg["num_hidden_layers"]
    head = str(tmp_path / "eagle3")
    g = torch.Generator().manual_seed(7)
    write_eagle_head(head, cfg, "EAGLE3", g, cfg["vocab_size"] // 2, [0, n // 2, n - 1])
    return ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", head]


@pytest.mark.parametrize(
    "kind",
    [
        "standalone-tree",
        # The gathered vocabulary shards of the head; the same verify path as the tree.
        pytest.param("eagle3", marks=pytest.mark.slow),
        pytest.param("ngram", marks=pytest.mark.slow),
    ],
)
def test_tp2_speculative_matches_plain_tp1(kind, tiny_models, tp_servers, tmp_path):
    """Speculation under TP=2: every rank drafts (the draft model sharded, the EAGLE head whole
    on each rank from the gathered vocabulary shards) and verifies the same way; the greedy tokens
    equal plain TP=1 decoding, with verify passes counted."""
    one, _ = tp_servers
    path = tiny_models["llama"]
    spec = ServerProcess(
        ["--model-path", path, "--max-total-tokens", "4096", "--tp-size", "2"]
        + _spec_args(kind, path, tmp_path)
    )
    try:
        kw = dict(
            text=[f"Request {i}: {TEXT} {TEXT}" for i in range(4)],
            sampling_params={"max_new_tokens": 24, "temperature": 0},
        )
        got = generate(spec.url, **kw).json()
        ref = generate(one.url, **kw).json()
        assert [x["output_ids"] for x in got] == [y["output_ids"] for y in ref]
        assert all(x["meta_info"]["spec_verify_ct"] > 0 for x in got)
        spec.check_idle_invariant()
    finally:
        spec.stop()


def _paused_requests_wait_on_every_replica(url: str, method: str) -> None:
    """A pause reaches every replica; /get_load reports each one's queue."""
    assert requests.post(url + "/pause_generation", json={"mode": "in_place"}).status_code == 200
    sp = {"max_new_tokens": 4, "temperature": 0}
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        futs = [ex.submit(generate, url, text=f"Paused {i}", sampling_params=sp) for i in range(2)]
        deadline = time.time() + 120
        while sum(x["num_waiting_reqs"] for x in requests.get(url + "/get_load").json()) < 2:
            assert time.time() < deadline, "the requests never queued"
            time.sleep(0.05)
        loads = requests.get(url + "/get_load").json()
        assert [x["dp_rank"] for x in loads] == [0, 1]
        if method == "round_robin":
            assert [x["num_waiting_reqs"] for x in loads] == [1, 1], loads
        assert not any(f.done() for f in futs)
        assert requests.post(url + "/continue_generation").status_code == 200
        assert all(f.result(120).status_code == 200 for f in futs)
