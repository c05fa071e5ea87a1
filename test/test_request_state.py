"""ReqState's mailbox and GenerateReqInput's field rules, without a server.

The mailbox must hold at most one unread chunk whatever the reader does, and what a reader gets
must not depend on how often it read: concatenating incremental chunks (text, ids, logprob entries)
gives the cumulative answer, and a cumulative chunk is always the whole answer so far.
"""

from __future__ import annotations

from typing import List, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang.srt.core.finish_reason import FinishLength
from sglang.srt.core.generate_fields import FEATURE_OF, HINT_FIELDS, is_neutral
from sglang.srt.core.generate_input import GenerateReqInput
from sglang.srt.core.io_struct.to_tokenizer import BatchStrOutput
from sglang.srt.core.sampling_params import SamplingParams
from sglang.srt.managers.tokenizer.request_preparer import PreparedReq
from sglang.srt.managers.tokenizer.request_state import ReqState

# Every top-level field of SGLang 0.5.23's GenerateReqInput (read off its io_struct.py).
SGLANG_0_5_23_FIELDS = """
rid session_id text input_ids input_embeds image_data video_data audio_data mm_hashes mm_content_hashes
use_audio_in_video video_config sampling_params watermark return_logprob logprob_start_len top_logprobs_num
token_ids_logprob return_sampling_mask sampling_logprobs_mode return_text_in_logprobs
return_flat_raw_top_logprobs return_flat_raw_output_top_logprobs return_flat_raw_top_logprobs_b64 stream
log_metrics return_hidden_states return_routed_experts routed_experts_start_len return_indexer_topk modalities
session_params lora_path lora_id custom_logit_processor positional_embed_overrides bootstrap_host
bootstrap_port bootstrap_room bootstrap_pair_key decode_tp_size routed_dp_rank data_parallel_rank
disagg_prefill_dp_rank routing_key conversation_id http_worker_ipc background require_reasoning
max_thinking_tokens priority extra_key no_logs custom_labels return_bytes return_entropy
return_prompt_token_ids external_trace_header received_time need_wait_for_mm_inputs num_items_assigned
encoder_urls max_dynamic_patch min_dynamic_patch image_max_dynamic_patch video_max_dynamic_patch
images_config mm_processor_kwargs multi_item_delimiter_indices token_indices_to_pool cache_salt kv_hints
""".split()


def test_every_sglang_field_is_honored_hinted_or_refused_by_feature():
    known = set(GenerateReqInput._FIELDS) | set(HINT_FIELDS) | set(FEATURE_OF)
    assert sorted(set(SGLANG_0_5_23_FIELDS) - known) == []
    assert not set(GenerateReqInput._FIELDS) & set(FEATURE_OF)


def test_neutral_values_pass_and_others_name_the_feature():
    body = {"text": "hi", **{name: None for name in FEATURE_OF}, "return_hidden_states": False}
    body.update(
        lora_path=[None, None], routed_experts_start_len=0, image_data=[], session_params={}
    )
    body["not_an_sglang_field"] = {"anything": 1}  # ignored, as SGLang ignores it
    obj = GenerateReqInput.from_json(body)
    obj.normalize()
    assert obj.text == "hi"
    for name, value, feature in [
        ("lora_path", "adapter", "LoRA adapters"),
        ("image_data", ["a.png"], "multimodal input"),
        ("return_hidden_states", True, "hidden-state output"),
        ("routed_dp_rank", 1, "data-parallel rank"),
        ("lora_path", [None, "adapter"], "LoRA adapters"),
    ]:
        with pytest.raises(ValueError, match=feature) as info:
            GenerateReqInput.from_json({"text": "hi", name: value})
        assert f"`{name}`" in str(info.value)
    with pytest.raises(TypeError, match="not_a_field"):  # Engine keywords: a typo is an error
        GenerateReqInput.from_kwargs(text="hi", not_a_field=1)
    with pytest.raises(ValueError, match="beam search"):
        SamplingParams.from_dict({"beam_width": 4}).verify(100)
    SamplingParams.from_dict(
        {"beam_width": None, "watermark": None, "ebnf_full_assistant": False}
    ).verify(100)


def test_is_neutral():
    assert all(is_neutral(v) for v in (None, False, 0, 0.0, "", [], {}, [None, False, 0]))
    assert not any(is_neutral(v) for v in (True, 1, -1, 0.5, "x", [None, 1], {"a": None}))


# ---------------------------------------------------------------------------- the mailbox
def _req(stream: bool = True, logprobs: bool = True, top: int = 2) -> PreparedReq:
    return PreparedReq(
        rid="r",
        text="p",
        input_ids=[1, 2, 3],
        sp=SamplingParams(),
        stream=stream,
        return_logprob=logprobs,
        logprob_start_len=1,
        top_logprobs_num=top,
        return_text_in_logprobs=False,
        priority=None,
        extra_key=None,
        log_metrics=True,
        background=False,
        no_logs=False,
        received_time=0.0,
    )


def _batch(text: str, ids: List[int], first: bool, finished: bool, n_done: int) -> BatchStrOutput:
    return BatchStrOutput(
        rids=["r"],
        finished_reasons=[FinishLength(n_done) if finished else None],
        output_ids=[ids],
        prompt_tokens=[3],
        completion_tokens=[n_done],
        cached_tokens=[0],
        retraction_counts=[0],
        input_token_logprobs=[[(-0.5, 2), (-0.25, 3)] if first else []],
        input_top_logprobs=[[[(-0.5, 2)], [(-0.25, 3)]] if first else None],
        output_token_logprobs=[[(-float(t), t) for t in ids]],
        output_top_logprobs=[[[(-float(t), t), (-9.0, 0)] for t in ids]],
        queue_times=[None],
        first_token_times=[None],
        output_strs=[text],
    )


def _pieces(draw_sizes: List[int]) -> List[List[int]]:
    out, t = [], 10
    for n in draw_sizes:
        out.append(list(range(t, t + n)))
        t += n
    return out


def _run(incremental: bool, sizes: List[int], reads: List[bool]) -> List[dict]:
    """Feed detokenizer batches; after each, the reader takes its mailbox or not (it always takes last)."""
    st_ = ReqState(_req(), incremental)
    taken: List[dict] = []
    pieces = _pieces(sizes)
    done = 0
    for k, ids in enumerate(pieces):
        done += len(ids)
        last = k == len(pieces) - 1
        st_.apply(
            _batch("".join(chr(97 + t % 26) for t in ids), ids, k == 0, last, done),
            0,
            False,
            lambda t: None,
        )
        assert st_.pending is not None and st_.pending_chunks >= 1
        if reads[k % len(reads)] or last:
            out: Optional[dict] = st_.take()
            assert out is not None and st_.pending is None and st_.unread_bytes == 0
            taken.append(out)
    return taken


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    sizes=st.lists(st.integers(0, 3), min_size=1, max_size=12),
    reads=st.lists(st.booleans(), min_size=1, max_size=5),
)
def test_incremental_chunks_concatenate_to_the_cumulative_answer(sizes, reads):
    full = _run(False, sizes, [True])[-1]
    for pattern in (reads, [True]):
        chunks = _run(True, sizes, pattern)
        assert "".join(c["text"] for c in chunks) == full["text"]
        ids = [t for c in chunks for t in c["output_ids"]]
        assert ids == full["output_ids"]
        for key in ("output_token_logprobs", "output_top_logprobs"):
            joined = [e for c in chunks for e in c["meta_info"][key]]
            assert joined == full["meta_info"][key]
            assert all(
                len(c["meta_info"][key]) == len(c["output_ids"]) for c in chunks
            )  # deltas, like ids
        # Input logprobs come once, in the first chunk, as in SGLang.
        assert (
            chunks[0]["meta_info"]["input_token_logprobs"]
            == full["meta_info"]["input_token_logprobs"]
        )
        assert all(c["meta_info"]["input_token_logprobs"] == [] for c in chunks[1:])
        assert chunks[-1]["meta_info"]["finish_reason"] == full["meta_info"]["finish_reason"]


def test_cumulative_chunks_are_whole_and_the_mailbox_keeps_one():
    st_ = ReqState(_req(), incremental=False)
    done = 0
    for k in range(50):  # a reader that never reads: still one pending chunk
        done += 1
        st_.apply(_batch("x", [k], k == 0, False, done), 0, False, lambda t: None)
    assert st_.pending_chunks == 50 and st_.unread_bytes == 50
    out = st_.take()
    assert out["text"] == "x" * 50 and out["output_ids"] == list(range(50))
    assert len(out["meta_info"]["output_token_logprobs"]) == 50
    assert st_.take() is None


def test_non_stream_requests_only_queue_the_final_output():
    st_ = ReqState(_req(stream=False), incremental=False)
    assert not st_.apply(_batch("a", [1], True, False, 1), 0, False, lambda t: None)
    assert st_.pending is None
    assert st_.apply(_batch("b", [2], False, True, 2), 0, False, lambda t: None)
    out = st_.take()
    assert out["text"] == "ab" and out["meta_info"]["finish_reason"]["type"] == "length"
    assert st_.final_meta is not None and st_.final_meta["completion_tokens"] == 2
