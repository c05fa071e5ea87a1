"""The benchmarks' in-process scheduler: dummy weights, token ids in, no tokenizer or grammar."""

from __future__ import annotations

from typing import List


def dummy_scheduler(model_path: str, **overrides):
    """A Scheduler on model_path's config with random weights and a fixed seed; overrides are
    ServerArgs fields."""
    from sglang.srt.managers.scheduler.scheduler import Scheduler
    from sglang.srt.server_args import ServerArgs

    kw = dict(
        model_path=model_path,
        load_format="dummy",
        skip_tokenizer_init=True,
        grammar_backend="none",
        random_seed=1,
    )
    kw.update(overrides)
    return Scheduler(ServerArgs(**kw), None)


def submit_greedy(
    sched, rid: str, input_ids: List[int], max_new_tokens: int, ignore_eos: bool = True
):
    """Queue one greedy request of max_new_tokens; returns its Req."""
    from sglang.srt.core.io_struct.to_scheduler import TokenizedGenerateReqInput
    from sglang.srt.core.sampling_params import SamplingParams

    sp = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, ignore_eos=ignore_eos)
    sp.normalize(None)
    sched.intake.handle_generate_request(
        TokenizedGenerateReqInput(rid=rid, input_ids=input_ids, sampling_params=sp)
    )
    return sched.state.rid_to_req[rid]
