"""Messages the scheduler receives (from the TokenizerManager, directly or through the DP controller)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Union

from sglang.srt.core.sampling_params import SamplingParams


@dataclass
class TokenizedGenerateReqInput:
    rid: str
    input_ids: List[int]
    sampling_params: SamplingParams
    return_logprob: bool = False
    logprob_start_len: int = -1
    top_logprobs_num: int = 0
    stream: bool = False
    priority: Optional[int] = None
    extra_key: Optional[str] = None
    received_time: float = 0.0


@dataclass
class AbortReq:
    rid: str = ""
    abort_all: bool = False


@dataclass
class FlushCacheReqInput:
    pass


@dataclass
class GetInternalStateReq:
    pass


@dataclass
class PauseGenerationReqInput:
    """mode: "abort" (every request ends as aborted), "retract" (running requests give back their KV
    and wait), or "in_place" (running requests keep their KV)."""

    mode: str = "abort"


@dataclass
class ContinueGenerationReqInput:
    pass


@dataclass
class UpdateWeightFromDiskReqInput:
    """Replace the weights with another checkpoint of the same model. Running requests finish on
    the old weights first (or are aborted, with abort_all_requests); new ones wait meanwhile. The
    prefix cache, computed with the old weights, is flushed."""

    model_path: str
    load_format: Optional[str] = None
    abort_all_requests: bool = False


@dataclass
class UpdateWeightsFromTensorReqInput:
    """Replace some or all weights with named tensors (checkpoint names; load_format "direct": our
    parameter names). serialized_named_tensors holds one payload per tensor-parallel rank (one alone
    serves every rank), each a MultiprocessingSerializer payload of (name, tensor) pairs. Waits
    for the running requests as a disk update does; flush_cache drops the prefix cache after."""

    serialized_named_tensors: List[Union[str, bytes]]
    load_format: Optional[str] = None
    flush_cache: bool = True
    abort_all_requests: bool = False


@dataclass
class InitWeightsUpdateGroupReqInput:
    """Join a process group with a trainer (its rank 0 broadcasts): this rank is rank_offset +
    its global rank among the server's ranks."""

    master_address: str
    master_port: int
    rank_offset: int
    world_size: int
    group_name: str = "weight_update_group"
    backend: str = "nccl"


@dataclass
class DestroyWeightsUpdateGroupReqInput:
    group_name: str = "weight_update_group"


@dataclass
class UpdateWeightsFromDistributedReqInput:
    """Receive these tensors, in order, by broadcasts from rank 0 of the group, then load them as
    UpdateWeightsFromTensorReqInput does."""

    names: List[str]
    dtypes: List[str]
    shapes: List[List[int]]
    group_name: str = "weight_update_group"
    flush_cache: bool = True
    abort_all_requests: bool = False


@dataclass
class GetWeightsByNameReqInput:
    """A checkpoint tensor as the server holds it (gathered over tensor-parallel ranks), its first
    truncate_size rows."""

    name: str
    truncate_size: int = 100


@dataclass
class ReleaseMemoryOccupationReqInput:
    """Free this server's device memory for a trainer: tags of "weights", "kv_cache",
    "cuda_graph" (None: all). Only with no request holding KV; nothing runs until resumed."""

    tags: Optional[List[str]] = None


@dataclass
class ResumeMemoryOccupationReqInput:
    tags: Optional[List[str]] = None


WEIGHT_UPDATES = (
    UpdateWeightFromDiskReqInput,
    UpdateWeightsFromTensorReqInput,
    UpdateWeightsFromDistributedReqInput,
)


@dataclass
class ProfileReq:
    """start: torch.profiler over the scheduler's passes until stop, or for num_steps passes; the
    trace goes to output_dir as <profile_id>-TP-<rank>.trace.json.gz."""

    start: bool
    output_dir: Optional[str] = None
    num_steps: Optional[int] = None
    activities: Optional[List[str]] = None
    with_stack: bool = False
    record_shapes: bool = False
    profile_id: Optional[str] = None


# Answered by the scheduler from its own state, one reply each (a weight update once it is done).
CONTROL_MESSAGES = (
    FlushCacheReqInput,
    GetInternalStateReq,
    PauseGenerationReqInput,
    ContinueGenerationReqInput,
    ProfileReq,
    InitWeightsUpdateGroupReqInput,
    DestroyWeightsUpdateGroupReqInput,
    GetWeightsByNameReqInput,
    ReleaseMemoryOccupationReqInput,
    ResumeMemoryOccupationReqInput,
) + WEIGHT_UPDATES
