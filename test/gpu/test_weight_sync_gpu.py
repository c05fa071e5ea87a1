"""Weights from a trainer on CUDA: CUDA tensors handed over as IPC handles reach the weights the
captured graphs read, and memory released and resumed (graphs captured again) serves the same
tokens; the reference is the CPU Engine on the checkpoint the weights should now be."""

from __future__ import annotations

import os

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def _outputs(e, prompts) -> list:
    sp = {"max_new_tokens": 12, "temperature": 0, "ignore_eos": True}
    outs = e.generate(input_ids=prompts, sampling_params=[dict(sp) for _ in prompts])
    return [o["output_ids"] for o in outs]


def _engine(path: str, device: str):
    from sglang.srt.entrypoints.engine import Engine

    return Engine(
        model_path=path,
        device=device,
        dtype="float32",
        skip_tokenizer_init=True,
        max_total_tokens=8192,
        cuda_graph_max_bs=8,
    )


def test_cuda_ipc_update_and_memory_lending_keep_graphs_right(tiny_ckpts, tmp_path) -> None:
    from model_fixtures import write_tiny_model
    from safetensors.torch import load_file

    a = tiny_ckpts["llama"]
    b = write_tiny_model("llama", str(tmp_path / "b"), seed=1, with_tokenizer=False)
    g = torch.Generator().manual_seed(7)
    prompts = [torch.randint(0, 49152, (n,), generator=g).tolist() for n in (5, 17, 33)]
    with _engine(b, "cpu") as e:
        want = _outputs(e, prompts)
    named = [(n, t.cuda()) for n, t in load_file(os.path.join(b, "model.safetensors")).items()]
    with _engine(a, "cuda") as e:
        assert _outputs(e, prompts) != want
        ok, msg = e.update_weights_from_tensor(named)
        assert ok, msg
        assert _outputs(e, prompts) == want

        weight_bytes = e.get_server_info()["weight_bytes"]
        torch.cuda.synchronize()
        free0 = torch.cuda.mem_get_info()[0]
        assert e.release_memory_occupation()[0]
        assert torch.cuda.mem_get_info()[0] - free0 >= weight_bytes
        assert e.resume_memory_occupation(["weights"])[0]
        ok, msg = e.update_weights_from_tensor(named)
        assert ok, msg
        assert e.resume_memory_occupation()[0]
        assert _outputs(e, prompts) == want
