"""GenerateReqInput: the native /generate body (and Engine.generate arguments), checked field by field.

Every malformed value raises ValueError with a message naming the field; the HTTP layer turns
that into a 400, so nothing malformed ever reaches the scheduler. Which of SGLang's other fields
are accepted, ignored or refused is decided in generate_fields.py.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Union

from sglang.srt.core.generate_fields import FEATURE_OF, HINT_FIELDS, check_unbuilt


@dataclass
class GenerateReqInput:
    text: Optional[Union[str, List[str]]] = None
    input_ids: Optional[Union[List[int], List[List[int]]]] = None
    sampling_params: Optional[Union[Dict[str, Any], List[Dict[str, Any]]]] = None
    rid: Optional[Union[str, List[str]]] = None
    return_logprob: Union[bool, List[bool]] = False
    logprob_start_len: Union[int, List[int]] = -1
    top_logprobs_num: Union[int, List[int]] = 0
    return_text_in_logprobs: bool = False
    stream: bool = False
    priority: Optional[int] = None
    extra_key: Optional[Union[str, List[str]]] = None
    log_metrics: bool = True
    # Keep running when the client disconnects (the result is dropped; an abort still stops it).
    background: bool = False
    # Leave this request out of --log-requests.
    no_logs: bool = False
    # When the request reached the first hop (a router's clock, seconds since the epoch): latency
    # clocks start there instead of at this server's arrival.
    received_time: Optional[float] = None
    # Filled in by normalize().
    is_single: bool = True
    batch_size: int = 1

    _FIELDS = (
        "text",
        "input_ids",
        "sampling_params",
        "rid",
        "return_logprob",
        "logprob_start_len",
        "top_logprobs_num",
        "return_text_in_logprobs",
        "stream",
        "priority",
        "extra_key",
        "log_metrics",
        "background",
        "no_logs",
        "received_time",
    )

    @classmethod
    def from_json(cls, body: Any) -> "GenerateReqInput":
        """A /generate body: SGLang's fields as generate_fields.py rules; other top-level names ignored."""
        if not isinstance(body, dict):
            raise ValueError("The request body must be a JSON object.")
        check_unbuilt(body)
        return cls(**{k: body[k] for k in cls._FIELDS if k in body})

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> "GenerateReqInput":
        """Engine.generate's extra keywords: SGLang's field names, but a misspelt name is a TypeError."""
        unknown = sorted(
            k
            for k in kwargs
            if k not in cls._FIELDS and k not in FEATURE_OF and k not in HINT_FIELDS
        )
        if unknown:
            raise TypeError(f"Unknown generate argument(s): {', '.join(unknown)}")
        check_unbuilt(kwargs)
        return cls(**{k: v for k, v in kwargs.items() if k in cls._FIELDS})

    def normalize(self) -> None:
        """Check types, decide single vs batch, fill defaults."""
        if (self.text is None) == (self.input_ids is None):
            raise ValueError("Exactly one of `text` and `input_ids` must be given.")
        if self.text is not None:
            if isinstance(self.text, str):
                self.is_single, self.batch_size = True, 1
            elif (
                isinstance(self.text, list)
                and self.text
                and all(isinstance(t, str) for t in self.text)
            ):
                self.is_single, self.batch_size = False, len(self.text)
            else:
                raise ValueError("`text` must be a string or a non-empty list of strings.")
        else:
            ids = self.input_ids
            if isinstance(ids, list) and ids and all(_is_int(t) for t in ids):
                self.is_single, self.batch_size = True, 1
            elif (
                isinstance(ids, list)
                and ids
                and all(isinstance(x, list) and all(_is_int(t) for t in x) for x in ids)
            ):
                self.is_single, self.batch_size = False, len(ids)
            elif isinstance(ids, list) and not ids:
                raise ValueError("The input is empty.")
            else:
                raise ValueError("`input_ids` must be a list of integers or a list of such lists.")
        for name, default in (
            ("stream", False),
            ("return_text_in_logprobs", False),
            ("log_metrics", True),
            ("background", False),
            ("no_logs", False),
        ):
            value = getattr(self, name)
            if value is None:  # JSON null means the default, as in SGLang
                setattr(self, name, default)
            elif not isinstance(value, bool):
                raise ValueError(f"`{name}` must be a boolean.")
        if self.priority is not None and not _is_int(self.priority):
            raise ValueError("`priority` must be an integer.")
        if self.received_time is not None and (
            isinstance(self.received_time, bool)
            or not isinstance(self.received_time, (int, float))
            or not math.isfinite(self.received_time)
        ):
            raise ValueError("`received_time` must be a finite number (seconds since the epoch).")
        self.extra_key = self._per_item("extra_key", self.extra_key, str, None)
        self.sampling_params = self._per_item("sampling_params", self.sampling_params, dict, {})
        self.return_logprob = self._per_item("return_logprob", self.return_logprob, bool, False)
        self.logprob_start_len = self._per_item(
            "logprob_start_len", self.logprob_start_len, int, -1
        )
        self.top_logprobs_num = self._per_item("top_logprobs_num", self.top_logprobs_num, int, 0)
        for v in self.top_logprobs_num:
            if v < 0:
                raise ValueError("`top_logprobs_num` must be non-negative.")
        for v in self.logprob_start_len:
            if v < -1:
                raise ValueError("`logprob_start_len` must be -1 or a position in the prompt.")
        self.rid = self._rids()

    def _per_item(self, name: str, value: Any, typ: type, default: Any) -> List[Any]:
        n = self.batch_size
        if value is None:
            return [default] * n
        if isinstance(value, list) and not (typ is dict and n == 1 and not value):
            if self.is_single and typ is not list:
                raise ValueError(f"`{name}` must be a single {typ.__name__} for a single prompt.")
            if len(value) != n:
                raise ValueError(f"`{name}` has {len(value)} entries for {n} prompts.")
            items = value
        else:
            items = [value] * n
        for v in items:  # a null entry means the default for that prompt
            if v is not None and (not isinstance(v, typ) or (typ is int and isinstance(v, bool))):
                raise ValueError(f"`{name}` must be a {typ.__name__}, got {type(v).__name__}.")
        return [v if v is not None else default for v in items]

    def _rids(self) -> List[str]:
        rid = self.rid
        if rid is None:
            return [uuid.uuid4().hex for _ in range(self.batch_size)]
        if isinstance(rid, str):
            if not rid:
                raise ValueError("`rid` must be a non-empty string.")
            if self.batch_size != 1:
                raise ValueError("`rid` must be a list with one id per prompt.")
            return [rid]
        if (
            isinstance(rid, list)
            and len(rid) == self.batch_size
            and all(isinstance(r, str) and r for r in rid)
        ):
            if len(set(rid)) != len(rid):
                raise ValueError(f"Duplicate request ID detected in the batch: {rid}")
            return rid
        raise ValueError("`rid` must be a non-empty string or a list of them, one per prompt.")

    def item(self, i: int) -> "GenerateItem":
        """The i-th prompt of a normalized request."""
        text = (self.text if self.is_single else self.text[i]) if self.text is not None else None
        ids = (
            (self.input_ids if self.is_single else self.input_ids[i])
            if self.input_ids is not None
            else None
        )
        return GenerateItem(
            text=text,
            input_ids=ids,
            sampling_params=self.sampling_params[i] or {},
            rid=self.rid[i],
            return_logprob=self.return_logprob[i],
            logprob_start_len=self.logprob_start_len[i],
            top_logprobs_num=self.top_logprobs_num[i],
            extra_key=self.extra_key[i],
        )


@dataclass(frozen=True)
class GenerateItem:
    """One prompt of a (possibly batched) generate request, with its per-prompt fields."""

    text: Optional[str]
    input_ids: Optional[List[int]]
    sampling_params: Dict[str, Any]
    rid: str
    return_logprob: bool
    logprob_start_len: int
    top_logprobs_num: int
    extra_key: Optional[str]


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)
