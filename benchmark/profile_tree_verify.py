"""Where a tree verify step's time goes: bench_speculative with trees, and one scheduler step (the
8th with a tree pass) under torch.profiler, printed by device time and by host time; --cprofile
gives a host profile of the whole run instead.

    python benchmark/profile_tree_verify.py --model-config llama3-8b --batch-size 1 --tree-breadth 4
"""

from __future__ import annotations

import cProfile
import os
import pstats
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import bench_speculative
import torch

from sglang.srt.managers.scheduler.scheduler import Scheduler


def profile_one_tree_step(at: int = 8) -> None:
    step = Scheduler.step
    done = []

    def profiled(self) -> None:
        spec = self.spec
        if done or spec is None or spec.num_tree_passes < at:
            return step(self)
        done.append(True)
        acts = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            acts.append(torch.profiler.ProfilerActivity.CUDA)
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.profiler.profile(activities=acts) as prof:
            step(self)
            if torch.cuda.is_available():
                torch.cuda.synchronize()
        print(f"profiled step: {(time.perf_counter() - t0) * 1e3:.2f} ms (with profiler overhead)")
        by = "cuda_time_total" if torch.cuda.is_available() else "cpu_time_total"
        print(prof.key_averages().table(sort_by=by, row_limit=25))
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))

    Scheduler.step = profiled


if __name__ == "__main__":
    argv = sys.argv[1:]
    use_cprofile = "--cprofile" in argv
    argv = [a for a in argv if a != "--cprofile"] + ["--accept", "1.0", "--num-draft-tokens", "8"]
    if use_cprofile:
        prof = cProfile.Profile()
        prof.enable()
        bench_speculative.main(argv)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    else:
        profile_one_tree_step()
        bench_speculative.main(argv)
