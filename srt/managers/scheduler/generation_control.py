"""Stopping and restarting generation: /pause_generation and /continue_generation, and giving the
device memory to a trainer meanwhile (/release_memory_occupation, /resume_memory_occupation).
While paused or released the scheduler's loop launches nothing; requests still arrive and wait."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, List, Optional, Tuple

from sglang.srt.core.io_struct.to_scheduler import (
    AbortReq,
    ContinueGenerationReqInput,
    PauseGenerationReqInput,
    ReleaseMemoryOccupationReqInput,
    ResumeMemoryOccupationReqInput,
)
from sglang.srt.core.io_struct.to_tokenizer import (
    ContinueGenerationReqOutput,
    PauseGenerationReqOutput,
    ReleaseMemoryOccupationReqOutput,
    ResumeMemoryOccupationReqOutput,
)
from sglang.srt.model_executor.memory_occupation import MemoryOccupation

if TYPE_CHECKING:
    from sglang.srt.managers.scheduler.scheduler import Scheduler

logger = logging.getLogger(__name__)

MESSAGES = (
    PauseGenerationReqInput,
    ContinueGenerationReqInput,
    ReleaseMemoryOccupationReqInput,
    ResumeMemoryOccupationReqInput,
)


class GenerationControl:
    def __init__(self, sched: "Scheduler"):
        self.sched = sched
        self.paused: Optional[str] = None  # the pause mode while generation is paused
        runner = sched.model_runner
        self.memory = MemoryOccupation(
            weights=lambda: runner.model.parameters(),
            kv_buffers=runner.kv_buffers,
            graphs=runner.set_cuda_graphs,
            weights_cpu_backup=sched.server_args.enable_weights_cpu_backup,
        )

    def holding(self) -> bool:
        """No pass may launch: paused, or some memory is given away."""
        return self.paused is not None or bool(self.memory.released)

    def answer(self, msg: Any) -> Any:
        """The reply to one of MESSAGES."""
        if isinstance(msg, PauseGenerationReqInput):
            self.pause(msg.mode)
            return PauseGenerationReqOutput(f"Generation paused ({msg.mode}).")
        if isinstance(msg, ReleaseMemoryOccupationReqInput):
            return ReleaseMemoryOccupationReqOutput(*self._memory_step(msg.tags, release=True))
        if isinstance(msg, ResumeMemoryOccupationReqInput):
            return ResumeMemoryOccupationReqOutput(*self._memory_step(msg.tags, release=False))
        self.paused = None
        return ContinueGenerationReqOutput("Generation continued.")

    def _memory_step(self, tags: Optional[List[str]], release: bool) -> Tuple[bool, str]:
        s = self.sched
        try:
            tags = self.memory.check_tags(tags)
        except ValueError as e:
            return False, str(e)
        if not release:
            return True, self.memory.resume(tags)
        if s.spec is not None or s.server_args.enable_hierarchical_cache:
            return False, (
                "Releasing memory is not supported with speculative decoding or HiCache yet."
            )
        s.settle_passes()
        st = s.state
        if st.chunked_req is not None or not st.running_batch.is_empty():
            return False, (
                "Requests are running: pause generation (abort or retract) before releasing memory."
            )
        if "kv_cache" in tags:
            s.pools.clear_all()  # the cached prefixes' KV is about to be freed
        return True, self.memory.release(tags)

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
