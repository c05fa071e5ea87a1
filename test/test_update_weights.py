"""/update_weights_from_disk on the real server, with tiny random checkpoints: the new weights are
the ones that answer (checked against HF logits of the new checkpoint), a running request finishes
on the old ones, another model's checkpoint is refused untouched, and a load that fails midway is
rolled back."""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import time

import pytest
import requests
import torch
from model_fixtures import write_tiny_model
from safetensors.torch import load_file, save_file
from server_utils import ServerProcess, assert_error_shape, generate

PROMPT = [5, 17, 42, 99, 7, 3]
SP = {"max_new_tokens": 8, "temperature": 0}
LONG = {"max_new_tokens": 160, "temperature": 0, "ignore_eos": True}


@pytest.fixture(scope="module")
def ckpts(tiny_models, tmp_path_factory):
    root = tmp_path_factory.mktemp("update-weights")
    b = write_tiny_model("llama", str(root / "b"), seed=1)
    broken = str(root / "broken")  # B's weights but one tensor short: the load fails at its end
    shutil.copytree(b, broken)
    f = os.path.join(broken, "model.safetensors")
    tensors = load_file(f)
    del tensors["model.norm.weight"]
    save_file(tensors, f)
    return {"a": tiny_models["llama"], "b": b, "other": tiny_models["qwen3"], "broken": broken}


@pytest.fixture(scope="module")
def server(ckpts):
    srv = ServerProcess(["--model-path", ckpts["a"], "--max-total-tokens", "2048"])
    yield srv
    srv.stop()


def _ids(url: str, sp=SP) -> list:
    r = generate(url, input_ids=PROMPT, sampling_params=sp)
    assert r.status_code == 200, r.text
    return r.json()["output_ids"]


def _update(url: str, **body) -> requests.Response:
    return requests.post(url + "/update_weights_from_disk", json=body, timeout=300)


def _start_long(server, pool):
    """A long greedy request, returned once the scheduler runs it."""
    running = pool.submit(generate, server.url, input_ids=PROMPT, sampling_params=LONG)
    deadline = time.time() + 60
    while server.server_info()["num_running_reqs"] == 0:
        assert time.time() < deadline, "the request never ran"
        time.sleep(0.02)
    return running


def _greedy_under(path: str, hf_models, out: list) -> bool:
    """Each token of `out` is the argmax of `path`'s HF logits after the tokens before it."""
    with torch.no_grad():
        logits = hf_models(path)(torch.tensor([PROMPT + out])).logits[0]
    return logits[len(PROMPT) - 1 : -1].argmax(-1).tolist() == out


def test_new_weights_answer_and_a_running_request_ends_on_the_old(server, ckpts, hf_models):
    url = server.url
    ref_a, long_a = _ids(url), _ids(url, LONG)
    assert _greedy_under(ckpts["a"], hf_models, ref_a)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        running = _start_long(server, pool)
        r = _update(url, model_path=ckpts["b"], weight_version="v2")
        assert r.status_code == 200, r.text
        assert r.json()["success"] is True
        # The update waited for it: all of its tokens came from A.
        assert running.result(60).json()["output_ids"] == long_a
    res = generate(url, input_ids=PROMPT, sampling_params=SP).json()
    assert res["meta_info"]["weight_version"] == "v2"
    assert res["meta_info"]["cached_tokens"] == 0  # A's cached prefix was flushed
    assert res["output_ids"] != ref_a
    assert _greedy_under(ckpts["b"], hf_models, res["output_ids"])
    server.check_idle_invariant()


def test_abort_all_requests_ends_them_and_updates_at_once(server, ckpts, hf_models):
    url = server.url
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        running = _start_long(server, pool)
        r = _update(url, model_path=ckpts["a"], abort_all_requests=True)
        assert r.status_code == 200 and r.json()["success"], r.text
        assert running.result(60).json()["meta_info"]["finish_reason"]["type"] == "abort"
    assert _greedy_under(ckpts["a"], hf_models, _ids(url))
    server.check_idle_invariant()


def test_refused_and_failed_updates_leave_the_weights_serving(server, ckpts):
    url = server.url
    before = _ids(url)
    r = _update(url, model_path=ckpts["other"])
    assert r.status_code == 400 and r.json()["success"] is False
    assert "not the same model" in r.json()["message"] and "architecture" in r.json()["message"]
    r = _update(url, model_path=ckpts["broken"])
    assert r.status_code == 400 and r.json()["success"] is False
    assert "model.norm.weight" in r.json()["message"]  # B's other tensors were written, then undone
    r = _update(url, model_path="/no/such/checkpoint")
    assert r.status_code == 400 and r.json()["success"] is False
    assert _ids(url) == before
    server.check_idle_invariant()


@pytest.mark.parametrize(
    "body,field",
    [
        ({}, "model_path"),
        ({"model_path": 3}, "model_path"),
        ({"model_path": "x", "abort_all_requests": "yes"}, "abort_all_requests"),
        ({"model_path": "x", "token_step": True}, "token_step"),
        ({"model_path": "x", "reload": True}, "reload"),
    ],
)
def test_bad_update_bodies_are_400(server, body, field):
    r = requests.post(server.url + "/update_weights_from_disk", json=body, timeout=30)
    assert field in assert_error_shape(r, 400, "BadRequestError")["message"]


def test_rl_loop_pause_update_continue(server, ckpts, hf_models):
    """SGLang's guide, step 15: pause (retract), new weights, continue; the paused request is
    prefilled again and finishes on the new weights."""
    url = server.url
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        running = _start_long(server, pool)
        assert requests.post(url + "/pause_generation", json={"mode": "retract"}).ok
        try:
            r = _update(url, model_path=ckpts["b"], weight_version="rl-1")
            assert r.status_code == 200 and r.json()["success"], r.text
        finally:
            assert requests.post(url + "/continue_generation").ok
        out = running.result(60).json()
    assert out["meta_info"]["num_retractions"] == 1
    assert out["meta_info"]["weight_version"] == "rl-1"
    assert len(out["output_ids"]) == LONG["max_new_tokens"]
    assert _greedy_under(ckpts["b"], hf_models, _ids(url))
    server.check_idle_invariant()
