"""The in-process Engine: same results as the HTTP server, streaming, async, context manager."""

from __future__ import annotations

import asyncio

import pytest
from server_utils import generate

from sglang.srt.entrypoints.engine import Engine

PROMPTS = ["The capital of France is", "Water boils at", "def add(a, b):"]
SP = {"max_new_tokens": 10, "temperature": 0}


@pytest.fixture(scope="module")
def engine():
    with Engine(max_total_tokens=8192) as e:
        yield e


def test_engine_and_http_give_identical_outputs(engine, server_url):
    outs = engine.generate(PROMPTS, SP)
    http = generate(server_url, text=PROMPTS, sampling_params=SP).json()
    assert [o["output_ids"] for o in outs] == [h["output_ids"] for h in http]
    assert [o["text"] for o in outs] == [h["text"] for h in http]
    single = engine.generate(PROMPTS[0], SP, return_logprob=True, top_logprobs_num=2)
    h = generate(
        server_url, text=PROMPTS[0], sampling_params=SP, return_logprob=True, top_logprobs_num=2
    ).json()
    assert single["output_ids"] == h["output_ids"]
    for a, b in zip(
        single["meta_info"]["output_token_logprobs"], h["meta_info"]["output_token_logprobs"]
    ):
        assert a[1] == b[1] and abs(a[0] - b[0]) < 1e-4


def test_engine_streaming_and_async(engine):
    final = engine.generate(PROMPTS[1], SP)
    chunks = list(engine.generate(PROMPTS[1], SP, stream=True))
    assert chunks[-1]["text"] == final["text"] and chunks[-1]["output_ids"] == final["output_ids"]
    assert len(chunks) > 1

    async def run():
        a = await engine.async_generate(PROMPTS[2], SP)
        got = [c async for c in await engine.async_generate(PROMPTS[2], SP, stream=True)]
        return a, got

    a, got = asyncio.run(run())
    assert got[-1]["text"] == a["text"]


def test_engine_errors_and_info(engine):
    with pytest.raises(ValueError, match="empty"):
        engine.generate("", SP)
    assert engine.get_model_info()["is_generation"]
    assert engine.get_server_info()["max_total_num_tokens"] == 8192
    assert engine.flush_cache()["success"]


def test_msgpack_wire_format_gives_the_same_results(engine):
    with Engine(max_total_tokens=2048, ipc_serializer="msgpack") as e:
        a = e.generate(PROMPTS, SP)
        s = list(e.generate(PROMPTS[0], SP, stream=True, return_logprob=True))
        assert e.flush_cache()["success"]
    b = engine.generate(PROMPTS, SP)
    assert [x["output_ids"] for x in a] == [y["output_ids"] for y in b]
    assert s[-1]["output_ids"] == b[0]["output_ids"]
    assert len(s[-1]["meta_info"]["output_token_logprobs"]) == SP["max_new_tokens"]


def test_engine_control_methods(engine, tiny_models, tmp_path):
    """pause / continue, a weight update (the same checkpoint again, and a refused one), and a
    profile, in-process."""
    ref = engine.generate(PROMPTS[0], SP)["output_ids"]

    async def paused_then_continued():
        engine.pause_generation("in_place")
        task = asyncio.ensure_future(engine.async_generate(PROMPTS[0], SP))
        await asyncio.sleep(0.5)
        waiting = engine.get_server_info()["num_waiting_reqs"]
        done_while_paused = task.done()
        engine.continue_generation()
        return waiting, done_while_paused, (await task)["output_ids"]

    waiting, done_while_paused, out = asyncio.run(paused_then_continued())
    assert (waiting, done_while_paused, out) == (1, False, ref)

    path = engine.get_server_info()["model_path"]
    assert engine.update_weights_from_disk(path, weight_version="same")[0]
    again = engine.generate(PROMPTS[0], SP)
    assert again["output_ids"] == ref and again["meta_info"]["weight_version"] == "same"
    ok, message = engine.update_weights_from_disk(tiny_models["llama"])
    assert not ok and "not the same model" in message
    with pytest.raises(ValueError, match="model_path"):
        engine.update_weights_from_disk("")

    engine.start_profile(output_dir=str(tmp_path), profile_id="engine")
    engine.generate(PROMPTS[1], SP)
    engine.stop_profile()
    assert (tmp_path / "engine-TP-0.trace.json.gz").stat().st_size > 0
    with pytest.raises(ValueError, match="not in progress"):
        engine.stop_profile()


def test_engine_weight_sync_methods(engine):
    """update_weights_from_tensor hands CPU tensors over by shared memory (torch's default
    file-descriptor strategy: the schedulers share the Engine's authkey); get_weights_by_name
    reads them back."""
    import torch

    ref = engine.generate(PROMPTS[0], SP)["output_ids"]
    name = "model.norm.weight"
    norm = torch.tensor(engine.get_weights_by_name(name, truncate_size=100_000))
    assert norm.dim() == 1 and norm.numel() > 100
    assert torch.equal(torch.tensor(engine.get_weights_by_name(name)), norm[:100])
    flipped = norm.flip(0)  # a uniform scale would leave every argmax as it was
    assert engine.update_weights_from_tensor([(name, flipped)], weight_version="flipped") == (
        True,
        "Updated 1 tensors.",
    )
    assert torch.equal(torch.tensor(engine.get_weights_by_name(name, 100_000)), flipped)
    out = engine.generate(PROMPTS[0], SP)
    assert out["meta_info"]["weight_version"] == "flipped" and out["output_ids"] != ref
    ok, message = engine.update_weights_from_tensor([("model.nope", norm)])
    assert not ok and "model.nope" in message
    assert engine.update_weights_from_tensor([(name, norm)], weight_version="default")[0]
    assert engine.generate(PROMPTS[0], SP)["output_ids"] == ref
    with pytest.raises(ValueError, match="no weight"):
        engine.get_weights_by_name("model.nope")
