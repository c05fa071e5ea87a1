"""Messages the DetokenizerManager receives (from the scheduler)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List

from sglang.srt.core.io_struct.batch_output import BatchOutputCommon


@dataclass
class BatchTokenIDOutput(BatchOutputCommon):
    # Incremental detokenization: ids appended to each request's decode window, and the
    # read offset inside the window (sent only on a request's first message, else -1).
    decode_ids: List[List[int]]
    read_offsets: List[int]
    skip_special_tokens: List[bool]
    spaces_between_special_tokens: List[bool]
    no_stop_trim: List[bool]
