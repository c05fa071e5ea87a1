"""Per-pass device timeline (SGLANG_STEP_TRACE=<file>): one JSON line per forward pass with its
shape and when the device started and finished it, appended each time the scheduler goes idle.

On CUDA the marks are timing events queued on the stream around forward + sample (no host sync:
they are read once the pass's results are on the host anyway); on the CPU they are wall-clock
reads on the thread that runs the pass. benchmark/step_trace_report.py turns a trace into the
busy / idle split and each kind of pass against its floor.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from typing import Any, List, Optional

import torch

ENV = "SGLANG_STEP_TRACE"
_FLUSH_AT = 4096


@dataclass
class PassShape:
    """What a pass must read and compute: enough for its floor."""

    mode: str  # "decode", "extend" or "mixed"
    bs: int
    tokens: int  # tokens run through the layers
    kv_tokens: int  # decode: context tokens attention reads (sum of seq_lens)
    attn_pairs: int  # extend: (query, key) pairs of causal attention over prefix + new tokens

    @classmethod
    def of(cls, fb: Any) -> "PassShape":
        mode = fb.forward_mode
        if mode.is_extend():
            pairs = sum(
                e * p + e * (e + 1) // 2
                for p, e in zip(fb.extend_prefix_lens_cpu, fb.extend_seq_lens_cpu)
            )
            return cls(
                "mixed" if mode.is_mixed() else "extend",
                fb.batch_size,
                fb.extend_num_tokens,
                fb.seq_lens_sum,
                pairs,
            )
        return cls("decode", fb.batch_size, fb.batch_size, fb.seq_lens_sum, 0)


@dataclass
class PassRecord:
    shape: PassShape
    launched: float  # time.perf_counter() when the scheduler queued it (CLOCK_MONOTONIC on Linux:
    # the same clock in every process, so a client can pick out the passes of its own run)
    start: Any = None  # cuda.Event or float seconds
    end: Any = None


class StepTrace:
    """Collects PassRecords and writes the finished ones to the trace file."""

    def __init__(self, device: str, path: Optional[str] = None) -> None:
        self.path = path if path is not None else os.environ.get(ENV) or None
        self.cuda = device == "cuda"
        self.pending: List[PassRecord] = []
        self._base_event: Any = None
        self._base_host = time.perf_counter()

    @property
    def enabled(self) -> bool:
        return self.path is not None

    def new(self, fb: Any) -> Optional[PassRecord]:
        if not self.enabled:
            return None
        if len(self.pending) >= _FLUSH_AT:  # a long busy spell: write what has finished
            self.flush()
        rec = PassRecord(PassShape.of(fb), time.perf_counter())
        self.pending.append(rec)
        return rec

    def mark(self, rec: Optional[PassRecord], which: str) -> None:
        """Call where the pass's device work is queued (start: before forward; end: after sample)."""
        if rec is None:
            return
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            if self._base_event is None:
                self._base_event = ev
            setattr(rec, which, ev)
        else:
            setattr(rec, which, time.perf_counter())

    def _ms(self, mark: Any) -> float:
        if self.cuda:
            return self._base_event.elapsed_time(mark)
        return (mark - self._base_host) * 1e3

    def flush(self) -> int:
        """Write every finished record; returns how many."""
        if not self.enabled or not self.pending:
            return 0
        done, keep = [], []
        for rec in self.pending:
            finished = rec.end is not None and (not self.cuda or rec.end.query())
            (done if finished else keep).append(rec)
        self.pending = keep
        with open(self.path, "a") as f:
            for rec in done:
                row = asdict(rec.shape)
                row.update(
                    launched_s=rec.launched,
                    start_ms=self._ms(rec.start),
                    end_ms=self._ms(rec.end),
                )
                f.write(json.dumps(row) + "\n")
        return len(done)
