"""The request flow shared by /v1/completions and /v1/chat/completions.

parse and validate -> check the model name -> build one native GenerateReqInput -> run it through
the TokenizerManager -> shape the result (one response, or SSE chunks then [DONE]).

Streams follow the native route's rule: the first native chunk is awaited before the 200 goes out,
so a bad request (empty prompt, bad schema, too many tokens, queue full) gets a real status code.
A stream that ends early (client gone, error) aborts every sub-request that has not finished.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Dict, List, Optional, Set, Type

from fastapi import Request
from fastapi.responses import Response
from pydantic import BaseModel

from sglang.srt.core.finish_reason import FinishAbort, FinishReason
from sglang.srt.core.generate_input import GenerateReqInput
from sglang.srt.entrypoints.errors import ApiError, error_response, stream_error_event, to_api_error
from sglang.srt.entrypoints.openai.choices import Choices, ChoiceState, Delta
from sglang.srt.entrypoints.openai.serving_models import ModelRegistry
from sglang.srt.entrypoints.server_state import (
    ServerState,
    json_response,
    read_json,
    sse,
    start_stream,
)
from sglang.srt.entrypoints.streaming import ServerStream
from sglang.srt.managers.tokenizer.request_state import GenerateError
from sglang.srt.managers.tokenizer.tokenizer_manager import TokenizerManager

logger = logging.getLogger(__name__)

_DONE = b"data: [DONE]\n\n"

# Abort tasks spawned while a stream is torn down; held so they are not garbage-collected early.
_pending_aborts: Set[asyncio.Task] = set()


@dataclass
class Job:
    """One OpenAI request turned into one native request, plus what shaping the answer needs."""

    req: Any
    obj: GenerateReqInput
    choices: Choices
    model: str
    id: str
    created: int = field(default_factory=lambda: int(time.time()))
    extra: Dict[str, Any] = field(default_factory=dict)


def openai_finish_reason(fr: Optional[Dict[str, Any]]) -> Optional[str]:
    """stop / length; an abort is never a finish reason here, it is an error."""
    reason = FinishReason.from_wire(fr)
    if reason is None:
        return None
    if isinstance(reason, FinishAbort):
        raise ApiError(int(reason.status_code or 500), reason.message or "The request was aborted.")
    return reason.openai_reason


def new_rids(count: int) -> List[str]:
    base = uuid.uuid4().hex
    return [base] if count == 1 else [f"{base}-p{i}" for i in range(count)]


class OpenAIServingBase:
    request_model: Type[BaseModel]
    id_prefix: str

    def __init__(self, state: ServerState, models: ModelRegistry):
        self.state = state
        self.models = models

    @property
    def tm(self) -> TokenizerManager:
        return self.state.tm

    # ------------------------------------------------------------------ hooks
    def prepare(self, req: Any, job_id: str, model: str) -> Job:
        raise NotImplementedError

    def make_choice(self, job: Job, st: ChoiceState, result: Dict[str, Any]) -> Dict[str, Any]:
        raise NotImplementedError

    def make_response(
        self, job: Job, choices: List[Dict[str, Any]], usage: Dict[str, Any]
    ) -> Dict[str, Any]:
        raise NotImplementedError

    def stream_chunks(self, job: Job, d: Delta, finish: Optional[str]) -> List[Dict[str, Any]]:
        """Chunks for one choice's update (may be empty when there is nothing new to say)."""
        raise NotImplementedError

    def chunk_envelope(self, job: Job, choices: List[Dict[str, Any]]) -> Dict[str, Any]:
        raise NotImplementedError

    # ------------------------------------------------------------------ flow
    async def handle(self, request: Request) -> Response:
        try:
            body = await read_json(request)
            # Validating, rendering and tokenizing cost time in proportion to the body: off the event loop.
            preparer = self.tm.preparer
            req = await preparer.run(self.request_model.model_validate, body)
            model = self.models.resolve(req.model)
            job = await preparer.run(
                self.prepare, req, f"{self.id_prefix}{uuid.uuid4().hex}", model
            )
            gen = self.tm.generate_request(job.obj, request)
            if not req.stream:
                return json_response(await self._complete(job, gen))
            first = await start_stream(gen)
        except Exception as e:  # noqa: BLE001 - every failure before the 200 becomes an OpenAI error
            return error_response(self._report(e))
        return ServerStream(
            self._stream(job, gen, first), self.state.server_args.slow_consumer_timeout
        )

    def _report(self, e: BaseException) -> ApiError:
        err = to_api_error(e)
        if not isinstance(e, (ApiError, ValueError, GenerateError)):
            logger.exception("OpenAI route failed", exc_info=e)
        return err

    async def _complete(self, job: Job, gen: AsyncIterator[Any]) -> Dict[str, Any]:
        result = None
        async for out in gen:
            result = out
        results = result if isinstance(result, list) else [result]
        choices = []
        for st, r in job.choices.iter_results(results):
            openai_finish_reason(r["meta_info"].get("finish_reason"))  # raises on abort
            job.choices.record_finish(st, r["meta_info"])
            choices.append(self.make_choice(job, st, r))
        usage = job.choices.usage(self.state.server_args.enable_cache_report)
        return self.make_response(job, choices, usage)

    async def _stream(self, job: Job, gen: AsyncIterator[Any], first: Any) -> AsyncIterator[bytes]:
        incremental = self.state.server_args.incremental_streaming_output
        try:
            out = first
            while out is not None:
                d = job.choices.delta(out, incremental)
                finish = openai_finish_reason(d.finish_reason)
                if finish is not None:
                    job.choices.record_finish(d.state, d.meta)
                for choice in self.stream_chunks(job, d, finish):
                    chunk = self.chunk_envelope(job, [choice])
                    if job.req.include_usage():
                        chunk["usage"] = None  # OpenAI: every chunk but the last has a null usage
                    yield sse(chunk)
                out = None if job.choices.all_finished() else await _next_or_none(gen)
            if not job.choices.all_finished():
                raise ApiError(500, "The stream ended before every choice finished.")
            if job.req.include_usage():
                chunk = self.chunk_envelope(job, [])
                chunk["usage"] = job.choices.usage(self.state.server_args.enable_cache_report)
                yield sse(chunk)
        except Exception as e:  # noqa: BLE001 - after the 200 an error can only be an SSE event
            yield stream_error_event(self._report(e))
        finally:
            if not job.choices.all_finished():
                # Client gone or error: free every unfinished sub-request. The aborts run as their
                # own tasks because this generator may be inside a cancelled scope.
                for rid in job.choices.rids():
                    t = asyncio.ensure_future(self.tm.abort_request(rid))
                    _pending_aborts.add(t)
                    t.add_done_callback(_pending_aborts.discard)
            await gen.aclose()
        yield _DONE


async def _next_or_none(gen: AsyncIterator[Any]) -> Any:
    try:
        return await gen.__anext__()
    except StopAsyncIteration:
        return None
