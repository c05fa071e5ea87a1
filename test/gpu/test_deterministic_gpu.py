"""--enable-deterministic-inference on CUDA: the kernels' rows are bit-identical across batches, and
a served request's logprobs do not depend on its batch, its prompt chunking or a radix hit (CUDA
graphs on, bf16)."""

from __future__ import annotations

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

BF16 = torch.bfloat16


@pytest.mark.parametrize(
    "m,n,k", [(1, 4096, 4096), (7, 6144, 4096), (64, 4096, 14336), (300, 1000, 512)]
)
def test_invariant_matmul_rows_on_cuda(m, n, k) -> None:
    from invariance_checks import check_invariant_matmul

    for seed in range(3):
        err = check_invariant_matmul(m, n, k, bias=seed == 1, dtype=BF16, device="cuda", seed=seed)
        assert err < 1e-2, (m, n, k, seed, err)


def test_attention_kernels_invariant_on_cuda() -> None:
    from invariance_checks import check_decode_fixed_splits, check_extend_from_pool

    for seed in range(3):
        assert (
            check_extend_from_pool(2000, 700, 300, 32, 8, 128, dtype=BF16, device="cuda", seed=seed)
            < 2e-2
        )
        assert (
            check_extend_from_pool(600, 599, 100, 32, 8, 128, dtype=BF16, device="cuda", seed=seed)
            < 2e-2
        )
        lens = [3000, 5, 700, 129, 1]
        assert (
            check_decode_fixed_splits(
                lens, 32, 8, 128, split_len=256, max_splits=16, dtype=BF16, device="cuda", seed=seed
            )
            < 2e-2
        )


def _lps(outs) -> list:
    return [[tuple(t[:2]) for t in o["meta_info"]["output_token_logprobs"]] for o in outs]


def test_served_logprobs_do_not_depend_on_the_batch(tiny_ckpts) -> None:
    from sglang.srt.entrypoints.engine import Engine

    g = torch.Generator().manual_seed(3)
    prompt = torch.randint(0, 49152, (150,), generator=g).tolist()
    others = [torch.randint(0, 49152, (n,), generator=g).tolist() for n in (9, 300, 40, 77)]
    sp = {"max_new_tokens": 16, "temperature": 0, "ignore_eos": True}
    kw = dict(
        model_path=tiny_ckpts["llama"],
        device="cuda",
        dtype="bfloat16",
        skip_tokenizer_init=True,
        max_total_tokens=16384,
        cuda_graph_max_bs=8,
        enable_deterministic_inference=True,
    )
    with Engine(**kw) as e:
        alone = e.generate(input_ids=[prompt], sampling_params=[sp], return_logprob=True)
        again = e.generate(input_ids=[prompt], sampling_params=[sp], return_logprob=True)
        assert again[0]["meta_info"]["cached_tokens"] > 0
        batch = e.generate(
            input_ids=others + [prompt], sampling_params=[sp] * 5, return_logprob=True
        )
    with Engine(chunked_prefill_size=64, **kw) as e:
        chunked = e.generate(
            input_ids=[prompt] + others, sampling_params=[sp] * 5, return_logprob=True
        )
    want = _lps(alone)[0]
    assert _lps(again)[0] == want
    assert _lps(batch)[-1] == want
    assert _lps(chunked)[0] == want
