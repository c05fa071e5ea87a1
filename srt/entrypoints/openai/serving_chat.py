"""/v1/chat/completions: messages -> chat template -> chat.completion objects (or chunks)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from sglang.srt.core.generate_input import GenerateReqInput
from sglang.srt.entrypoints.errors import ApiError
from sglang.srt.entrypoints.openai.chat_template import render_chat_prompt
from sglang.srt.entrypoints.openai.choices import Choices, ChoiceState, Delta
from sglang.srt.entrypoints.openai.logprobs import chat_logprobs
from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest
from sglang.srt.entrypoints.openai.sampling import build_sampling_params
from sglang.srt.entrypoints.openai.serving_base import (
    Job,
    OpenAIServingBase,
    new_rids,
    openai_finish_reason,
)


class OpenAIServingChat(OpenAIServingBase):
    request_model = ChatCompletionRequest
    id_prefix = "chatcmpl-"

    def prepare(self, req: ChatCompletionRequest, job_id: str, model: str) -> Job:
        if req.top_logprobs and not req.logprobs:
            raise ApiError(400, "top_logprobs requires logprobs to be true.", "top_logprobs")
        preparer = (
            self.tm.preparer
        )  # prepare() runs in one of its threads: use that thread's tokenizer
        input_ids = render_chat_prompt(
            preparer.thread_tokenizer(), req.messages, preparer.check_chars
        )
        rids = new_rids(1)
        obj = GenerateReqInput(
            input_ids=input_ids,
            sampling_params=build_sampling_params(req, req.max_new_tokens()),
            stream=req.stream,
            return_logprob=req.logprobs,
            top_logprobs_num=(req.top_logprobs or 0) if req.logprobs else 0,
            return_text_in_logprobs=True,
            rid=rids[0],
        )
        return Job(req=req, obj=obj, choices=Choices(rids, req.n), model=model, id=job_id)

    def _logprobs(
        self, job: Job, lps: List[Any], tops: Optional[List[Any]]
    ) -> Optional[Dict[str, Any]]:
        if not job.req.logprobs:
            return None
        return {"content": chat_logprobs(lps, tops if job.req.top_logprobs else None)}

    # ------------------------------------------------------------------ non-stream
    def make_choice(self, job: Job, st: ChoiceState, result: Dict[str, Any]) -> Dict[str, Any]:
        meta = result["meta_info"]
        fr = meta.get("finish_reason")
        return {
            "index": st.index,
            "message": {"role": "assistant", "content": result["text"]},
            "logprobs": self._logprobs(
                job, meta.get("output_token_logprobs") or [], meta.get("output_top_logprobs")
            ),
            "finish_reason": openai_finish_reason(fr),
            "matched_stop": fr.get("matched") if fr else None,
        }

    def make_response(
        self, job: Job, choices: List[Dict[str, Any]], usage: Dict[str, Any]
    ) -> Dict[str, Any]:
        return {
            "id": job.id,
            "object": "chat.completion",
            "created": job.created,
            "model": job.model,
            "choices": choices,
            "usage": usage,
        }

    # ------------------------------------------------------------------ stream
    def stream_chunks(self, job: Job, d: Delta, finish: Optional[str]) -> List[Dict[str, Any]]:
        out: List[Dict[str, Any]] = []
        i = d.state.index
        if d.first:
            # OpenAI streams announce the role once per choice, with empty content.
            out.append(
                {
                    "index": i,
                    "delta": {"role": "assistant", "content": ""},
                    "logprobs": None,
                    "finish_reason": None,
                }
            )
        if d.text or d.logprobs or finish is not None:
            lp = self._logprobs(job, d.logprobs, d.top_logprobs) if d.logprobs else None
            choice: Dict[str, Any] = {
                "index": i,
                "delta": {"content": d.text} if d.text else {},
                "logprobs": lp,
                "finish_reason": finish,
            }
            if finish is not None:
                choice["matched_stop"] = (d.finish_reason or {}).get("matched")
            out.append(choice)
        return out

    def chunk_envelope(self, job: Job, choices: List[Dict[str, Any]]) -> Dict[str, Any]:
        return {
            "id": job.id,
            "object": "chat.completion.chunk",
            "created": job.created,
            "model": job.model,
            "choices": choices,
        }
