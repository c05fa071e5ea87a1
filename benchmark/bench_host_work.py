"""The scheduler's host work per decode step, by phase, as the batch grows.

The real scheduler runs in-process on the plain loop (so every phase is on one thread, one after
the other) with the loop profiler on; requests decode until their length. Per decode step it
reports the host phases (building the batch, the launch's host half, processing results and
streaming) apart from the device's (the forward and the sampler), and host time per request. The
seed's point: the host part grows with the batch while the device step of a weight-bound model does
not, so at large batch the host work is what an overlap loop must hide.

    python benchmark/bench_host_work.py --model-config tiny-llama --batch-size 1 64 256
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from inproc_scheduler import dummy_scheduler, submit_greedy
from model_configs import MODEL_CONFIGS, write_model_config

DEVICE_PHASES = ("c.forward", "c.sample", "c.host", "wait")
HOST_PHASES = ("build", "l.fb", "l.info", "process")


def profile(model_path: str, bs: int, steps: int, args) -> dict:
    os.environ["SGLANG_LOOP_PROFILE"] = "1"
    sched = dummy_scheduler(
        model_path,
        disable_overlap_schedule=True,
        max_total_tokens=max(bs * (args.input_len + steps + 8), 4096),
        max_running_requests=bs,
    )
    vocab = sched.model_config.vocab_size
    rng = random.Random(bs)
    for i in range(bs):
        ids = [rng.randrange(1, vocab - 1) for _ in range(args.input_len)]
        submit_greedy(sched, f"h{bs}-{i}", ids, steps)
    # Prefill everything first, then profile decode steps only.
    while not sched.state.waiting_queue == [] or sched.state.chunked_req is not None:
        sched.step()
    sched.step()
    prof = sched.loop_prof
    prof.reset()
    n = 0
    t0 = time.perf_counter()
    while not sched.state.running_batch.is_empty() and n < steps - 2:
        with prof.phase("build"):
            batch = sched.get_next_batch_to_run()
        if batch is None:
            break
        launched = sched.launch_batch(batch)
        sched.results.process_batch_result(launched)
        sched.state.last_batch = batch
        n += 1
    wall = time.perf_counter() - t0
    per = {k: prof.t[k] / n * 1e3 for k in list(HOST_PHASES) + list(DEVICE_PHASES) if k in prof.t}
    host = sum(per.get(k, 0.0) for k in HOST_PHASES)
    device = sum(per.get(k, 0.0) for k in DEVICE_PHASES)
    while not sched._is_fully_idle():
        sched.step()
    return dict(
        batch_size=bs,
        steps=n,
        wall_ms_per_step=wall / n * 1e3,
        host_ms_per_step=host,
        device_ms_per_step=device,
        host_us_per_request=host / bs * 1e3,
        phases_ms=per,
    )


def main(argv=None) -> list:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model-config", choices=sorted(MODEL_CONFIGS), default="tiny-llama")
    p.add_argument("--batch-size", type=int, nargs="+", default=[1, 64, 256])
    p.add_argument("--input-len", type=int, default=32)
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--result-file", default=None)
    p.add_argument(
        "--ab-info-reuse",
        action="store_true",
        help="also run each batch size with the decode step's sampling info rebuilt every step",
    )
    args = p.parse_args(argv)
    path = write_model_config(args.model_config)
    rows = []
    for bs in args.batch_size:
        rows.append(dict(profile(path, bs, args.steps, args), variant="reuse"))
        if args.ab_info_reuse:
            from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo

            keep = SamplingBatchInfo.for_decode
            SamplingBatchInfo.for_decode = classmethod(
                lambda cls, reqs, vocab, device, previous: cls.from_reqs(reqs, vocab, device)
            )
            try:
                rows.append(dict(profile(path, bs, args.steps, args), variant="rebuild"))
            finally:
                SamplingBatchInfo.for_decode = keep
    names = list(HOST_PHASES) + list(DEVICE_PHASES)
    print(f"{args.model_config}: ms per decode step by phase (plain loop, profiled)")
    print(
        f"{'bs':>4} {'info':>7} "
        + " ".join(f"{k:>9}" for k in names)
        + f" {'host':>8} {'us/req':>7} {'wall':>8}"
    )
    for r in rows:
        ph = r["phases_ms"]
        print(
            f"{r['batch_size']:>4} {r['variant']:>7} "
            + " ".join(f"{ph.get(k, 0.0):>9.3f}" for k in names)
            + f" {r['host_ms_per_step']:>8.3f} {r['host_us_per_request']:>7.1f} {r['wall_ms_per_step']:>8.2f}"
        )
    if args.result_file:
        with open(args.result_file, "a") as f:
            for r in rows:
                f.write(json.dumps(dict(model=args.model_config, **r)) + "\n")
    return rows


if __name__ == "__main__":
    main()
