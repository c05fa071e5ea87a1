"""/v1/chat/completions: messages (and tools) -> chat template -> chat.completion objects (or chunks).

With tools, tool_choice `auto` reads calls out of the answer in the format --tool-call-parser names
(or the template implies); `required` and a named function constrain the output to a JSON array of
calls built from the tools' own schemas (tool_constraint.py), so the answer is always a valid call.
With --reasoning-parser, a <think> block becomes reasoning_content.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional

from sglang.srt.core.generate_input import GenerateReqInput
from sglang.srt.entrypoints.errors import ApiError
from sglang.srt.entrypoints.openai.chat_output import (
    ChatOutputPlan,
    ChoiceShaper,
    shaped_finish_reason,
)
from sglang.srt.entrypoints.openai.chat_template import (
    RenderedPrompt,
    render_chat_prompt,
    template_text,
)
from sglang.srt.entrypoints.openai.choices import Choices, ChoiceState, Delta
from sglang.srt.entrypoints.openai.logprobs import chat_logprobs
from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest, NamedToolChoice
from sglang.srt.entrypoints.openai.sampling import CONSTRAINT_FIELDS, build_sampling_params
from sglang.srt.entrypoints.openai.serving_base import (
    Job,
    OpenAIServingBase,
    new_rids,
    openai_finish_reason,
)
from sglang.srt.parsers.reasoning_parser import STYLES, prompt_opens_reasoning
from sglang.srt.parsers.tool_constraint import tool_call_schema
from sglang.srt.parsers.tool_formats import FORMATS, resolve_format


class OpenAIServingChat(OpenAIServingBase):
    request_model = ChatCompletionRequest
    id_prefix = "chatcmpl-"

    def prepare(self, req: ChatCompletionRequest, job_id: str, model: str) -> Job:
        if req.top_logprobs and not req.logprobs:
            raise ApiError(400, "top_logprobs requires logprobs to be true.", "top_logprobs")
        choice = req.effective_tool_choice()
        _check_tool_choice(req, choice)
        # prepare() runs in one of the preparer's threads: use that thread's tokenizer.
        tok = self.tm.preparer.thread_tokenizer()
        prompt = render_chat_prompt(
            tok, req.messages, self.tm.preparer.check_chars, req.tools, req.chat_template_kwargs
        )
        sp = build_sampling_params(req, req.max_new_tokens())
        plan = self._plan(req, choice, prompt, tok)
        if choice == "required" or isinstance(choice, NamedToolChoice):
            _constrain_to_calls(req, choice, sp)
        rids = new_rids(1)
        obj = GenerateReqInput(
            input_ids=prompt.input_ids,
            sampling_params=sp,
            stream=req.stream,
            return_logprob=req.logprobs,
            top_logprobs_num=(req.top_logprobs or 0) if req.logprobs else 0,
            return_text_in_logprobs=True,
            rid=rids[0],
        )
        job = Job(req=req, obj=obj, choices=Choices(rids, req.n), model=model, id=job_id)
        job.extra["plan"] = plan
        job.extra["shapers"] = {}
        return job

    def _plan(
        self, req: ChatCompletionRequest, choice: Any, prompt: RenderedPrompt, tok: Any
    ) -> ChatOutputPlan:
        args = self.state.server_args
        names = [t.function.name for t in req.tools or []]
        fmt = None
        if choice == "auto" and req.tools:
            fmt = resolve_format(args.tool_call_parser, template_text(tok))
        elif choice == "required" or isinstance(choice, NamedToolChoice):
            fmt = FORMATS["json_array"]
        one = isinstance(choice, NamedToolChoice) or not req.parallel_tool_calls
        style = STYLES[args.reasoning_parser] if args.reasoning_parser else None
        if style is not None and not req.separate_reasoning:
            style = None
        return ChatOutputPlan(
            tool_format=fmt,
            tool_names=names,
            max_calls=1 if one else 0,
            reasoning=style,
            starts_in_reasoning=bool(
                style and (style.starts_in_reasoning or prompt_opens_reasoning(prompt.text, style))
            ),
            stream_reasoning=req.stream_reasoning,
        )

    def _shaper(self, job: Job, index: int) -> ChoiceShaper:
        shapers: Dict[int, ChoiceShaper] = job.extra["shapers"]
        if index not in shapers:
            shapers[index] = ChoiceShaper(job.extra["plan"])
        return shapers[index]

    def _logprobs(
        self, job: Job, lps: List[Any], tops: Optional[List[Any]]
    ) -> Optional[Dict[str, Any]]:
        if not job.req.logprobs:
            return None
        return {"content": chat_logprobs(lps, tops if job.req.top_logprobs else None)}

    def _count_reasoning(self, job: Job, st: ChoiceState, shaper: ChoiceShaper) -> None:
        if job.extra["plan"].reasoning is not None:
            # On the event loop: the manager's own tokenizer (the preparer's are per thread).
            st.reasoning_tokens = shaper.reasoning_tokens(self.tm.tokenizer.decode)

    # ------------------------------------------------------------------ non-stream
    def make_choice(self, job: Job, st: ChoiceState, result: Dict[str, Any]) -> Dict[str, Any]:
        meta = result["meta_info"]
        fr = meta.get("finish_reason")
        plan: ChatOutputPlan = job.extra["plan"]
        shaper = self._shaper(job, st.index)
        shaper.observe_ids(result.get("output_ids") or [])
        msg = shaper.message(result["text"])
        self._count_reasoning(job, st, shaper)
        return {
            "index": st.index,
            "message": msg.message_dict()
            if not plan.plain
            else {"role": "assistant", "content": result["text"]},
            "logprobs": self._logprobs(
                job, meta.get("output_token_logprobs") or [], meta.get("output_top_logprobs")
            ),
            "finish_reason": shaped_finish_reason(openai_finish_reason(fr), bool(msg.tool_calls)),
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
        plan: ChatOutputPlan = job.extra["plan"]
        if plan.plain:
            delta = {"content": d.text} if d.text else {}
        else:
            shaper = self._shaper(job, i)
            shaper.observe_ids(d.new_ids)
            delta = shaper.feed(d.text, final=finish is not None).delta_dict()
            finish = shaped_finish_reason(finish, shaper.called())
            if finish is not None:
                self._count_reasoning(job, d.state, shaper)
        if delta or d.logprobs or finish is not None:
            lp = self._logprobs(job, d.logprobs, d.top_logprobs) if d.logprobs else None
            choice: Dict[str, Any] = {
                "index": i,
                "delta": delta,
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


def _check_tool_choice(req: ChatCompletionRequest, choice: Any) -> None:
    names = [t.function.name for t in req.tools or []]
    if choice == "required" or isinstance(choice, NamedToolChoice):
        if not names:
            raise ApiError(400, "tool_choice requires `tools`.", "tool_choice")
    if isinstance(choice, NamedToolChoice) and choice.function.name not in names:
        raise ApiError(
            400,
            f"tool_choice names {choice.function.name!r}, which is not among the tools.",
            "tool_choice",
        )


def _constrain_to_calls(req: ChatCompletionRequest, choice: Any, sp: Dict[str, Any]) -> None:
    clash = [k for k in CONSTRAINT_FIELDS if sp.get(k) is not None]
    if clash:
        raise ApiError(
            400,
            f"tool_choice {'required' if choice == 'required' else 'naming a function'} "
            f"already constrains the output; it cannot be combined with {clash[0]}.",
            "tool_choice",
        )
    tools = [(t.function.name, t.function.parameters) for t in req.tools or []]
    only = choice.function.name if isinstance(choice, NamedToolChoice) else None
    sp["json_schema"] = json.dumps(tool_call_schema(tools, only, req.parallel_tool_calls))
