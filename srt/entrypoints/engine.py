"""Engine: the runtime in-process. Same scheduler and detokenizer processes as the server; the
TokenizerManager runs on an event loop in a background thread of the caller's process, so the
Engine can be called from plain code, from threads (the frontend's run_batch), or from asyncio."""

from __future__ import annotations

import asyncio
import atexit
import logging
import threading
from typing import Any, AsyncIterator, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import torch

from sglang.srt.core.generate_input import GenerateReqInput
from sglang.srt.core.io_struct.to_scheduler import (
    ProfileReq,
    ReleaseMemoryOccupationReqInput,
    ResumeMemoryOccupationReqInput,
)
from sglang.srt.entrypoints.control_bodies import (
    destroy_group_of,
    distributed_update_of,
    get_weights_of,
    init_group_of,
    memory_tags_of,
    pause_mode_of,
    profile_req_of,
    tensor_update_of,
    update_weights_of,
)
from sglang.srt.entrypoints.launcher import launch_subprocesses, resolve_model_paths
from sglang.srt.managers.tokenizer.tokenizer_manager import TokenizerManager
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.tensor_serializer import MultiprocessingSerializer

logger = logging.getLogger(__name__)


class Engine:
    def __init__(self, model_path: Optional[str] = None, log_level: str = "error", **kwargs: Any):
        from sglang.srt.entrypoints.main_guard import check_main_guard

        check_main_guard()
        self.server_args = resolve_model_paths(
            ServerArgs.from_kwargs(model_path=model_path, log_level=log_level, **kwargs)
        )
        from sglang.srt.utils.process import configure_logger

        configure_logger(self.server_args.log_level)
        self.runtime = launch_subprocesses(self.server_args)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, daemon=True, name="engine-loop"
        )
        self._thread.start()
        self.tokenizer_manager: TokenizerManager = self._call(self._make_manager())
        self.runtime.start_watchdog(self._on_child_death)
        self._closed = False
        atexit.register(self.shutdown)

    async def _make_manager(self) -> TokenizerManager:
        from sglang.srt.entrypoints.grammar_validation import attach_grammar_validator

        tm = TokenizerManager(self.server_args, self.runtime.port_args, self.runtime.ready)
        attach_grammar_validator(tm)
        tm.start()
        return tm

    def _call(self, coro, timeout: Optional[float] = None) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def _on_child_death(self, msg: str) -> None:
        self.loop.call_soon_threadsafe(self.tokenizer_manager.fail_all, msg)

    @property
    def tokenizer(self):
        return self.tokenizer_manager.tokenizer

    # ------------------------------------------------------------------ generation
    @staticmethod
    def _req(prompt, input_ids, sampling_params, **fields: Any) -> GenerateReqInput:
        """The same checks as /generate; other SGLang field names pass through (a misspelt one is a TypeError)."""
        return GenerateReqInput.from_kwargs(
            text=prompt, input_ids=input_ids, sampling_params=sampling_params, **fields
        )

    def generate(
        self,
        prompt: Optional[Union[str, List[str]]] = None,
        sampling_params: Optional[Union[Dict, List[Dict]]] = None,
        input_ids: Optional[Union[List[int], List[List[int]]]] = None,
        stream: bool = False,
        **fields: Any,
    ) -> Union[Dict, List[Dict], Iterator[Dict]]:
        """Generate for one prompt or a batch; `fields` are /generate's other fields (return_logprob,
        logprob_start_len, top_logprobs_num, return_text_in_logprobs, rid, priority, ...)."""
        obj = self._req(prompt, input_ids, sampling_params, stream=stream, **fields)
        if stream:
            return self._sync_stream(obj)
        return self._call(self._final(obj))

    async def _final(self, obj: GenerateReqInput) -> Any:
        last = None
        async for out in self.tokenizer_manager.generate_request(obj):
            last = out
        return last

    def _sync_stream(self, obj: GenerateReqInput) -> Iterator[Dict]:
        agen = self.tokenizer_manager.generate_request(obj)
        try:
            while True:
                try:
                    yield self._call(agen.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            self._call(agen.aclose())

    async def async_generate(
        self,
        prompt: Optional[Union[str, List[str]]] = None,
        sampling_params: Optional[Union[Dict, List[Dict]]] = None,
        input_ids: Optional[Union[List[int], List[List[int]]]] = None,
        stream: bool = False,
        **fields: Any,
    ) -> Union[Dict, List[Dict], AsyncIterator[Dict]]:
        obj = self._req(prompt, input_ids, sampling_params, stream=stream, **fields)
        if stream:
            return self._async_stream(obj)
        return await asyncio.wrap_future(
            asyncio.run_coroutine_threadsafe(self._final(obj), self.loop)
        )

    async def _async_stream(self, obj: GenerateReqInput) -> AsyncIterator[Dict]:
        agen = self.tokenizer_manager.generate_request(obj)
        try:
            while True:
                fut = asyncio.run_coroutine_threadsafe(agen.__anext__(), self.loop)
                try:
                    yield await asyncio.wrap_future(fut)
                except StopAsyncIteration:
                    return
        finally:
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(agen.aclose(), self.loop))

    # ------------------------------------------------------------------ control
    def flush_cache(self) -> Dict[str, Any]:
        out = self._call(self.tokenizer_manager.flush_cache())
        return {"success": out.success, "message": out.message}

    def abort_request(self, rid: str = "", abort_all: bool = False) -> None:
        self._call(self.tokenizer_manager.abort_request(rid, abort_all))

    def pause_generation(self, mode: str = "abort") -> None:
        """No pass runs until continue_generation; see PauseGenerationReqInput for the modes."""
        self._call(self.tokenizer_manager.pause_generation(pause_mode_of({"mode": mode})))

    def continue_generation(self) -> None:
        self._call(self.tokenizer_manager.continue_generation())

    def update_weights_from_disk(
        self, model_path: str, load_format: Optional[str] = None, **fields: Any
    ) -> Tuple[bool, str]:
        """Another checkpoint of the same model replaces the weights once the running requests
        finish; returns (success, message). fields: the route's other fields (weight_version, ...)."""
        return self._update(
            update_weights_of({"model_path": model_path, "load_format": load_format, **fields})
        )

    def update_weights_from_tensor(
        self,
        named_tensors: Union[Sequence[Tuple[str, torch.Tensor]], Dict[str, Any]],
        load_format: Optional[str] = None,
        flush_cache: bool = True,
        **fields: Any,
    ) -> Tuple[bool, str]:
        """Some or all weights from (checkpoint name, tensor) pairs (with load_format
        "flattened_bucket": a FlattenedTensorBucket's {"flattened_tensor", "metadata"}), handed to
        the schedulers as shared memory (CUDA IPC for CUDA tensors), not copied through the
        sockets."""
        obj = named_tensors if isinstance(named_tensors, dict) else list(named_tensors)
        payload = MultiprocessingSerializer.serialize(obj, output_str=True)
        body = {
            "serialized_named_tensors": [payload],
            "load_format": load_format,
            "flush_cache": flush_cache,
            **fields,
        }
        return self._update(tensor_update_of(body))

    def init_weights_update_group(
        self,
        master_address: str,
        master_port: int,
        rank_offset: int,
        world_size: int,
        group_name: str = "weight_update_group",
        backend: str = "nccl",
    ) -> Tuple[bool, str]:
        """Join a trainer's process group (returns once the trainer has joined too)."""
        req = init_group_of(
            {
                "master_address": master_address,
                "master_port": master_port,
                "rank_offset": rank_offset,
                "world_size": world_size,
                "group_name": group_name,
                "backend": backend,
            }
        )
        return self._call(self.tokenizer_manager.weights_update_group(req), timeout=None)

    def destroy_weights_update_group(
        self, group_name: str = "weight_update_group"
    ) -> Tuple[bool, str]:
        req = destroy_group_of({"group_name": group_name})
        return self._call(self.tokenizer_manager.weights_update_group(req))

    def update_weights_from_distributed(
        self,
        names: Sequence[str],
        dtypes: Sequence[Union[str, torch.dtype]],
        shapes: Sequence[Sequence[int]],
        group_name: str = "weight_update_group",
        flush_cache: bool = True,
        **fields: Any,
    ) -> Tuple[bool, str]:
        """Receive these tensors by broadcast from the group's rank 0 (the trainer broadcasts them
        in this order meanwhile) once the running requests finish."""
        body = {
            "names": list(names),
            "dtypes": [str(d).removeprefix("torch.") for d in dtypes],
            "shapes": [list(x) for x in shapes],
            "group_name": group_name,
            "flush_cache": flush_cache,
            **fields,
        }
        return self._update(distributed_update_of(body))

    def get_weights_by_name(self, name: str, truncate_size: int = 100) -> list:
        """The checkpoint tensor `name` as served (first truncate_size rows, nested lists)."""
        req = get_weights_of({"name": name, "truncate_size": truncate_size})
        out = self._call(self.tokenizer_manager.get_weights_by_name(req))
        if out.parameter is None:
            raise ValueError(out.message)
        return out.parameter

    def release_memory_occupation(self, tags: Optional[List[str]] = None) -> Tuple[bool, str]:
        """Free the device memory of "weights", "kv_cache", "cuda_graph" (None: all) while no
        request holds KV; nothing runs until resumed."""
        req = ReleaseMemoryOccupationReqInput(memory_tags_of({"tags": tags}))
        return self._call(self.tokenizer_manager.memory_occupation(req))

    def resume_memory_occupation(self, tags: Optional[List[str]] = None) -> Tuple[bool, str]:
        req = ResumeMemoryOccupationReqInput(memory_tags_of({"tags": tags}))
        return self._call(self.tokenizer_manager.memory_occupation(req))

    def _update(self, parsed: Tuple[Any, Optional[str]]) -> Tuple[bool, str]:
        req, version = parsed
        return self._call(self.tokenizer_manager.update_weights(req, version), timeout=None)

    def start_profile(self, **fields: Any) -> None:
        """torch.profiler over the scheduler's passes; fields: /start_profile's (output_dir, ...)."""
        self._profile(profile_req_of(fields))

    def stop_profile(self) -> None:
        self._profile(ProfileReq(start=False))

    def _profile(self, req: ProfileReq) -> None:
        out = self._call(self.tokenizer_manager.profile(req))
        if not out.success:
            raise ValueError(out.message)

    def get_model_info(self) -> Dict[str, Any]:
        return {
            "model_path": self.server_args.model_path,
            "tokenizer_path": self.server_args.tokenizer_path,
            "is_generation": True,
        }

    def get_server_info(self) -> Dict[str, Any]:
        state = self._call(self.tokenizer_manager.get_internal_state())
        return {**self.server_args.to_dict(), **state, "internal_states": [state]}

    def shutdown(self) -> None:
        if getattr(self, "_closed", True):
            return
        self._closed = True
        self.runtime.shutdown()
        try:
            self._call(self.tokenizer_manager.close(), timeout=5)
        except Exception:  # noqa: BLE001 - best effort while tearing down
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
