"""The message a scheduler sends its launcher once it has started (over the start-up pipe)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SchedulerReady:
    """The numbers the other processes need."""

    max_total_num_tokens: int
    max_running_requests: int
    max_req_input_len: int
    context_len: int
    chunked_prefill_size: int
    page_size: int
    vocab_size: int
    available_mem_gb: float
    device: str
