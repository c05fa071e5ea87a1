"""/v1/completions: prompts (text, token ids, or lists of either) -> text_completion objects."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Union

from sglang.srt.core.generate_input import GenerateReqInput
from sglang.srt.entrypoints.errors import ApiError
from sglang.srt.entrypoints.openai.choices import Choices, ChoiceState, Delta
from sglang.srt.entrypoints.openai.logprobs import completion_logprobs
from sglang.srt.entrypoints.openai.protocol import CompletionRequest
from sglang.srt.entrypoints.openai.sampling import build_sampling_params
from sglang.srt.entrypoints.openai.serving_base import (
    Job,
    OpenAIServingBase,
    new_rids,
    openai_finish_reason,
)

Prompt = Union[str, List[int]]


def split_prompts(prompt: Any) -> List[Prompt]:
    """The list of prompts a `prompt` field holds (a str, a token-id list, or a list of either)."""
    if isinstance(prompt, str):
        return [prompt]
    if not prompt:
        raise ApiError(400, "prompt must not be empty.", "prompt")
    if isinstance(prompt[0], int):
        return [prompt]
    return list(prompt)


class OpenAIServingCompletion(OpenAIServingBase):
    request_model = CompletionRequest
    id_prefix = "cmpl-"

    def prepare(self, req: CompletionRequest, job_id: str, model: str) -> Job:
        if req.suffix:
            raise ApiError(400, "suffix is not supported.", "suffix")
        prompts = split_prompts(req.prompt)
        single = isinstance(req.prompt, str) or isinstance(req.prompt[0], int)
        rids = new_rids(len(prompts))
        want_lp = req.logprobs is not None
        kw: Dict[str, Any] = dict(
            sampling_params=build_sampling_params(req, req.max_tokens),
            stream=req.stream,
            return_logprob=want_lp,
            top_logprobs_num=req.logprobs or 0,
            return_text_in_logprobs=True,
            # echo + logprobs reports the prompt's logprobs too, so they must be computed from token 0.
            logprob_start_len=0 if (want_lp and req.echo) else -1,
            rid=rids[0] if single else rids,
        )
        key = "text" if isinstance(prompts[0], str) else "input_ids"
        obj = GenerateReqInput(**{key: prompts[0] if single else prompts}, **kw)
        echo_texts: List[str] = []
        if req.echo:
            echo_texts = [p if isinstance(p, str) else self._decode(p) for p in prompts]
        return Job(
            req=req,
            obj=obj,
            choices=Choices(rids, req.n),
            model=model,
            id=job_id,
            extra={"echo": echo_texts, "offsets": {}},
        )

    def _decode(self, ids: List[int]) -> str:
        tok = self.tm.preparer.thread_tokenizer()  # called from prepare(), in a pool thread
        if tok is None:
            raise ApiError(
                400, "echo needs a tokenizer; this server runs with --skip-tokenizer-init.", "echo"
            )
        vocab = self.tm.vocab_size
        if any(t < 0 or t >= vocab for t in ids):  # the tokenizer would overflow on them
            raise ApiError(400, f"prompt token ids must be in [0, {vocab}).", "prompt")
        return tok.decode(ids)

    # ------------------------------------------------------------------ non-stream
    def make_choice(self, job: Job, st: ChoiceState, result: Dict[str, Any]) -> Dict[str, Any]:
        req: CompletionRequest = job.req
        meta = result["meta_info"]
        text = result["text"]
        lps = meta.get("output_token_logprobs") or []
        tops = meta.get("output_top_logprobs")
        if req.echo:
            text = job.extra["echo"][st.prompt_index] + text
            lps = (meta.get("input_token_logprobs") or []) + lps
            if tops is not None:
                tops = (meta.get("input_top_logprobs") or []) + tops
        choice = {"index": st.index, "text": text, "logprobs": None}
        if req.logprobs is not None:
            choice["logprobs"], _ = completion_logprobs(lps, tops if req.logprobs else None, 0)
        return self._finish_fields(choice, meta)

    def make_response(
        self, job: Job, choices: List[Dict[str, Any]], usage: Dict[str, Any]
    ) -> Dict[str, Any]:
        return {
            "id": job.id,
            "object": "text_completion",
            "created": job.created,
            "model": job.model,
            "choices": choices,
            "usage": usage,
        }

    @staticmethod
    def _finish_fields(choice: Dict[str, Any], meta: Dict[str, Any]) -> Dict[str, Any]:
        fr = meta.get("finish_reason")
        choice["finish_reason"] = openai_finish_reason(fr)
        choice["matched_stop"] = fr.get("matched") if fr else None
        return choice

    # ------------------------------------------------------------------ stream
    def stream_chunks(self, job: Job, d: Delta, finish: Optional[str]) -> List[Dict[str, Any]]:
        req: CompletionRequest = job.req
        text, lps, tops = d.text, d.logprobs, d.top_logprobs
        if d.first and req.echo:
            # The prompt goes out with the choice's first chunk, ahead of the generated text.
            text = job.extra["echo"][d.state.prompt_index] + text
            lps = (d.meta.get("input_token_logprobs") or []) + lps
            if tops is not None:
                tops = (d.meta.get("input_top_logprobs") or []) + tops
        if not text and not lps and finish is None:
            return []
        choice: Dict[str, Any] = {
            "index": d.state.index,
            "text": text,
            "logprobs": None,
            "finish_reason": finish,
        }
        if req.logprobs is not None:
            offsets = job.extra["offsets"]
            choice["logprobs"], offsets[d.state.index] = completion_logprobs(
                lps, tops if req.logprobs else None, offsets.get(d.state.index, 0)
            )
        if finish is not None:
            fr = d.finish_reason or {}
            choice["matched_stop"] = fr.get("matched")
        return [choice]

    def chunk_envelope(self, job: Job, choices: List[Dict[str, Any]]) -> Dict[str, Any]:
        return {
            "id": job.id,
            "object": "text_completion",
            "created": job.created,
            "model": job.model,
            "choices": choices,
        }
