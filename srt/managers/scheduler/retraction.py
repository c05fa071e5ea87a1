"""The running batch's next decode step: drop finished rows, and when the pool cannot hold one more
token per request, retract the least-progressed requests (raising the new-token ratio to what the
rest needs); a request that cannot grow even alone is aborted."""

from __future__ import annotations

import logging
from typing import Optional

from sglang.srt.core.finish_reason import FinishAbort
from sglang.srt.managers.scheduler.new_token_ratio import NewTokenRatio
from sglang.srt.managers.scheduler.output_streamer import OutputStreamer
from sglang.srt.managers.scheduler.schedule_batch import ScheduleBatch
from sglang.srt.managers.scheduler.scheduler_state import SchedulerState
from sglang.srt.managers.scheduler.scheduler_stats import SchedulerStats

logger = logging.getLogger(__name__)

OOM_MESSAGE = "Out of memory even after retracting all other requests; the KV cache is too small for this request."


class DecodeUpdater:
    def __init__(
        self,
        state: SchedulerState,
        ratio: NewTokenRatio,
        stats: SchedulerStats,
        streamer: OutputStreamer,
    ):
        self.state = state
        self.ratio = ratio
        self.stats = stats
        self.streamer = streamer

    def live_batch(self) -> Optional[ScheduleBatch]:
        """The running batch without finished rows and rows certain to finish; None if empty."""
        batch = self.state.running_batch
        batch.filter_batch()
        batch.exclude_finishing()
        return None if batch.is_empty() else batch

    def update_running_batch(self) -> Optional[ScheduleBatch]:
        batch = self.live_batch()
        if batch is None:
            return None
        if batch.check_decode_mem():
            self.ratio.decay()
        else:
            self._retract(batch)
            if batch.is_empty():
                return None
        batch.prepare_for_decode()
        return batch

    def _retract(self, batch: ScheduleBatch) -> None:
        old = self.ratio.value
        retracted, new_ratio, oom = batch.retract_decode()
        self.state.waiting_queue.extend(retracted)
        self.ratio.raise_to(new_ratio)
        self.stats.log_retraction(len(retracted), old, new_ratio)
        for r in oom:
            r.finish(FinishAbort(OOM_MESSAGE, 500, "InternalServerError"))
            self.state.rid_to_req.pop(r.rid, None)
        if oom:
            self.streamer.stream_output(oom)
