"""Weights from a trainer, on the real server: /update_weights_from_tensor (shared-memory handles and
plain payloads), /init_weights_update_group + /update_weights_from_distributed (this test process is
the trainer, rank 0 of a gloo group, broadcasting a second checkpoint), /get_weights_by_name, and
the weight version routes. The served tokens are checked against HF logits of the checkpoint the
weights should now be; refused updates leave the weights as they were."""

from __future__ import annotations

import base64
import concurrent.futures
import os
import pickle
import re
import shutil
import socket
import time
from datetime import timedelta

import pytest
import requests
import torch
import torch.distributed as dist
import torch.multiprocessing
from model_fixtures import write_tiny_model
from safetensors.torch import load_file, save_file
from server_utils import ServerProcess, generate
from torch.distributed import distributed_c10d as c10d

from sglang.srt.utils import MultiprocessingSerializer

PROMPT = [5, 17, 42, 99, 7, 3]
SP = {"max_new_tokens": 8, "temperature": 0}
# One tensor of a merged parameter (q of qkv_proj), one whole one, the LM head.
PARTIAL = ("model.layers.0.self_attn.q_proj.weight", "model.norm.weight", "lm_head.weight")


def _tensors(path: str) -> dict:
    return load_file(os.path.join(path, "model.safetensors"))


@pytest.fixture(scope="module")
def ckpts(tiny_models, tmp_path_factory):
    root = tmp_path_factory.mktemp("weight-sync")
    a = tiny_models["llama"]
    b = write_tiny_model("llama", str(root / "b"), seed=1)
    mixed = str(root / "mixed")  # A with B's PARTIAL tensors: what a partial update must serve
    shutil.copytree(a, mixed)
    t, tb = _tensors(a), _tensors(b)
    t.update({n: tb[n] for n in PARTIAL})
    save_file(t, os.path.join(mixed, "model.safetensors"), metadata={"format": "pt"})
    return {"a": a, "b": b, "mixed": mixed}


@pytest.fixture(scope="module")
def server(ckpts):
    srv = ServerProcess(["--model-path", ckpts["a"], "--max-total-tokens", "2048"])
    yield srv
    srv.stop()


def _ids(url: str) -> list:
    r = generate(url, input_ids=PROMPT, sampling_params=SP)
    assert r.status_code == 200, r.text
    return r.json()["output_ids"]


def _greedy_under(path: str, hf_models, out: list) -> bool:
    with torch.no_grad():
        logits = hf_models(path)(torch.tensor([PROMPT + out])).logits[0]
    return logits[len(PROMPT) - 1 : -1].argmax(-1).tolist() == out


def _post(url: str, route: str, **body) -> requests.Response:
    return requests.post(url + route, json=body, timeout=300)


def _shm_payload(named: list) -> str:
    """As a trainer on the same host sends CPU tensors: shared-memory names, not the data."""
    old = torch.multiprocessing.get_sharing_strategy()
    torch.multiprocessing.set_sharing_strategy("file_system")
    try:
        return MultiprocessingSerializer.serialize(named, output_str=True)
    finally:
        torch.multiprocessing.set_sharing_strategy(old)


def _plain_payload(named: list) -> str:
    return base64.b64encode(pickle.dumps(named)).decode()


def _restore_a(url: str, ckpts) -> None:
    r = _post(url, "/update_weights_from_disk", model_path=ckpts["a"])
    assert r.json()["success"], r.text


def test_tensor_update_of_all_weights_by_shared_memory(server, ckpts, hf_models):
    url = server.url
    assert _greedy_under(ckpts["a"], hf_models, _ids(url))
    named = list(_tensors(ckpts["b"]).items())
    r = _post(
        url,
        "/update_weights_from_tensor",
        serialized_named_tensors=[_shm_payload(named)],
        weight_version="step-1",
    )
    assert r.status_code == 200 and r.json()["success"], r.text
    res = generate(url, input_ids=PROMPT, sampling_params=SP).json()
    assert res["meta_info"]["weight_version"] == "step-1"
    assert res["meta_info"]["cached_tokens"] == 0  # flushed
    assert _greedy_under(ckpts["b"], hf_models, res["output_ids"])
    assert requests.get(url + "/get_weight_version").json() == {"weight_version": "step-1"}
    _restore_a(url, ckpts)
    server.check_idle_invariant()


def test_partial_tensor_update_serves_the_mixed_model(server, ckpts, hf_models):
    url = server.url
    tb = _tensors(ckpts["b"])
    named = [(n, tb[n]) for n in PARTIAL]
    r = _post(url, "/update_weights_from_tensor", serialized_named_tensors=[_plain_payload(named)])
    assert r.status_code == 200 and r.json()["success"], r.text
    assert _greedy_under(ckpts["mixed"], hf_models, _ids(url))
    # Read back: the updated q rows are B's, a tensor not sent is still A's.
    q = _post(url, "/get_weights_by_name", name=PARTIAL[0], truncate_size=3).json()
    assert torch.equal(torch.tensor(q), tb[PARTIAL[0]][:3])
    k = _post(url, "/get_weights_by_name", name="model.layers.0.self_attn.k_proj.weight").json()
    assert torch.equal(
        torch.tensor(k), _tensors(ckpts["a"])["model.layers.0.self_attn.k_proj.weight"][:100]
    )
    _restore_a(url, ckpts)
    server.check_idle_invariant()


def test_flush_cache_false_keeps_the_prefix_cache(server, ckpts):
    url = server.url
    _ids(url)
    norm = _tensors(ckpts["a"])["model.norm.weight"]
    r = _post(
        url,
        "/update_weights_from_tensor",
        serialized_named_tensors=[_plain_payload([("model.norm.weight", norm)])],
        flush_cache=False,
    )
    assert r.json()["success"], r.text
    res = generate(url, input_ids=PROMPT, sampling_params=SP).json()
    assert res["meta_info"]["cached_tokens"] > 0
    server.check_idle_invariant()


def _evil() -> str:
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    return _plain_payload([("model.norm.weight", Evil())])


@pytest.mark.parametrize(
    "payload,match",
    [
        (lambda tb: _plain_payload([("model.no_such.weight", tb["model.norm.weight"])]), "no_such"),
        # Right name, wrong shape, after a good tensor: the good one must not be written either.
        (
            lambda tb: _plain_payload(
                [
                    ("model.norm.weight", tb["model.norm.weight"]),
                    ("model.layers.0.self_attn.k_proj.weight", tb["model.norm.weight"]),
                ]
            ),
            "k_proj|fit|shape",
        ),
        (lambda tb: _evil(), "may not refer to"),
        (lambda tb: "@@not base64@@", "base64"),
        (lambda tb: _plain_payload({"a": 1}), "pairs"),
    ],
)
def test_refused_tensor_updates_leave_the_weights(server, ckpts, payload, match):
    url = server.url
    before = _ids(url)
    r = _post(
        url, "/update_weights_from_tensor", serialized_named_tensors=[payload(_tensors(ckpts["b"]))]
    )
    assert r.status_code == 400 and r.json()["success"] is False
    assert re.search(match, r.json()["message"]), r.text
    assert _ids(url) == before
    server.check_idle_invariant()


@pytest.mark.parametrize(
    "route,body,field",
    [
        ("/update_weights_from_tensor", {}, "serialized_named_tensors"),
        (
            "/update_weights_from_tensor",
            {"serialized_named_tensors": []},
            "serialized_named_tensors",
        ),
        (
            "/update_weights_from_tensor",
            {"serialized_named_tensors": ["x"], "load_format": "bucket"},
            "load_format",
        ),
        (
            "/update_weights_from_distributed",
            {"names": ["a"], "dtypes": ["float32"], "shapes": [[1], [2]]},
            "same length",
        ),
        (
            "/update_weights_from_distributed",
            {"names": ["a"], "dtypes": ["notatype"], "shapes": [[1]]},
            "dtype",
        ),
        (
            "/init_weights_update_group",
            {"master_address": "127.0.0.1", "master_port": 1, "rank_offset": 0, "world_size": 2},
            "rank_offset",
        ),
        (
            "/init_weights_update_group",
            {
                "master_address": "127.0.0.1",
                "master_port": 1,
                "rank_offset": 1,
                "world_size": 2,
                "backend": "mpi",
            },
            "backend",
        ),
        (
            "/get_weights_by_name",
            {"name": "model.norm.weight", "truncate_size": 0},
            "truncate_size",
        ),
        ("/update_weight_version", {}, "new_version"),
    ],
)
def test_bad_weight_bodies_are_400s_naming_the_field(server, route, body, field):
    r = _post(server.url, route, **body)
    assert r.status_code == 400, r.text
    assert field in r.json()["message"]


def test_get_weights_by_name(server, ckpts):
    ta = _tensors(ckpts["a"])
    for name in (
        "model.embed_tokens.weight",
        "model.layers.1.mlp.up_proj.weight",
        "model.norm.weight",
    ):
        got = _post(server.url, "/get_weights_by_name", name=name, truncate_size=5).json()
        assert torch.equal(torch.tensor(got), ta[name][:5]), name
    r = _post(server.url, "/get_weights_by_name", name="model.nothing")
    assert r.status_code == 400 and "model.nothing" in r.json()["message"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _trainer_group(port: int, name: str) -> dist.ProcessGroup:
    """The trainer's side, built as RL trainers build it: rank 0 of a 2-rank gloo group."""
    store, rank, size = next(
        c10d.rendezvous(f"tcp://127.0.0.1:{port}", 0, 2, timeout=timedelta(seconds=120))
    )
    group, _ = c10d._new_process_group_helper(
        size,
        rank,
        [],
        c10d.Backend("gloo"),
        c10d.PrefixStore(name, store),
        group_name=name,
        timeout=timedelta(seconds=120),
    )
    c10d._world.pg_group_ranks[group] = {0: 0, 1: 1}
    return group


def test_weights_broadcast_by_a_trainer_group(server, ckpts, hf_models):
    url, name, port = server.url, "rl-sync", _free_port()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        joined = pool.submit(
            _post,
            url,
            "/init_weights_update_group",
            master_address="127.0.0.1",
            master_port=port,
            rank_offset=1,
            world_size=2,
            group_name=name,
            backend="gloo",
        )
        group = _trainer_group(port, name)
        r = joined.result(120)
        assert r.status_code == 200 and r.json()["success"], r.text
        try:
            tb = _tensors(ckpts["b"])
            names = list(tb)
            updated = pool.submit(
                _post,
                url,
                "/update_weights_from_distributed",
                names=names,
                dtypes=[str(tb[n].dtype).removeprefix("torch.") for n in names],
                shapes=[list(tb[n].shape) for n in names],
                group_name=name,
                weight_version="rl-1",
            )
            for n in names:
                dist.broadcast(tb[n].contiguous(), src=0, group=group)
            r = updated.result(120)
            assert r.status_code == 200 and r.json()["success"], r.text
            res = generate(url, input_ids=PROMPT, sampling_params=SP).json()
            assert res["meta_info"]["weight_version"] == "rl-1"
            assert _greedy_under(ckpts["b"], hf_models, res["output_ids"])
        finally:
            r = _post(url, "/destroy_weights_update_group", group_name=name)
            dist.destroy_process_group(group)
    assert r.status_code == 200 and r.json()["success"], r.text
    r = _post(url, "/destroy_weights_update_group", group_name=name)
    assert r.status_code == 400 and name in r.json()["message"]
    r = _post(
        url,
        "/update_weights_from_distributed",
        names=["model.norm.weight"],
        dtypes=["float32"],
        shapes=[[64]],
        group_name=name,
    )
    assert r.status_code == 400 and "init_weights_update_group" in r.json()["message"]
    _restore_a(url, ckpts)
    server.check_idle_invariant()


def test_update_weight_version(server):
    r = _post(server.url, "/update_weight_version", new_version="v7")
    assert r.status_code == 200 and r.json()["success"]
    assert (
        generate(server.url, input_ids=PROMPT, sampling_params=SP).json()["meta_info"][
            "weight_version"
        ]
        == "v7"
    )
    assert requests.get(server.url + "/weight_version").json()["weight_version"] == "v7"
    _post(server.url, "/update_weight_version", new_version="default")


LONG = {"max_new_tokens": 400, "temperature": 0, "ignore_eos": True}


def _when(check, what: str) -> None:
    deadline = time.time() + 60
    while not check():
        assert time.time() < deadline, what
        time.sleep(0.02)


def test_memory_lent_to_a_trainer_and_taken_back(server, ckpts, hf_models):
    """verl's order: release everything, train, resume the weights, send them, resume the KV."""
    url = server.url
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        running = pool.submit(generate, url, input_ids=PROMPT, sampling_params=LONG)
        _when(lambda: server.server_info()["num_running_reqs"] == 1, "the request never ran")
        # Paused in place, it keeps its KV however slow the machine: the release must refuse.
        assert _post(url, "/pause_generation", mode="in_place").status_code == 200
        r = _post(url, "/release_memory_occupation")
        assert r.status_code == 400 and "pause generation" in r.json()["message"], r.text
        assert _post(url, "/continue_generation").status_code == 200
        assert running.result(60).status_code == 200

        r = _post(url, "/release_memory_occupation")
        assert r.status_code == 200 and r.json()["success"], r.text
        info = server.server_info()
        assert info["memory_released"] == ["cuda_graph", "kv_cache", "weights"]
        steps = info["num_decode_steps"]
        waiting = pool.submit(generate, url, input_ids=PROMPT, sampling_params=SP)
        _when(lambda: server.server_info()["num_waiting_reqs"] == 1, "the request never queued")
        r = _post(url, "/get_weights_by_name", name="model.norm.weight")
        assert r.status_code == 400 and "released" in r.json()["message"]
        named = list(_tensors(ckpts["b"]).items())
        body = {"serialized_named_tensors": [_shm_payload(named)]}
        r = _post(url, "/update_weights_from_tensor", **body)
        assert r.status_code == 400 and "released" in r.json()["message"]

        r = _post(url, "/resume_memory_occupation", tags=["weights"])
        assert r.status_code == 200 and r.json()["success"], r.text
        norm = _post(url, "/get_weights_by_name", name="model.norm.weight").json()
        assert not any(norm)  # no host copy kept: zeroed until the trainer sends them
        r = _post(url, "/update_weights_from_tensor", **body)
        assert r.status_code == 200 and r.json()["success"], r.text
        info = server.server_info()
        assert info["memory_released"] == ["cuda_graph", "kv_cache"]
        assert (info["num_waiting_reqs"], info["num_decode_steps"]) == (1, steps)

        r = _post(url, "/resume_memory_occupation")
        assert r.status_code == 200 and r.json()["success"], r.text
        out = waiting.result(60).json()["output_ids"]
    assert _greedy_under(ckpts["b"], hf_models, out)
    assert server.server_info()["memory_released"] == []
    r = _post(url, "/release_memory_occupation", tags=["gpu"])
    assert r.status_code == 400 and "tags" in r.json()["message"]
    _restore_a(url, ckpts)
    server.check_idle_invariant()


def test_weights_cpu_backup_brings_the_weights_back(ckpts):
    srv = ServerProcess(
        ["--model-path", ckpts["a"], "--max-total-tokens", "1024", "--enable-weights-cpu-backup"]
    )
    try:
        before = _ids(srv.url)
        r = _post(srv.url, "/release_memory_occupation", tags=["weights", "kv_cache"])
        assert r.json()["success"], r.text
        r = _post(srv.url, "/resume_memory_occupation", tags=["weights", "kv_cache"])
        assert r.json()["success"], r.text
        assert _ids(srv.url) == before
        srv.check_idle_invariant()
    finally:
        srv.stop()


def test_flattened_bucket_round_trip_with_mixed_dtypes():
    from sglang.srt.weight_sync.tensor_bucket import FlattenedTensorBucket

    g = torch.Generator().manual_seed(3)
    named = [
        ("a", torch.randn(3, generator=g, dtype=torch.float32).to(torch.bfloat16)),  # 6 bytes
        ("b", torch.randn(2, 5, generator=g)),  # float32 at an offset of 6: not 4-aligned
        ("c", torch.arange(7, dtype=torch.int64)),
    ]
    bucket = FlattenedTensorBucket(named_tensors=named)
    assert bucket.get_flattened_tensor().dtype == torch.uint8
    again = FlattenedTensorBucket(
        flattened_tensor=bucket.get_flattened_tensor(), metadata=bucket.get_metadata()
    ).reconstruct_tensors()
    assert [n for n, _ in again] == ["a", "b", "c"]
    for (_, want), (_, got) in zip(named, again):
        assert got.dtype == want.dtype and torch.equal(got, want)


def _bucket_payload(named: list, corrupt: bool = False) -> str:
    from sglang.srt.weight_sync.tensor_bucket import FlattenedTensorBucket

    bucket = FlattenedTensorBucket(named_tensors=named)
    meta = bucket.get_metadata()
    if corrupt:
        meta[-1].end_idx += 4  # past the buffer's end
    return _plain_payload({"flattened_tensor": bucket.get_flattened_tensor(), "metadata": meta})


def test_flattened_bucket_update(server, ckpts, hf_models):
    url = server.url
    tb = _tensors(ckpts["b"])
    named = [(n, tb[n]) for n in PARTIAL]  # inline payloads: all of them would pass 32 MiB
    before = _ids(url)
    body = {"serialized_named_tensors": [_bucket_payload(named, corrupt=True)]}
    r = _post(url, "/update_weights_from_tensor", load_format="flattened_bucket", **body)
    assert r.status_code == 400 and "outside the buffer" in r.json()["message"], r.text
    assert _ids(url) == before
    body = {"serialized_named_tensors": [_bucket_payload(named)]}
    r = _post(url, "/update_weights_from_tensor", load_format="flattened_bucket", **body)
    assert r.status_code == 200 and r.json()["success"], r.text
    assert _greedy_under(ckpts["mixed"], hf_models, _ids(url))
    _restore_a(url, ckpts)
    server.check_idle_invariant()
