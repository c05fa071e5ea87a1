"""/start_profile and /stop_profile: torch.profiler over the scheduler's passes, one chrome trace per
TP rank (what SGLang's bench_serving --profile asks for)."""

from __future__ import annotations

import logging
import os
import time
from typing import Optional

import torch

from sglang.srt.core.io_struct.to_scheduler import ProfileReq
from sglang.srt.core.io_struct.to_tokenizer import ProfileReqOutput

logger = logging.getLogger(__name__)


def _all_threads():
    """The forward may run on the launcher's worker thread (the overlap loop): profile every thread
    where this torch can."""
    try:
        return torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
    except (AttributeError, TypeError):
        return None


class PassProfiler:
    def __init__(self, rank: str):
        """rank: this scheduler's part of the trace file names (TP-0, TP-1-DP-0, ...)."""
        self.rank = rank
        self.prof: Optional[torch.profiler.profile] = None
        self.path = ""
        self.passes_left: Optional[int] = None

    def handle(self, req: ProfileReq) -> ProfileReqOutput:
        return self.start(req) if req.start else self.stop()

    def start(self, req: ProfileReq) -> ProfileReqOutput:
        if self.prof is not None:
            return ProfileReqOutput(False, "Profiling is already in progress; stop it first.")
        out_dir = req.output_dir or os.environ.get("SGLANG_TORCH_PROFILER_DIR", "/tmp")
        try:
            os.makedirs(out_dir, exist_ok=True)
        except (OSError, ValueError) as e:  # ValueError: a NUL in the path
            return ProfileReqOutput(False, f"Cannot write to output_dir {out_dir!r}: {e}")
        name = req.profile_id or f"{time.time():.3f}"
        self.path = os.path.join(out_dir, f"{name}-{self.rank}.trace.json.gz")
        acts = req.activities or ["CPU", "GPU"]
        kinds = [torch.profiler.ProfilerActivity.CPU]
        if "GPU" in acts and torch.cuda.is_available():
            kinds.append(torch.profiler.ProfilerActivity.CUDA)
        self.prof = torch.profiler.profile(
            activities=kinds,
            with_stack=req.with_stack,
            record_shapes=req.record_shapes,
            profile_memory="MEM" in acts,
            experimental_config=_all_threads(),
        )
        self.prof.start()
        self.passes_left = req.num_steps
        logger.info("Profiling started; the trace goes to %s", self.path)
        return ProfileReqOutput(True, f"Start profiling. The trace goes to {self.path}.")

    def on_pass(self) -> None:
        """After each launched pass: a profile of num_steps passes ends by itself."""
        if self.prof is None or self.passes_left is None:
            return
        self.passes_left -= 1
        if self.passes_left <= 0:
            self.stop()

    def stop(self) -> ProfileReqOutput:
        if self.prof is None:
            return ProfileReqOutput(False, "Profiling is not in progress; start it first.")
        prof, self.prof = self.prof, None
        prof.stop()
        try:
            prof.export_chrome_trace(self.path)
        except Exception as e:  # noqa: BLE001 - a bad path is the client's answer, not a crash
            return ProfileReqOutput(False, f"Profiling stopped; writing {self.path} failed: {e}")
        logger.info("Profiling stopped; trace written to %s", self.path)
        return ProfileReqOutput(True, f"Stop profiling. The trace is in {self.path}.")
