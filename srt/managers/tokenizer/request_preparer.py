"""One prompt of a generate call turned into a checked, tokenized request, off the event loop.

Everything here costs CPU in proportion to what the client sent (tokenizing the prompt and each stop
string, parsing the sampling parameters), so the TokenizerManager runs it in a small thread pool and
its event loop keeps serving everyone else. The HF fast tokenizer releases the GIL while it encodes;
each worker thread has its own copy, since one fast tokenizer must not be used by two threads at once.
A prompt too long to fit even if every token were the vocabulary's longest is refused unread.
"""

from __future__ import annotations

import asyncio
import copy
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, List, Optional

from sglang.srt.core.generate_input import GenerateItem, GenerateReqInput
from sglang.srt.core.input_limits import InputLimits
from sglang.srt.core.sampling_params import SamplingParams
from sglang.srt.managers.tokenizer.validation import (
    check_input_ids,
    check_logprob_start_len,
    check_prompt_chars,
    check_top_logprobs_num,
)


@dataclass
class PreparedReq:
    """One generation, ready to send to the scheduler (a prompt of a batch, or one of its n copies)."""

    rid: str
    text: Optional[str]
    input_ids: List[int]
    sp: SamplingParams
    stream: bool
    return_logprob: bool
    logprob_start_len: int
    top_logprobs_num: int
    return_text_in_logprobs: bool
    priority: Optional[int]
    extra_key: Optional[str]
    log_metrics: bool
    background: bool
    no_logs: bool
    received_time: float
    index: Optional[int] = None  # the choice index of a batch or n > 1 stream


class RequestPreparer:
    def __init__(
        self,
        tokenizer: Any,
        limits: InputLimits,
        vocab_size: int,
        max_top_logprobs_num: int,
        num_workers: int,
    ):
        self.tokenizer = tokenizer
        self.limits = limits
        self.vocab_size = vocab_size
        self.max_top_logprobs_num = max_top_logprobs_num
        self.max_prompt_chars = limits.max_req_input_len * _longest_token_chars(tokenizer)
        self.pool = ThreadPoolExecutor(num_workers, thread_name_prefix="tokenize")
        self._local = threading.local()
        if tokenizer is not None:
            # Copy the tokenizer into every worker now, not during someone's first request.
            barrier = threading.Barrier(num_workers)
            for _ in range(num_workers):
                self.pool.submit(self._warm, barrier)

    def _warm(self, barrier: threading.Barrier) -> None:
        self.thread_tokenizer()
        try:
            barrier.wait(
                timeout=60
            )  # holds each worker until all have started, so each gets one task
        except threading.BrokenBarrierError:
            pass

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run fn(*args) in a pool thread."""
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    def encode_many(self, texts: List[str], add_special_tokens: bool = True) -> List[List[int]]:
        tok = self.thread_tokenizer()
        for text in texts:
            self.check_chars(text)
        return [tok.encode(t, add_special_tokens=add_special_tokens) for t in texts]

    def decode(self, ids: List[int]) -> str:
        return self.thread_tokenizer().decode(ids)

    def shutdown(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)

    def thread_tokenizer(self) -> Any:
        """This thread's own tokenizer copy (None without a tokenizer)."""
        if self.tokenizer is None:
            return None
        tok = getattr(self._local, "tok", None)
        if tok is None:
            tok = self._local.tok = copy.deepcopy(self.tokenizer)
        return tok

    def prepare(self, item: GenerateItem, obj: GenerateReqInput, received: float) -> PreparedReq:
        """Check and tokenize one prompt (call from a pool thread); ValueError for a bad request."""
        sp = SamplingParams.from_dict(item.sampling_params)
        sp.verify(self.vocab_size)
        check_top_logprobs_num(item.top_logprobs_num, self.max_top_logprobs_num)
        tok = self.thread_tokenizer()
        ids = self._input_ids(item, tok)
        explicit_max = item.sampling_params.get("max_new_tokens") is not None
        check_input_ids(ids, self.limits, self.vocab_size, sp, explicit_max)
        check_logprob_start_len(item.return_logprob, item.logprob_start_len, len(ids))
        sp.normalize(tok)
        return PreparedReq(
            rid=item.rid,
            text=item.text,
            input_ids=ids,
            sp=sp,
            stream=obj.stream,
            return_logprob=item.return_logprob,
            logprob_start_len=item.logprob_start_len,
            top_logprobs_num=item.top_logprobs_num,
            return_text_in_logprobs=obj.return_text_in_logprobs,
            priority=obj.priority,
            extra_key=item.extra_key,
            log_metrics=obj.log_metrics,
            background=obj.background,
            no_logs=obj.no_logs,
            received_time=received,
        )

    def _input_ids(self, item: GenerateItem, tok: Any) -> List[int]:
        if item.input_ids is not None:
            return list(item.input_ids)
        if tok is None:
            raise ValueError("This server was started with --skip-tokenizer-init: send input_ids.")
        self.check_chars(item.text)
        return tok.encode(item.text)

    def check_chars(self, text: str) -> None:
        check_prompt_chars(text, self.limits, self.max_prompt_chars)


def _longest_token_chars(tokenizer: Any) -> int:
    """An upper bound on the characters one token covers: its vocabulary string is at least that long
    (byte-level vocabularies spell each byte as one character, SentencePiece a space as one)."""
    if tokenizer is None:
        return 1
    try:
        return max(16, max(len(t) for t in tokenizer.get_vocab()))
    except (AttributeError, TypeError, ValueError, NotImplementedError):
        return 1 << 20  # no vocabulary to read: never refuse by length before tokenizing
