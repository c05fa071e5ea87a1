"""TokenizerManager: the HTTP-side half of every request.

It tokenizes and validates, registers a ReqState (a list of outputs plus an asyncio.Event), sends the
request to the scheduler, and turns the detokenizer's text deltas back into per-request results.
Outputs are appended on put and coalesced on get: a slow reader only grows its own list, and
wake-ups are issued in groups of batch_notify_size with a yield between groups.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Dict, List, Optional

import zmq
import zmq.asyncio

from sglang.srt.managers.generate_input import GenerateReqInput
from sglang.srt.managers.io_struct import (
    AbortReq,
    BatchStrOutput,
    BatchTokenIDOutput,
    DetokenizerError,
    FlushCacheReqInput,
    FlushCacheReqOutput,
    GetInternalStateReq,
    GetInternalStateReqOutput,
    SchedulerMetrics,
    SchedulerReady,
    TokenizedGenerateReqInput,
    map_common,
)
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.srt.server_args import PortArgs, ServerArgs
from sglang.srt.utils.hf_tokenizer import get_tokenizer
from sglang.srt.utils.ipc import dumps, loads, make_socket

logger = logging.getLogger(__name__)

BACKLOG_WARNING = 20
WAIT_TIMEOUT_S = 4.0


class GenerateError(Exception):
    """A request that failed with an HTTP status other than 400 (503 overload, 500 internal)."""

    def __init__(self, status_code: int, message: str):
        super().__init__(message)
        self.status_code = status_code
        self.message = message


@dataclass
class ReqState:
    obj: Dict[str, Any]
    stream: bool
    out_list: List[Dict[str, Any]] = field(default_factory=list)
    finished: bool = False
    event: asyncio.Event = field(default_factory=asyncio.Event)
    created_time: float = field(default_factory=time.time)
    text: str = ""
    output_ids: List[int] = field(default_factory=list)
    input_token_logprobs: List[Any] = field(default_factory=list)
    input_top_logprobs: List[Any] = field(default_factory=list)
    output_token_logprobs: List[Any] = field(default_factory=list)
    output_top_logprobs: List[Any] = field(default_factory=list)
    first_token_time: Optional[float] = None
    last_chunk_time: Optional[float] = None
    error: Optional[GenerateError] = None


class TokenizerManager:
    def __init__(self, server_args: ServerArgs, port_args: PortArgs, ready: SchedulerReady):
        self.server_args = server_args
        self.port_args = port_args
        self.ready = ready
        self.context_len = ready.context_len
        self.max_req_input_len = ready.max_req_input_len
        self.vocab_size = ready.vocab_size
        self.model_path = server_args.model_path
        self.tokenizer = (
            None
            if server_args.skip_tokenizer_init
            else get_tokenizer(
                server_args.tokenizer_path or server_args.model_path,
                server_args.trust_remote_code,
                server_args.chat_template,
            )
        )
        self.rid_to_state: Dict[str, ReqState] = {}
        self.ctx = zmq.asyncio.Context(2)
        self.recv_from_detokenizer = make_socket(self.ctx, zmq.PULL, port_args.tokenizer_ipc_name, True)
        self.send_to_scheduler = make_socket(self.ctx, zmq.PUSH, port_args.scheduler_input_ipc_name, False)
        self._control_waiters: Dict[type, List[asyncio.Future]] = {}
        self._loop_task: Optional[asyncio.Task] = None
        self.dead_message: Optional[str] = None
        self.grammar_validator = None
        self.metrics = None
        self.num_aborted = 0

    # ------------------------------------------------------------------ plumbing
    def start(self) -> None:
        """Start the receive loop on the running event loop (idempotent)."""
        if self._loop_task is None:
            self._loop_task = asyncio.get_running_loop().create_task(self.handle_loop())

    async def _send(self, obj: Any) -> None:
        await self.send_to_scheduler.send(dumps(obj, self.server_args.ipc_serializer))

    async def handle_loop(self) -> None:
        while True:
            data = await self.recv_from_detokenizer.recv()
            obj = loads(data, self.server_args.ipc_serializer)
            try:
                if isinstance(obj, BatchTokenIDOutput):  # --skip-tokenizer-init: ids straight from the scheduler
                    obj = _ids_only(obj)
                if isinstance(obj, BatchStrOutput):
                    await self._handle_batch_output(obj)
                elif isinstance(obj, SchedulerMetrics):
                    if self.metrics is not None:
                        self.metrics.on_scheduler_metrics(obj.values)
                elif isinstance(obj, DetokenizerError):
                    for rid in obj.rids:
                        self._fail(rid, GenerateError(500, obj.message))
                elif isinstance(obj, (FlushCacheReqOutput, GetInternalStateReqOutput)):
                    waiters = self._control_waiters.get(type(obj), [])
                    if waiters:
                        fut = waiters.pop(0)
                        if not fut.done():
                            fut.set_result(obj)
                else:
                    logger.warning("TokenizerManager got an unexpected %s", type(obj).__name__)
            except Exception:
                logger.exception("Error while handling %s", type(obj).__name__)

    def _fail(self, rid: str, err: GenerateError) -> None:
        st = self.rid_to_state.pop(rid, None)
        if st is None:
            return
        st.error = err
        st.finished = True
        st.event.set()

    def fail_all(self, message: str) -> None:
        """A process died: every waiting client gets an error instead of hanging."""
        self.dead_message = message
        for rid in list(self.rid_to_state):
            self._fail(rid, GenerateError(500, message))

    # ------------------------------------------------------------------ outputs
    async def _handle_batch_output(self, out: BatchStrOutput) -> None:
        pending: Dict[str, ReqState] = {}
        n = self.server_args.batch_notify_size
        for i, rid in enumerate(out.rids):
            st = self.rid_to_state.get(rid)
            if st is None:
                continue  # aborted or already answered
            d = self._build_output(st, out, i)
            finished = out.finished_reasons[i] is not None
            if finished:
                st.finished = True
                del self.rid_to_state[rid]
                if self.metrics is not None:
                    self.metrics.on_finish(st, d)
            if st.stream or finished:
                st.out_list.append(d)
                pending[rid] = st
            if len(pending) >= n:
                for s in pending.values():
                    s.event.set()
                pending = {}
                await asyncio.sleep(0)
        for s in pending.values():
            s.event.set()

    def _build_output(self, st: ReqState, out: BatchStrOutput, i: int) -> Dict[str, Any]:
        now = time.time()
        delta_text = out.output_strs[i]
        delta_ids = out.output_ids[i] or []
        st.text += delta_text
        st.output_ids.extend(delta_ids)
        if delta_ids and st.first_token_time is None:
            st.first_token_time = now
        obj = st.obj
        meta: Dict[str, Any] = {
            "id": obj["rid"],
            "finish_reason": out.finished_reasons[i],
            "prompt_tokens": out.prompt_tokens[i],
            "completion_tokens": out.completion_tokens[i],
            "cached_tokens": out.cached_tokens[i],
            "num_retractions": out.retraction_counts[i],
        }
        if obj["return_logprob"]:
            self._add_logprobs(st, out, i, meta)
        if self.server_args.enable_metrics:
            meta["queue_time"] = out.queue_times[i]
            meta["first_token_latency"] = (st.first_token_time - st.created_time) if st.first_token_time else None
        if out.finished_reasons[i] is not None:
            meta["e2e_latency"] = now - st.created_time
        incremental = st.stream and self.server_args.incremental_streaming_output
        if self.metrics is not None:
            self.metrics.on_chunk(st, len(delta_ids), now)
        st.last_chunk_time = now
        return {
            "text": delta_text if incremental else st.text,
            "output_ids": list(delta_ids) if incremental else list(st.output_ids),
            "meta_info": meta,
        }

    def _add_logprobs(self, st: ReqState, out: BatchStrOutput, i: int, meta: Dict[str, Any]) -> None:
        with_text = st.obj.get("return_text_in_logprobs", False)
        if out.input_token_logprobs[i]:
            st.input_token_logprobs = self._lp_entries(out.input_token_logprobs[i], with_text)
            if out.input_top_logprobs[i] is not None:
                st.input_top_logprobs = [self._top_entries(x, with_text) for x in out.input_top_logprobs[i]]
        if out.output_token_logprobs[i]:
            st.output_token_logprobs.extend(self._lp_entries(out.output_token_logprobs[i], with_text))
        if out.output_top_logprobs[i]:
            st.output_top_logprobs.extend(self._top_entries(x, with_text) for x in out.output_top_logprobs[i])
        meta["input_token_logprobs"] = st.input_token_logprobs
        meta["output_token_logprobs"] = st.output_token_logprobs
        meta["output_token_logprobs_length"] = len(st.output_token_logprobs)
        if st.obj["top_logprobs_num"] > 0:
            meta["input_top_logprobs"] = st.input_top_logprobs
            meta["output_top_logprobs"] = st.output_top_logprobs

    def _lp_entries(self, pairs: List[Any], with_text: bool) -> List[List[Any]]:
        return [[lp, tid, self._tok_text(tid) if with_text else None] for lp, tid in pairs]

    def _top_entries(self, pairs: Optional[List[Any]], with_text: bool) -> Optional[List[List[Any]]]:
        if pairs is None:
            return None
        return [[lp, tid, self._tok_text(tid) if with_text else None] for lp, tid in pairs]

    def _tok_text(self, tid: int) -> Optional[str]:
        return self.tokenizer.decode([tid]) if self.tokenizer is not None else None

    # ------------------------------------------------------------------ requests
    async def generate_request(self, obj: GenerateReqInput, request: Any = None) -> AsyncIterator[Any]:
        """Yields result dicts: cumulative chunks then the final one (stream), or one final result
        (a list for batch input). Raises ValueError (-> 400) or GenerateError."""
        received = time.time()  # latency clocks start here, before tokenizing and grammar compiles
        if self.dead_message:
            raise GenerateError(503, self.dead_message)
        obj.normalize()
        items = [obj.item(i) for i in range(obj.batch_size)]
        prepared = [self._prepare(it, obj, received) for it in items]  # all validated before any is sent
        for p in prepared:
            await self._validate_grammar(p["sp"])
        expanded = await self._expand_n(prepared)
        if obj.is_single and len(expanded) == 1:
            async for out in self._run_one(expanded[0], request):
                yield out
            return
        if obj.stream:
            async for out in self._run_many_stream(expanded, request):
                yield out
            return
        results = await asyncio.gather(*[self._collect(p, request) for p in expanded], return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                for p in expanded:
                    await self.abort_request(p["rid"])
                raise r
        yield list(results)

    def _prepare(self, item: Dict[str, Any], obj: GenerateReqInput, received: float) -> Dict[str, Any]:
        sp_dict = item["sampling_params"] or {}
        sp = SamplingParams.from_dict(sp_dict)
        sp.verify(self.vocab_size)
        if item["input_ids"] is not None:
            ids = list(item["input_ids"])
        else:
            if self.tokenizer is None:
                raise ValueError("This server was started with --skip-tokenizer-init: send input_ids.")
            ids = self.tokenizer.encode(item["text"])
        self._validate_length(ids, sp, "max_new_tokens" in sp_dict and sp_dict["max_new_tokens"] is not None)
        if any(t < 0 or t >= self.vocab_size for t in ids):
            raise ValueError(f"Input token ids must be in [0, {self.vocab_size}).")
        if item["top_logprobs_num"] > self.vocab_size:
            raise ValueError(
                f"top_logprobs_num ({item['top_logprobs_num']}) is larger than the vocabulary ({self.vocab_size})."
            )
        if item["return_logprob"] and item["logprob_start_len"] > len(ids):
            raise ValueError(
                f"logprob_start_len ({item['logprob_start_len']}) is greater than the input length ({len(ids)})."
            )
        sp.normalize(self.tokenizer)
        rid = item["rid"]
        if rid in self.rid_to_state:
            raise ValueError(f"Duplicate request ID detected: {rid}")
        return {
            **item,
            "input_ids": ids,
            "sp": sp,
            "stream": obj.stream,
            "priority": obj.priority,
            "received_time": received,
            "extra_key": obj.extra_key,
            "return_text_in_logprobs": obj.return_text_in_logprobs,
            "log_metrics": obj.log_metrics,
        }

    async def _validate_grammar(self, sp: SamplingParams) -> None:
        """Compile off the event loop, so a bad schema is a 400 before anything is queued."""
        if not sp.has_grammar():
            return
        if self.grammar_validator is None:
            raise ValueError("Constrained decoding is disabled on this server.")
        err = await asyncio.get_running_loop().run_in_executor(None, self.grammar_validator, sp)
        if err:
            raise ValueError(err)

    def _validate_length(self, ids: List[int], sp: SamplingParams, explicit_max: bool) -> None:
        n = len(ids)
        if n == 0:
            raise ValueError("The input is empty.")
        if n > self.max_req_input_len:
            raise ValueError(
                f"The input ({n} tokens) is longer than the model's context length ({self.max_req_input_len} tokens)."
            )
        if explicit_max and n + sp.max_new_tokens > self.context_len:
            raise ValueError(
                f"Requested token count exceeds the model's maximum context length of {self.context_len} "
                f"tokens. You requested a total of {n + sp.max_new_tokens} tokens: {n} tokens from the input "
                f"and {sp.max_new_tokens} tokens for the completion. Please reduce the input or max_new_tokens."
            )

    async def _expand_n(self, prepared: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
        """n > 1: cache the prompt once (a prefill-only request), then fan out n copies."""
        out = []
        for p in prepared:
            n = p["sp"].n
            if n == 1:
                out.append(p)
                continue
            warm = dict(p, rid=uuid.uuid4().hex, stream=False, return_logprob=False)
            warm["sp"] = copy.copy(p["sp"])
            warm["sp"].max_new_tokens = 0
            await self._collect(warm, None)
            for k in range(n):
                c = dict(p, rid=f"{p['rid']}-{k}", index=k)
                c["sp"] = copy.copy(p["sp"])
                c["sp"].n = 1
                if c["sp"].sampling_seed is not None:
                    c["sp"].sampling_seed += k  # n samples of one seeded request must still differ
                out.append(c)
        return out

    def _register(self, p: Dict[str, Any]) -> ReqState:
        if p["rid"] in self.rid_to_state:
            raise ValueError(f"Duplicate request ID detected: {p['rid']}")
        st = ReqState(obj=p, stream=p["stream"], created_time=p.get("received_time") or time.time())
        self.rid_to_state[p["rid"]] = st
        return st

    def _tokenized(self, p: Dict[str, Any]) -> TokenizedGenerateReqInput:
        return TokenizedGenerateReqInput(
            rid=p["rid"],
            input_text=p.get("text"),
            input_ids=p["input_ids"],
            sampling_params=p["sp"],
            return_logprob=p["return_logprob"],
            logprob_start_len=p["logprob_start_len"],
            top_logprobs_num=p["top_logprobs_num"],
            stream=p["stream"],
            priority=p.get("priority"),
            extra_key=p.get("extra_key"),
            received_time=time.time(),
        )

    async def _run_one(self, p: Dict[str, Any], request: Any) -> AsyncIterator[Dict[str, Any]]:
        st = self._register(p)
        if self.metrics is not None:
            self.metrics.on_request(p)
        await self._send(self._tokenized(p))
        yielded = False
        try:
            while True:
                try:
                    await asyncio.wait_for(st.event.wait(), timeout=WAIT_TIMEOUT_S)
                except asyncio.TimeoutError:
                    if request is not None and await request.is_disconnected():
                        await self.abort_request(p["rid"])
                        raise ValueError(f"Client disconnected; request {p['rid']} aborted.") from None
                    continue
                out_list, st.out_list = st.out_list, []
                finished = st.finished
                st.event.clear()
                if st.error is not None:
                    raise st.error
                if not out_list:
                    if finished:
                        return
                    continue
                out = self._coalesce(out_list, p["rid"]) if st.stream else out_list[-1]
                if "index" in p:
                    out["index"] = p["index"]
                if finished:
                    self._raise_for_abort(out, yielded)
                if st.stream or finished:
                    yielded = True
                    yield out
                if finished:
                    return
        finally:
            if not st.finished:
                # The consumer went away (client disconnect, cancelled task): free the request.
                await self.abort_request(p["rid"])

    def _coalesce(self, out_list: List[Dict[str, Any]], rid: str) -> Dict[str, Any]:
        if len(out_list) >= BACKLOG_WARNING:
            logger.warning(
                "Streaming backlog: rid=%s, coalescing %d queued chunks into one. "
                "This may inflate P99 ITL for affected requests.",
                rid,
                len(out_list),
            )
        if len(out_list) == 1 or not self.server_args.incremental_streaming_output:
            return out_list[-1]  # cumulative chunks: the last one holds everything
        last = dict(out_list[-1])
        last["text"] = "".join(o["text"] for o in out_list)
        last["output_ids"] = [t for o in out_list for t in o["output_ids"]]
        return last

    @staticmethod
    def _raise_for_abort(out: Dict[str, Any], yielded: bool) -> None:
        fr = out["meta_info"].get("finish_reason") or {}
        if fr.get("type") != "abort":
            return
        status = fr.get("status_code")
        msg = fr.get("message") or "Request aborted."
        if status == 400 and not yielded:
            raise ValueError(msg)
        if status in (500, 503) and not yielded:
            raise GenerateError(status, msg)

    async def _collect(self, p: Dict[str, Any], request: Any) -> Dict[str, Any]:
        last = None
        async for out in self._run_one(dict(p, stream=False), request):
            last = out
        return last

    async def _run_many_stream(self, ps: List[Dict[str, Any]], request: Any) -> AsyncIterator[Dict[str, Any]]:
        queue: asyncio.Queue = asyncio.Queue()

        async def pump(i: int, p: Dict[str, Any]) -> None:
            try:
                async for out in self._run_one(dict(p, index=p.get("index", i)), request):
                    await queue.put(out)
            except BaseException as e:  # noqa: BLE001
                await queue.put(e)
            finally:
                await queue.put(None)

        tasks = [asyncio.create_task(pump(i, p)) for i, p in enumerate(ps)]
        done = 0
        try:
            while done < len(tasks):
                item = await queue.get()
                if item is None:
                    done += 1
                elif isinstance(item, BaseException):
                    raise item
                else:
                    yield item
        finally:
            for t in tasks:
                t.cancel()

    # ------------------------------------------------------------------ control
    async def abort_request(self, rid: str = "", abort_all: bool = False) -> None:
        if not abort_all and rid not in self.rid_to_state:
            return  # already finished: aborting late is a no-op
        self.num_aborted += 1
        await self._send(AbortReq(rid=rid, abort_all=abort_all))

    async def _control(self, req: Any, reply_type: type, timeout: float = 30.0) -> List[Any]:
        """Send a control message; every data-parallel replica answers once."""
        loop = asyncio.get_running_loop()
        futs = [loop.create_future() for _ in range(self.server_args.dp_size)]
        self._control_waiters.setdefault(reply_type, []).extend(futs)
        await self._send(req)
        return list(await asyncio.wait_for(asyncio.gather(*futs), timeout))

    async def flush_cache(self) -> FlushCacheReqOutput:
        outs = await self._control(FlushCacheReqInput(), FlushCacheReqOutput)
        ok = all(o.success for o in outs)
        return FlushCacheReqOutput(ok, next((o.message for o in outs if o.success != ok), outs[0].message))

    async def get_internal_state(self) -> Dict[str, Any]:
        states = [o.state for o in await self._control(GetInternalStateReq(), GetInternalStateReqOutput)]
        if len(states) == 1:
            return states[0]
        merged = dict(states[0])
        for key in (
            "num_running_reqs",
            "num_waiting_reqs",
            "available_tokens",
            "evictable_tokens",
            "protected_tokens",
            "prefill_input_tokens_total",
            "prefill_cached_tokens_total",
            "num_retractions_total",
            "num_decode_steps",
            "max_total_num_tokens",
            "last_gen_throughput",
        ):
            merged[key] = sum(st[key] for st in states)
        merged["dp_states"] = sorted(states, key=lambda st: st["dp_rank"])
        return merged

    async def close(self) -> None:
        if self._loop_task is not None:
            self._loop_task.cancel()
            try:
                await self._loop_task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
        self.recv_from_detokenizer.close()
        self.send_to_scheduler.close()

    def num_running(self) -> int:
        return len(self.rid_to_state)


def _ids_only(msg: BatchTokenIDOutput) -> BatchStrOutput:
    """A scheduler message as the detokenizer would forward it, with no text (no tokenizer)."""
    n = len(msg.rids)

    def each(lst):
        return list(lst) if lst else [None] * n

    return BatchStrOutput(**map_common(msg, each), output_strs=[""] * n)
