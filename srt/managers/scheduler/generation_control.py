"""Stopping and restarting generation: /pause_generation and /continue_generation, and weight
updates (/update_weights_from_disk), which wait for the running requests to finish on the old
weights. The scheduler's loop asks `holding()` before admitting and `ready_to_update()` each pass."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Optional

from sglang.srt.core.io_struct.to_scheduler import (
    AbortReq,
    ContinueGenerationReqInput,
    PauseGenerationReqInput,
    UpdateWeightFromDiskReqInput,
)
from sglang.srt.core.io_struct.to_tokenizer import (
    ContinueGenerationReqOutput,
    PauseGenerationReqOutput,
    UpdateWeightFromDiskReqOutput,
)

if TYPE_CHECKING:
    from sglang.srt.managers.scheduler.scheduler import Scheduler

logger = logging.getLogger(__name__)

MESSAGES = (PauseGenerationReqInput, ContinueGenerationReqInput, UpdateWeightFromDiskReqInput)


class GenerationControl:
    def __init__(self, sched: "Scheduler"):
        self.sched = sched
        self.paused: Optional[str] = None  # the pause mode while generation is paused
        # A weight update waiting for the running requests to finish (nothing new is admitted).
        self.weight_update: Optional[UpdateWeightFromDiskReqInput] = None

    def answer(self, msg: Any) -> Any:
        """The reply to one of MESSAGES; None for a weight update (answered once it is done)."""
        if isinstance(msg, PauseGenerationReqInput):
            self.pause(msg.mode)
            return PauseGenerationReqOutput(f"Generation paused ({msg.mode}).")
        if isinstance(msg, ContinueGenerationReqInput):
            self.paused = None
            return ContinueGenerationReqOutput("Generation continued.")
        if msg.abort_all_requests:
            self.sched.intake.abort_request(AbortReq(abort_all=True))
        self.weight_update = msg
        return None

    def pause(self, mode: str) -> None:
        """No pass is launched until generation continues; requests still arrive and wait. The passes
        in flight finish first, so no request is left between a launch and its result."""
        s = self.sched
        s.settle_passes()
        if mode == "abort":
            s.intake.abort_request(AbortReq(abort_all=True))
        s.finish_aborted_running()
        if mode == "retract":
            self._retract_all()
        self.paused = mode

    def _retract_all(self) -> None:
        state = self.sched.state
        back = state.running_batch.retract_all()
        if state.chunked_req is not None:
            state.running_batch.retract_req(state.chunked_req)
            back.append(state.chunked_req)
            state.chunked_req = None
        state.waiting_queue.extend(back)
        if back:
            logger.info("Pause: %d requests retracted to the waiting queue.", len(back))

    # ------------------------------------------------------------------ weight updates
    def ready_to_update(self) -> bool:
        """A weight update waits and no request holds KV or has a pass in flight (waiting ones
        hold nothing)."""
        if self.weight_update is None:
            return False
        st = self.sched.state
        if st.in_flight and all(r.finished() for r in st.running_batch.reqs):
            self.sched.process_in_flight()  # the overlap loop's last pass may be what ends them
        return (
            not st.in_flight
            and st.chunked_req is None
            and all(r.finished() for r in st.running_batch.reqs)
        )

    def update_weights(self) -> None:
        s = self.sched
        msg, self.weight_update = self.weight_update, None
        try:
            s.model_runner.update_weights_from_disk(msg.model_path, msg.load_format)
        except Exception as e:  # noqa: BLE001 - any failure is the client's answer, not a crash
            out = UpdateWeightFromDiskReqOutput(False, f"Failed to update weights: {e}")
        else:
            # The cached prefixes were computed with the old weights.
            s.state.running_batch.filter_batch()
            s.pools.clear_all()
            out = UpdateWeightFromDiskReqOutput(True, f"Weights updated from {msg.model_path}.")
        logger.info(out.message)
        s.intake.reply(out)
