"""TokenizerManager: the HTTP-side half of every request.

It checks and tokenizes a request (in a thread pool, request_preparer.py), registers a ReqState
(request_state.py), sends it to the scheduler, and turns the detokenizer's text deltas back into
results. Outputs are coalesced on arrival, so a slow reader holds one unread chunk at most; wake-ups
are issued in groups of batch_notify_size with a yield between groups. A stream whose reader stops
reading is aborted after --slow-consumer-timeout, and on shutdown running requests get
--graceful-shutdown-timeout to finish before the rest are aborted.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import functools
import logging
import time
import uuid
from typing import Any, AsyncIterator, Dict, List, Optional, Tuple, Union

import zmq
import zmq.asyncio

from sglang.srt.core.finish_reason import FinishAbort, FinishReason
from sglang.srt.core.generate_input import GenerateReqInput
from sglang.srt.core.input_limits import InputLimits
from sglang.srt.core.io_struct.batch_output import map_common
from sglang.srt.core.io_struct.ipc import dumps, loads, make_socket
from sglang.srt.core.io_struct.to_detokenizer import BatchTokenIDOutput
from sglang.srt.core.io_struct.to_launcher import SchedulerReady
from sglang.srt.core.io_struct.to_scheduler import (
    AbortReq,
    ContinueGenerationReqInput,
    DestroyWeightsUpdateGroupReqInput,
    FlushCacheReqInput,
    GetInternalStateReq,
    GetWeightsByNameReqInput,
    InitWeightsUpdateGroupReqInput,
    PauseGenerationReqInput,
    ProfileReq,
    ReleaseMemoryOccupationReqInput,
    ResumeMemoryOccupationReqInput,
    TokenizedGenerateReqInput,
    UpdateWeightFromDiskReqInput,
    UpdateWeightsFromDistributedReqInput,
    UpdateWeightsFromTensorReqInput,
)
from sglang.srt.core.io_struct.to_tokenizer import (
    UPDATE_REPLIES,
    BatchStrOutput,
    ContinueGenerationReqOutput,
    DestroyWeightsUpdateGroupReqOutput,
    DetokenizerError,
    FlushCacheReqOutput,
    GetInternalStateReqOutput,
    GetWeightsByNameReqOutput,
    InitWeightsUpdateGroupReqOutput,
    PauseGenerationReqOutput,
    ProfileReqOutput,
    ReleaseMemoryOccupationReqOutput,
    ResumeMemoryOccupationReqOutput,
    SchedulerMetrics,
)
from sglang.srt.managers.tokenizer.prompt_break_report import describe_prompt_break
from sglang.srt.managers.tokenizer.request_preparer import PreparedReq, RequestPreparer
from sglang.srt.managers.tokenizer.request_state import GenerateError, ReqState
from sglang.srt.server_args import DETERMINISTIC_DEFAULT_SEED, PortArgs, ServerArgs
from sglang.srt.utils.hf_tokenizer import get_tokenizer

__all__ = ["GenerateError", "TokenizerManager"]

logger = logging.getLogger(__name__)

BACKLOG_WARNING = 20
WAIT_TIMEOUT_S = 4.0
SWEEP_INTERVAL_S = 1.0
LOGGED_TEXT_CHARS = 256
# Replies to control messages, each matched to the oldest waiter of its type.
CONTROL_REPLIES = (
    FlushCacheReqOutput,
    GetInternalStateReqOutput,
    PauseGenerationReqOutput,
    ContinueGenerationReqOutput,
    ProfileReqOutput,
    InitWeightsUpdateGroupReqOutput,
    DestroyWeightsUpdateGroupReqOutput,
    GetWeightsByNameReqOutput,
    ReleaseMemoryOccupationReqOutput,
    ResumeMemoryOccupationReqOutput,
)
CONTROL_REPLIES += tuple(UPDATE_REPLIES.values())
WeightUpdateReq = Union[
    UpdateWeightFromDiskReqInput,
    UpdateWeightsFromTensorReqInput,
    UpdateWeightsFromDistributedReqInput,
]


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
        limits = InputLimits.compute(ready.context_len, ready.max_total_num_tokens)
        self.preparer = RequestPreparer(
            self.tokenizer,
            limits,
            self.vocab_size,
            min(server_args.max_top_logprobs_num, self.vocab_size),
            server_args.tokenizer_worker_num,
        )
        self.rid_to_state: Dict[str, ReqState] = {}
        self.ctx = zmq.asyncio.Context(2)
        self.recv_from_detokenizer = make_socket(
            self.ctx, zmq.PULL, port_args.tokenizer_ipc_name, True
        )
        self.send_to_scheduler = make_socket(
            self.ctx, zmq.PUSH, port_args.scheduler_input_ipc_name, False
        )
        self._control_waiters: Dict[type, List[asyncio.Future]] = {}
        self._tasks: List[asyncio.Task] = []
        self.dead_message: Optional[str] = None
        self.closing_message: Optional[str] = None
        self.grammar_validator = None
        self.metrics = None
        self.num_aborted = 0
        self.weight_version = server_args.weight_version

    # ------------------------------------------------------------------ plumbing
    def start(self) -> None:
        """Start the receive loop and the stalled-stream sweep on the running event loop (idempotent)."""
        if not self._tasks:
            loop = asyncio.get_running_loop()
            self._tasks = [
                loop.create_task(self.handle_loop()),
                loop.create_task(self._sweep_loop()),
            ]

    async def _send(self, obj: Any) -> None:
        await self.send_to_scheduler.send(dumps(obj, self.server_args.ipc_serializer))

    async def handle_loop(self) -> None:
        while True:
            data = await self.recv_from_detokenizer.recv()
            obj = loads(data, self.server_args.ipc_serializer)
            try:
                if isinstance(
                    obj, BatchTokenIDOutput
                ):  # --skip-tokenizer-init: ids straight from the scheduler
                    obj = _ids_only(obj)
                if isinstance(obj, BatchStrOutput):
                    await self._handle_batch_output(obj)
                elif isinstance(obj, SchedulerMetrics):
                    if self.metrics is not None:
                        self.metrics.on_scheduler_metrics(obj.values)
                elif isinstance(obj, DetokenizerError):
                    for rid in obj.rids:
                        self._fail(rid, GenerateError(500, obj.message))
                elif isinstance(obj, CONTROL_REPLIES):
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
        if st is not None:
            st.fail(err)

    def fail_all(self, message: str) -> None:
        """A process died: every waiting client gets an error instead of hanging."""
        self.dead_message = message
        for rid in list(self.rid_to_state):
            self._fail(rid, GenerateError(500, message))

    # ------------------------------------------------------------------ outputs
    async def _handle_batch_output(self, out: BatchStrOutput) -> None:
        pending: Dict[str, ReqState] = {}
        n = self.server_args.batch_notify_size
        on_chunk = self.metrics.on_chunk if self.metrics is not None else None
        for i, rid in enumerate(out.rids):
            st = self.rid_to_state.get(rid)
            if st is None:
                continue  # aborted or already answered
            pb = out.prompt_breaks[i] if out.prompt_breaks else None
            if pb is not None:
                decode = self._decode_ids if self.tokenizer is not None else None
                st.prompt_break = describe_prompt_break(pb, st.req.input_ids, decode)
            finished = st.apply(
                out,
                i,
                self.server_args.enable_metrics,
                self._tok_text,
                on_chunk,
                self.weight_version,
            )
            if finished:
                del self.rid_to_state[rid]
                if self.metrics is not None:
                    self.metrics.on_finish(st, {"meta_info": st.final_meta})
                self._log_finished(st)
            if st.stream or finished:
                pending[rid] = st
            if len(pending) >= n:
                for s in pending.values():
                    s.event.set()
                pending = {}
                await asyncio.sleep(0)
        for s in pending.values():
            s.event.set()

    @functools.lru_cache(maxsize=1 << 16)  # noqa: B019 - one manager per process; ids are a bounded set
    def _tok_text(self, tid: int) -> Optional[str]:
        return self.tokenizer.decode([tid]) if self.tokenizer is not None else None

    def _decode_ids(self, ids: List[int]) -> str:
        return self.tokenizer.decode(ids)

    def _log_finished(self, st: ReqState) -> None:
        if not self.server_args.log_requests or st.req.no_logs:
            return
        meta = st.final_meta or {}
        text = st.text if len(st.text) <= LOGGED_TEXT_CHARS else st.text[:LOGGED_TEXT_CHARS] + "..."
        logger.info(
            "Finish: rid=%s, prompt_tokens=%s, completion_tokens=%s, cached_tokens=%s, finish_reason=%s, text=%r",
            st.rid,
            meta.get("prompt_tokens"),
            meta.get("completion_tokens"),
            meta.get("cached_tokens"),
            meta.get("finish_reason"),
            text,
        )

    # ------------------------------------------------------------------ requests
    async def generate_request(
        self, obj: GenerateReqInput, request: Any = None
    ) -> AsyncIterator[Any]:
        """Yields result dicts: chunks then the final one (stream), or one final result (a list for
        batch input). Raises ValueError (-> 400) or GenerateError."""
        received = time.time()  # latency clocks start here, before tokenizing and grammar compiles
        if self.dead_message:
            raise GenerateError(503, self.dead_message)
        if self.closing_message:
            raise GenerateError(503, self.closing_message)
        await self.preparer.run(
            obj.normalize
        )  # type checks walk every input id: off the event loop too
        if obj.received_time is not None:
            received = min(received, float(obj.received_time))
        limit = self.server_args.max_batch_requests
        if obj.batch_size > limit:
            raise ValueError(
                f"This call has {obj.batch_size} prompts; at most {limit} are allowed (--max-batch-requests)."
            )
        prepared = await self._prepare_all(obj, received)
        total = sum(p.sp.n for p in prepared)
        if total > limit:
            raise ValueError(
                f"This call asks for {total} generations (prompts x n); at most {limit} are allowed "
                f"(--max-batch-requests)."
            )
        for p in prepared:
            await self._validate_grammar(p)
        expanded = await self._expand_n(prepared, request)
        if obj.is_single and len(expanded) == 1:
            async for out in self._run_one(expanded[0], request):
                yield out
            return
        if obj.stream:
            async for out in self._run_many_stream(expanded, request):
                yield out
            return
        results = await asyncio.gather(
            *[self._collect(p, request) for p in expanded], return_exceptions=True
        )
        for r in results:
            if isinstance(r, BaseException):
                for p in expanded:
                    await self.abort_request(p.rid)
                raise r
        yield list(results)

    async def _prepare_all(self, obj: GenerateReqInput, received: float) -> List[PreparedReq]:
        """Check and tokenize every prompt in the pool threads; all are checked before any is sent."""
        loop = asyncio.get_running_loop()
        futs = [
            loop.run_in_executor(
                self.preparer.pool, self.preparer.prepare, obj.item(i), obj, received
            )
            for i in range(obj.batch_size)
        ]
        results = await asyncio.gather(*futs, return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        for p in results:
            if p.rid in self.rid_to_state:
                raise ValueError(f"Duplicate request ID detected: {p.rid}")
        return list(results)

    async def _validate_grammar(self, p: PreparedReq) -> None:
        """Compile off the event loop, so a bad schema is a 400 before anything is queued."""
        if not p.sp.has_grammar():
            return
        if self.grammar_validator is None:
            raise ValueError("Constrained decoding is disabled on this server.")
        err = await asyncio.get_running_loop().run_in_executor(None, self.grammar_validator, p.sp)
        if err:
            raise ValueError(err)

    async def _expand_n(self, prepared: List[PreparedReq], request: Any) -> List[PreparedReq]:
        """n > 1: cache the prompt once (a prefill-only request), then fan out n copies."""
        out = []
        for p in prepared:
            if self.server_args.enable_deterministic_inference and p.sp.sampling_seed is None:
                p.sp.sampling_seed = DETERMINISTIC_DEFAULT_SEED
            n = p.sp.n
            if n == 1:
                out.append(p)
                continue
            warm_sp = copy.copy(p.sp)
            warm_sp.max_new_tokens = 0
            warm = dataclasses.replace(
                p, rid=uuid.uuid4().hex, stream=False, return_logprob=False, sp=warm_sp
            )
            await self._collect(warm, request)
            for k in range(n):
                sp = copy.copy(p.sp)
                sp.n = 1
                if sp.sampling_seed is not None:
                    sp.sampling_seed += k  # n samples of one seeded request must still differ
                out.append(dataclasses.replace(p, rid=f"{p.rid}-{k}", index=k, sp=sp))
        return out

    def _register(self, p: PreparedReq, watch_consumer: bool) -> ReqState:
        if p.rid in self.rid_to_state:
            raise ValueError(f"Duplicate request ID detected: {p.rid}")
        incremental = p.stream and self.server_args.incremental_streaming_output
        st = ReqState(
            p, incremental, watch_consumer and p.stream, created_time=p.received_time or time.time()
        )
        self.rid_to_state[p.rid] = st
        return st

    @staticmethod
    def _tokenized(p: PreparedReq) -> TokenizedGenerateReqInput:
        return TokenizedGenerateReqInput(
            rid=p.rid,
            input_ids=p.input_ids,
            sampling_params=p.sp,
            return_logprob=p.return_logprob,
            logprob_start_len=p.logprob_start_len,
            top_logprobs_num=p.top_logprobs_num,
            stream=p.stream,
            priority=p.priority,
            extra_key=p.extra_key,
            received_time=time.time(),
        )

    async def _submit(self, p: PreparedReq, request: Any) -> ReqState:
        """Register and send; anything that fails in between unregisters the request again."""
        st = self._register(p, watch_consumer=request is not None)
        try:
            if self.metrics is not None:
                self.metrics.on_request(p)
            data = dumps(self._tokenized(p), self.server_args.ipc_serializer)
        except Exception as e:  # noqa: BLE001 - whatever the encoder raises, the request must not stay registered
            self.rid_to_state.pop(p.rid, None)
            raise ValueError(
                f"The request could not be encoded for the scheduler: {type(e).__name__}: {e}"
            ) from None
        except BaseException:
            self.rid_to_state.pop(p.rid, None)
            raise
        try:
            await self.send_to_scheduler.send(data)
        except BaseException:
            self.rid_to_state.pop(p.rid, None)
            raise
        return st

    async def _run_one(self, p: PreparedReq, request: Any) -> AsyncIterator[Dict[str, Any]]:
        st = await self._submit(p, request)
        yielded = False
        try:
            while True:
                try:
                    await asyncio.wait_for(st.event.wait(), timeout=WAIT_TIMEOUT_S)
                except asyncio.TimeoutError:
                    if request is not None and not p.background and await request.is_disconnected():
                        await self.abort_request(p.rid)
                        raise ValueError(f"Client disconnected; request {p.rid} aborted.") from None
                    continue
                st.event.clear()
                if st.error is not None:
                    raise st.error
                finished = st.finished
                if st.pending_chunks >= BACKLOG_WARNING:
                    logger.warning(
                        "Streaming backlog: rid=%s, coalesced %d chunks into one. This may inflate P99 ITL "
                        "for affected requests.",
                        p.rid,
                        st.pending_chunks,
                    )
                out = st.take()
                if out is None:
                    if finished:
                        return
                    continue
                if p.index is not None:
                    out["index"] = p.index
                if finished:
                    self._raise_for_abort(out, yielded)
                yielded = True
                yield out
                if finished:
                    return
        finally:
            if not st.finished:
                # The consumer went away (client disconnect, cancelled task): free the request.
                await self.abort_request(p.rid)

    @staticmethod
    def _raise_for_abort(out: Dict[str, Any], yielded: bool) -> None:
        fr = FinishReason.from_wire(out["meta_info"].get("finish_reason"))
        if not isinstance(fr, FinishAbort):
            return
        status = fr.status_code
        msg = fr.message or "Request aborted."
        if status == 400 and not yielded:
            raise ValueError(msg)
        if status in (500, 503) and not yielded:
            raise GenerateError(status, msg)

    async def _collect(self, p: PreparedReq, request: Any) -> Dict[str, Any]:
        last = None
        async for out in self._run_one(dataclasses.replace(p, stream=False), request):
            last = out
        return last

    async def _run_many_stream(
        self, ps: List[PreparedReq], request: Any
    ) -> AsyncIterator[Dict[str, Any]]:
        queue: asyncio.Queue = asyncio.Queue()

        async def pump(i: int, p: PreparedReq) -> None:
            try:
                async for out in self._run_one(
                    dataclasses.replace(p, index=p.index if p.index is not None else i), request
                ):
                    await queue.put(out)
            except BaseException as e:  # noqa: BLE001 - handed to the consumer, which re-raises it
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

    # ------------------------------------------------------------------ stalled streams
    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_INTERVAL_S)
            try:
                await self.abort_stalled_streams()
            except Exception:
                logger.exception("Stalled-stream sweep failed")

    async def abort_stalled_streams(self) -> int:
        """Abort streams whose reader left output unread too long or let too much pile up."""
        sa, now, stalled = self.server_args, time.monotonic(), []
        for st in self.rid_to_state.values():
            if not st.watch_consumer or st.pending is None:
                continue
            if (
                now - st.last_taken > sa.slow_consumer_timeout
                or st.unread_bytes > sa.max_stream_buffer_bytes
            ):
                stalled.append(st)
        for st in stalled:
            logger.warning(
                "rid=%s: the client left %d bytes unread for %.0f s; aborting its stream.",
                st.rid,
                st.unread_bytes,
                now - st.last_taken,
            )
            await self.abort_request(st.rid)
            self._fail(
                st.rid,
                GenerateError(
                    408, "The client stopped reading the stream; the request was aborted."
                ),
            )
        return len(stalled)

    # ------------------------------------------------------------------ control
    async def abort_request(self, rid: str = "", abort_all: bool = False) -> None:
        if not abort_all and rid not in self.rid_to_state:
            return  # already finished: aborting late is a no-op
        self.num_aborted += 1
        await self._send(AbortReq(rid=rid, abort_all=abort_all))

    async def drain(self, timeout: float, message: str = "The server is shutting down.") -> int:
        """Refuse new requests, give running ones `timeout` seconds, then abort the rest (returns how many)."""
        self.closing_message = message
        deadline = time.monotonic() + timeout
        while self.rid_to_state and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        left = list(self.rid_to_state)
        if left:
            await self._send(AbortReq(abort_all=True))
            for rid in left:
                self._fail(rid, GenerateError(503, message))
        return len(left)

    async def _control(
        self, req: Any, reply_type: type, timeout: Optional[float] = 30.0
    ) -> List[Any]:
        """Send a control message; every data-parallel replica answers once."""
        loop = asyncio.get_running_loop()
        futs = [loop.create_future() for _ in range(self.server_args.dp_size)]
        self._control_waiters.setdefault(reply_type, []).extend(futs)
        await self._send(req)
        return list(await asyncio.wait_for(asyncio.gather(*futs), timeout))

    async def flush_cache(self) -> FlushCacheReqOutput:
        outs = await self._control(FlushCacheReqInput(), FlushCacheReqOutput)
        return FlushCacheReqOutput(*_verdict(outs))

    async def pause_generation(self, mode: str = "abort") -> None:
        """Returns once every replica has paused (see PauseGenerationReqInput for the modes)."""
        await self._control(PauseGenerationReqInput(mode), PauseGenerationReqOutput)

    async def continue_generation(self) -> None:
        await self._control(ContinueGenerationReqInput(), ContinueGenerationReqOutput)

    async def update_weights(
        self, req: WeightUpdateReq, weight_version: Optional[str] = None
    ) -> Tuple[bool, str]:
        """Waits for the running requests (every replica), however long loading takes; a success
        sets the weight_version label when one is given."""
        outs = await self._control(req, UPDATE_REPLIES[type(req)], timeout=None)
        ok, message = _verdict(outs)
        if ok and weight_version is not None:
            self.weight_version = weight_version
        return ok, message

    async def weights_update_group(
        self, req: Union[InitWeightsUpdateGroupReqInput, DestroyWeightsUpdateGroupReqInput]
    ) -> Tuple[bool, str]:
        """Joining waits for the trainer's side of the rendezvous (however long that takes)."""
        if isinstance(req, InitWeightsUpdateGroupReqInput):
            outs = await self._control(req, InitWeightsUpdateGroupReqOutput, timeout=None)
        else:
            outs = await self._control(req, DestroyWeightsUpdateGroupReqOutput)
        return _verdict(outs)

    async def memory_occupation(
        self, req: Union[ReleaseMemoryOccupationReqInput, ResumeMemoryOccupationReqInput]
    ) -> Tuple[bool, str]:
        """Resuming may capture the CUDA graphs again (seconds)."""
        reply = (
            ReleaseMemoryOccupationReqOutput
            if isinstance(req, ReleaseMemoryOccupationReqInput)
            else ResumeMemoryOccupationReqOutput
        )
        return _verdict(await self._control(req, reply, timeout=600.0))

    async def get_weights_by_name(self, req: GetWeightsByNameReqInput) -> GetWeightsByNameReqOutput:
        """The first replica's copy (every replica holds the same weights)."""
        return (await self._control(req, GetWeightsByNameReqOutput, timeout=120.0))[0]

    async def profile(self, req: ProfileReq) -> ProfileReqOutput:
        """Start or stop the schedulers' torch profiler (stopping writes the traces)."""
        outs = await self._control(req, ProfileReqOutput, timeout=300.0)
        return ProfileReqOutput(*_verdict(outs))

    async def get_internal_state(self) -> Dict[str, Any]:
        states = [
            o.state for o in await self._control(GetInternalStateReq(), GetInternalStateReqOutput)
        ]
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
            "num_used_tokens",
            "max_total_num_tokens",
            "last_gen_throughput",
        ):
            merged[key] = sum(st[key] for st in states)
        for key in states[0]:
            # HiCache token and byte counts add up across replicas (a usage fraction does not).
            if key.startswith(("hicache_", "cached_tokens_")) and key != "hicache_host_usage":
                merged[key] = sum(st.get(key, 0) for st in states)
        merged["dp_states"] = sorted(states, key=lambda st: st["dp_rank"])
        return merged

    async def get_load(self) -> List[Dict[str, int]]:
        """One entry per data-parallel replica, as SGLang's /get_load (what sglang-router polls)."""
        st = await self.get_internal_state()
        return [
            {
                "dp_rank": s["dp_rank"],
                "num_reqs": s["num_running_reqs"] + s["num_waiting_reqs"],
                "num_waiting_reqs": s["num_waiting_reqs"],
                "num_tokens": s["num_used_tokens"],
            }
            for s in st.get("dp_states", [st])
        ]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
        self.preparer.shutdown()
        self.recv_from_detokenizer.close()
        self.send_to_scheduler.close()

    def num_running(self) -> int:
        return len(self.rid_to_state)


def _verdict(outs: List[Any]) -> Tuple[bool, str]:
    """The replicas' answers as one: success if every one succeeded, with the message of one that
    disagrees with that (the first answer's otherwise)."""
    ok = all(o.success for o in outs)
    return ok, next((o.message for o in outs if o.success != ok), outs[0].message)


def _ids_only(msg: BatchTokenIDOutput) -> BatchStrOutput:
    """A scheduler message as the detokenizer would forward it, with no text (no tokenizer)."""
    n = len(msg.rids)

    def each(lst):
        return list(lst) if lst else [None] * n

    return BatchStrOutput(**map_common(msg, each), output_strs=[""] * n)
