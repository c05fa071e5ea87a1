"""HiCache on CUDA: the row-copy kernel between pinned host memory and the device pool against the
torch reference, the copy engine's per-layer events, and the scheduler (overlap, CUDA graphs)
giving token-identical greedy output with prefixes loaded back from host, for both io backends."""

from __future__ import annotations

import itertools

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

_rid = itertools.count()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float8_e4m3fn, torch.float32])
def test_copy_rows_between_pinned_host_and_device(dtype):
    from sglang.srt.mem_cache.kv_copy_kernel import copy_rows

    g = torch.Generator().manual_seed(0)
    host_k = torch.randn((300, 8, 128), generator=g).to(dtype).pin_memory()
    host_v = torch.randn((300, 8, 128), generator=g).to(dtype).pin_memory()
    dev_k = torch.zeros((200, 8, 128), dtype=dtype, device="cuda")
    dev_v = torch.zeros_like(dev_k)
    src = torch.randperm(300, generator=g)[:150]
    dst = torch.randperm(200, generator=g)[:150]
    copy_rows(host_k, dev_k, host_v, dev_v, src.cuda(), dst.cuda())
    torch.cuda.synchronize()
    assert torch.equal(dev_k.cpu()[dst].view(torch.uint8), host_k[src].view(torch.uint8))
    assert torch.equal(dev_v.cpu()[dst].view(torch.uint8), host_v[src].view(torch.uint8))
    back_k, back_v = torch.zeros_like(host_k).pin_memory(), torch.zeros_like(host_v).pin_memory()
    copy_rows(dev_k, back_k, dev_v, back_v, dst.cuda(), src.cuda())
    torch.cuda.synchronize()
    assert torch.equal(back_k[src].view(torch.uint8), host_k[src].view(torch.uint8))


@pytest.mark.parametrize("io_backend", ["kernel", "direct"])
def test_transfer_round_trip_with_layer_events(io_backend):
    from sglang.srt.mem_cache.host_pool import HostKVPool
    from sglang.srt.mem_cache.kv_transfer import KVTransfer
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

    dev = MHATokenToKVPool(512, 1, torch.bfloat16, 8, 128, 4, "cuda")
    host = HostKVPool.like(dev, 1024)
    assert host.pinned
    t = KVTransfer(dev, host, io_backend)
    assert t.io_backend == io_backend
    for layer in range(4):
        dev.k_buffer[layer].normal_()
        dev.v_buffer[layer].normal_()
    want_k = [dev.k_buffer[layer][1:101].clone() for layer in range(4)]
    d_slots = torch.arange(1, 101)
    h_slots = torch.arange(500, 600)
    t.write_to_host(d_slots, h_slots).wait()
    for layer in range(4):
        dev.k_buffer[layer].zero_()
    new_slots = torch.arange(201, 301)
    t.load_to_device(h_slots, new_slots)
    waits = t.take_layer_waits()
    assert waits is not None and len(waits.events) == 4 and t.take_layer_waits() is None
    for layer in range(4):
        waits.wait_layer(layer)
        assert torch.equal(dev.k_buffer[layer][201:301], want_k[layer])
    torch.cuda.synchronize()
    stats = t.poll_stats()
    assert stats.loaded_tokens == 100 and stats.load_time_s > 0


@pytest.mark.parametrize("io_backend", ["kernel", "direct"])
def test_scheduler_greedy_tokens_identical_with_host_loads(tiny_ckpts, io_backend):
    from sglang.srt.core.io_struct.to_scheduler import TokenizedGenerateReqInput
    from sglang.srt.core.sampling_params import SamplingParams
    from sglang.srt.managers.scheduler.scheduler import Scheduler
    from sglang.srt.server_args import ServerArgs

    def sched(**kw):
        sa = ServerArgs(
            model_path=tiny_ckpts["llama"],
            skip_tokenizer_init=True,
            max_running_requests=4,
            cuda_graph_max_bs=4,
            grammar_backend="none",
            strict_memory_check=True,
            **kw,
        )
        return Scheduler(sa, None)

    def run(s, prompts):
        outs = []
        for ids in prompts:
            rid = f"g{next(_rid)}"
            sp = SamplingParams(max_new_tokens=8, temperature=0.0)
            sp.normalize(None)
            s.intake.handle_generate_request(
                TokenizedGenerateReqInput(rid=rid, input_ids=ids, sampling_params=sp)
            )
            req = s.state.rid_to_req[rid]
            for _ in range(400):
                s.step()
                if req.finished() and s._is_fully_idle():
                    break
            outs.append((list(req.output_ids), req.cached_host_tokens))
        for _ in range(3):
            s.step()
        return outs

    prefixes = [[3 + g] * 4 + list(range(100 + 50 * g, 100 + 50 * g + 92)) for g in range(4)]
    prompts = [p + [7, 8] for p in prefixes] + [p + [9, 10, 11] for p in prefixes]
    ref = run(sched(max_total_tokens=8192), prompts)
    got = run(
        sched(
            max_total_tokens=288,
            enable_hierarchical_cache=True,
            hicache_ratio=4.0,
            hicache_io_backend=io_backend,
        ),
        prompts,
    )
    assert [g[0] for g in got] == [r[0] for r in ref]
    assert got[4][1] > 0 and got[5][1] > 0
