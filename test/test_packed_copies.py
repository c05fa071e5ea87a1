"""Packed host->device copies keep every view 128-byte aligned; the Triton compile watcher counts and logs."""

from __future__ import annotations

import logging

import torch
from hypothesis import given
from hypothesis import strategies as st

from sglang.srt.core.forward_batch_info import (
    PACK_ALIGN_ELEMS,
    build_decode_batch,
    pack_host,
    packed_offsets,
    unpack,
)
from sglang.srt.utils import jit_watch


@given(st.lists(st.integers(0, 300), max_size=10))
def test_packed_offsets_are_aligned_and_disjoint(sizes):
    offs = packed_offsets(sizes)
    assert len(offs) == len(sizes) + 1
    for i, n in enumerate(sizes):
        assert offs[i] % PACK_ALIGN_ELEMS == 0
        assert (
            offs[i + 1] - offs[i] == -(-n // PACK_ALIGN_ELEMS) * PACK_ALIGN_ELEMS
        )  # the least room that fits


@given(st.lists(st.lists(st.integers(-(2**40), 2**40), max_size=40), min_size=1, max_size=8))
def test_pack_then_unpack_round_trips_with_aligned_views(rows):
    tensors = [torch.tensor(r, dtype=torch.int64) for r in rows]
    flat, offs = pack_host(tensors)
    views = unpack(flat, offs, [t.shape for t in tensors])
    for t, v in zip(tensors, views):
        assert torch.equal(t, v)
        assert v.numel() == 0 or (v.data_ptr() - flat.data_ptr()) % (8 * PACK_ALIGN_ELEMS) == 0


def test_decode_batch_rows_hold_the_right_values():
    fb = build_decode_batch(
        torch.tensor([5, 6, 7]), [10, 3, 8], [2, 0, 1], torch.tensor([40, 41, 42]), "cpu"
    )
    assert fb.positions.tolist() == [9, 2, 7]
    assert fb.req_pool_indices.tolist() == [2, 0, 1]
    assert fb.seq_lens.tolist() == [10, 3, 8]
    assert fb.out_cache_loc.tolist() == [40, 41, 42]
    assert all(t.is_contiguous() for t in (fb.positions, fb.req_pool_indices, fb.seq_lens))


class _Fn:
    name = "_demo_kernel"


def test_jit_watch_logs_compiles_only_once_serving(caplog, monkeypatch):
    from triton import knobs

    assert jit_watch.install()
    # Process-wide: a scheduler driven in-process by an earlier test may have marked it serving.
    monkeypatch.setitem(jit_watch._state, "serving", False)
    before = jit_watch.compile_counts().get("_demo_kernel", 0)
    kw = dict(
        repr="_demo_kernel[...]",
        fn=_Fn(),
        compile={},
        is_manual_warmup=False,
        already_compiled=False,
    )
    with caplog.at_level(logging.WARNING, logger="sglang.srt.utils.jit_watch"):
        knobs.runtime.jit_cache_hook(key=("k1",), **kw)
        knobs.runtime.jit_post_compile_hook(key=("k1",), **kw)
        assert "while serving" not in caplog.text
        jit_watch.mark_serving()
        knobs.runtime.jit_cache_hook(key=("k2",), **kw)
        knobs.runtime.jit_post_compile_hook(key=("k2",), **kw)
    assert jit_watch.compile_counts()["_demo_kernel"] == before + 2
    assert "Triton compiled _demo_kernel variant" in caplog.text and "while serving" in caplog.text
    jit_watch._state["serving"] = False
