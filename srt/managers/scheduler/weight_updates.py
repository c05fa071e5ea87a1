"""Weight updates while serving: from a checkpoint on disk, from tensors a trainer hands over, or by
broadcast in a process group shared with the trainer; and reading a weight back.

An update waits: admission stops, the running requests finish on the old weights (or are aborted,
with abort_all_requests), then the weights are replaced in place and the prefix cache, computed
with the old weights, is flushed (tensor and broadcast updates may keep it: flush_cache=False).
The scheduler's loop asks `waiting()` before admitting and `ready()` each pass. Joining a group and
reading a weight are answered at once (every TP rank handles the same message at the same point)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Optional

from sglang.srt.core.io_struct.to_scheduler import (
    WEIGHT_UPDATES,
    AbortReq,
    DestroyWeightsUpdateGroupReqInput,
    GetWeightsByNameReqInput,
    InitWeightsUpdateGroupReqInput,
    UpdateWeightFromDiskReqInput,
    UpdateWeightsFromTensorReqInput,
)
from sglang.srt.core.io_struct.to_tokenizer import (
    UPDATE_REPLIES,
    DestroyWeightsUpdateGroupReqOutput,
    GetWeightsByNameReqOutput,
    InitWeightsUpdateGroupReqOutput,
)
from sglang.srt.distributed.parallel_state import tp_all_gather_object
from sglang.srt.model_executor.weight_sync import assemble, rank_piece
from sglang.srt.utils.tensor_serializer import (
    MultiprocessingSerializer,
    bucket_tensors_of,
    named_tensors_of,
)

if TYPE_CHECKING:
    from sglang.srt.managers.scheduler.scheduler import Scheduler

logger = logging.getLogger(__name__)

MESSAGES = WEIGHT_UPDATES + (
    InitWeightsUpdateGroupReqInput,
    DestroyWeightsUpdateGroupReqInput,
    GetWeightsByNameReqInput,
)


class WeightUpdates:
    def __init__(self, sched: "Scheduler"):
        self.sched = sched
        self.pending: Optional[Any] = None  # one of WEIGHT_UPDATES, waiting for the batch to end

    def waiting(self) -> bool:
        return self.pending is not None

    def answer(self, msg: Any) -> Any:
        """The reply to one of MESSAGES; None for a weight update (answered once it is done)."""
        if isinstance(msg, InitWeightsUpdateGroupReqInput):
            return self._init_group(msg)
        if isinstance(msg, DestroyWeightsUpdateGroupReqInput):
            return self._destroy_group(msg)
        if isinstance(msg, GetWeightsByNameReqInput):
            return self._get_weights(msg)
        if msg.abort_all_requests:
            self.sched.intake.abort_request(AbortReq(abort_all=True))
        self.pending = msg
        return None

    def ready(self) -> bool:
        """An update waits and no request holds KV or has a pass in flight (waiting ones hold
        nothing)."""
        if self.pending is None:
            return False
        st = self.sched.state
        if st.in_flight and all(r.finished() for r in st.running_batch.reqs):
            self.sched.process_in_flight()  # the overlap loop's last pass may be what ends them
        return (
            not st.in_flight
            and st.chunked_req is None
            and all(r.finished() for r in st.running_batch.reqs)
        )

    def apply(self) -> None:
        s = self.sched
        msg, self.pending = self.pending, None
        reply = UPDATE_REPLIES[type(msg)]
        try:
            done = self._load(msg)
        except Exception as e:  # noqa: BLE001 - any failure is the client's answer, not a crash
            out = reply(False, f"Failed to update weights: {e}")
        else:
            s.state.running_batch.filter_batch()
            if getattr(msg, "flush_cache", True):
                s.pools.clear_all()
            out = reply(True, done)
        logger.info(out.message)
        s.intake.reply(out)

    def _load(self, msg: Any) -> str:
        """Replace the weights; returns the success message."""
        runner = self.sched.model_runner
        if not self._weights_held():
            raise ValueError("The weights are released: resume_memory_occupation first.")
        if isinstance(msg, UpdateWeightFromDiskReqInput):
            runner.update_weights_from_disk(msg.model_path, msg.load_format)
            return f"Weights updated from {msg.model_path}."
        if isinstance(msg, UpdateWeightsFromTensorReqInput):
            payloads = msg.serialized_named_tensors
            if len(payloads) not in (1, self.sched.server_args.tp_size):
                raise ValueError(
                    f"serialized_named_tensors has {len(payloads)} payloads; give one, or one "
                    f"per tensor-parallel rank ({self.sched.server_args.tp_size})"
                )
            payload = payloads[self.sched.tp_rank if len(payloads) > 1 else 0]
            obj, fmt = MultiprocessingSerializer.deserialize(payload), msg.load_format
            if fmt == "flattened_bucket":
                named, fmt = bucket_tensors_of(obj), None
            else:
                named = named_tensors_of(obj)
            runner.update_weights_from_tensor(named, fmt)
            return f"Updated {len(named)} tensors."
        runner.update_weights_from_distributed(msg.names, msg.dtypes, msg.shapes, msg.group_name)
        return f"Updated {len(msg.names)} tensors from group {msg.group_name}."

    # ------------------------------------------------------------------ answered at once
    def _init_group(self, msg: InitWeightsUpdateGroupReqInput) -> InitWeightsUpdateGroupReqOutput:
        s = self.sched
        rank = msg.rank_offset + s.dp_rank * s.server_args.tp_size + s.tp_rank
        try:
            s.model_runner.update_groups.init(
                msg.master_address,
                msg.master_port,
                rank,
                msg.world_size,
                msg.group_name,
                msg.backend,
            )
        except Exception as e:  # noqa: BLE001 - a rendezvous that fails is the client's answer
            return InitWeightsUpdateGroupReqOutput(False, f"Failed to init group: {e}")
        return InitWeightsUpdateGroupReqOutput(True, f"Joined group {msg.group_name}.")

    def _destroy_group(
        self, msg: DestroyWeightsUpdateGroupReqInput
    ) -> DestroyWeightsUpdateGroupReqOutput:
        try:
            self.sched.model_runner.update_groups.destroy(msg.group_name)
        except ValueError as e:
            return DestroyWeightsUpdateGroupReqOutput(False, str(e))
        return DestroyWeightsUpdateGroupReqOutput(True, f"Destroyed group {msg.group_name}.")

    def _weights_held(self) -> bool:
        return self.sched.generation.memory.holds("weights")

    def _get_weights(self, msg: GetWeightsByNameReqInput) -> GetWeightsByNameReqOutput:
        if not self._weights_held():
            return GetWeightsByNameReqOutput(None, "The weights are released.")
        piece = rank_piece(self.sched.model_runner.model, msg.name, msg.truncate_size)
        pieces = tp_all_gather_object(piece)
        if piece is None:
            return GetWeightsByNameReqOutput(None, f"The model has no weight {msg.name!r}.")
        return GetWeightsByNameReqOutput(assemble(pieces, msg.truncate_size))
