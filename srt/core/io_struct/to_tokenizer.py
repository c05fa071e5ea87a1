"""Messages the TokenizerManager (HTTP process) receives: text from the detokenizer, control replies
and gauges from the scheduler."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from sglang.srt.core.io_struct.batch_output import BatchOutputCommon
from sglang.srt.core.io_struct.to_scheduler import (
    UpdateWeightFromDiskReqInput,
    UpdateWeightsFromDistributedReqInput,
    UpdateWeightsFromTensorReqInput,
)


@dataclass
class BatchStrOutput(BatchOutputCommon):
    output_strs: List[str]  # new text since the last message (a delta)


@dataclass
class DetokenizerError:
    """The detokenizer could not serve some requests (e.g. its state table overflowed)."""

    rids: List[str]
    message: str


@dataclass
class FlushCacheReqOutput:
    success: bool
    message: str = ""


@dataclass
class PauseGenerationReqOutput:
    """Sent once the pause has taken effect: no pass is in flight and none will be launched."""

    message: str = ""


@dataclass
class ContinueGenerationReqOutput:
    message: str = ""


@dataclass
class UpdateWeightFromDiskReqOutput:
    success: bool
    message: str = ""
    num_paused_requests: int = 0


@dataclass
class UpdateWeightsFromTensorReqOutput:
    success: bool
    message: str = ""


@dataclass
class UpdateWeightsFromDistributedReqOutput:
    success: bool
    message: str = ""


@dataclass
class InitWeightsUpdateGroupReqOutput:
    success: bool
    message: str = ""


@dataclass
class DestroyWeightsUpdateGroupReqOutput:
    success: bool
    message: str = ""


@dataclass
class ReleaseMemoryOccupationReqOutput:
    success: bool
    message: str = ""


@dataclass
class ResumeMemoryOccupationReqOutput:
    success: bool
    message: str = ""


@dataclass
class GetWeightsByNameReqOutput:
    """parameter: nested lists of floats; None with a message when there is no such tensor."""

    parameter: Optional[list]
    message: str = ""


@dataclass
class ProfileReqOutput:
    success: bool
    message: str = ""


@dataclass
class GetInternalStateReqOutput:
    state: Dict[str, Any]


@dataclass
class SchedulerMetrics:
    """Scheduler-side gauges and counters, pushed to the HTTP process (for /metrics) when they change."""

    values: Dict[str, float]


# Each weight update and the reply it gets, for the scheduler that answers and the TokenizerManager
# that waits.
UPDATE_REPLIES = {
    UpdateWeightFromDiskReqInput: UpdateWeightFromDiskReqOutput,
    UpdateWeightsFromTensorReqInput: UpdateWeightsFromTensorReqOutput,
    UpdateWeightsFromDistributedReqInput: UpdateWeightsFromDistributedReqOutput,
}
