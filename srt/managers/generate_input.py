"""GenerateReqInput: the native /generate body (and Engine.generate arguments), checked field by field.

Every malformed value raises ValueError with a message naming the field; the HTTP layer turns
that into a 400, so nothing malformed ever reaches the scheduler.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Union


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
    extra_key: Optional[str] = None
    log_metrics: bool = True
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
    )

    @classmethod
    def from_json(cls, body: Any) -> "GenerateReqInput":
        if not isinstance(body, dict):
            raise ValueError("The request body must be a JSON object.")
        unknown = sorted(k for k in body if k not in cls._FIELDS)
        if unknown:
            raise ValueError(f"Unknown field(s) in the request: {', '.join(unknown)}")
        return cls(**{k: body[k] for k in cls._FIELDS if k in body})

    def normalize(self) -> None:
        """Check types, decide single vs batch, fill defaults."""
        if (self.text is None) == (self.input_ids is None):
            raise ValueError("Exactly one of `text` and `input_ids` must be given.")
        if self.text is not None:
            if isinstance(self.text, str):
                self.is_single, self.batch_size = True, 1
            elif isinstance(self.text, list) and self.text and all(isinstance(t, str) for t in self.text):
                self.is_single, self.batch_size = False, len(self.text)
            else:
                raise ValueError("`text` must be a string or a non-empty list of strings.")
        else:
            ids = self.input_ids
            if isinstance(ids, list) and ids and all(_is_int(t) for t in ids):
                self.is_single, self.batch_size = True, 1
            elif isinstance(ids, list) and ids and all(isinstance(x, list) and all(_is_int(t) for t in x) for x in ids):
                self.is_single, self.batch_size = False, len(ids)
            elif isinstance(ids, list) and not ids:
                raise ValueError("The input is empty.")
            else:
                raise ValueError("`input_ids` must be a list of integers or a list of such lists.")
        for name in ("stream", "return_text_in_logprobs", "log_metrics"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"`{name}` must be a boolean.")
        if self.priority is not None and not _is_int(self.priority):
            raise ValueError("`priority` must be an integer.")
        if self.extra_key is not None and not isinstance(self.extra_key, str):
            raise ValueError("`extra_key` must be a string.")
        self.sampling_params = self._per_item("sampling_params", self.sampling_params, dict, {})
        self.return_logprob = self._per_item("return_logprob", self.return_logprob, bool, False)
        self.logprob_start_len = self._per_item("logprob_start_len", self.logprob_start_len, int, -1)
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
        for v in items:
            ok = isinstance(v, typ) and not (typ is int and isinstance(v, bool))
            if not ok and not (typ is dict and v is None):
                raise ValueError(f"`{name}` must be a {typ.__name__}, got {type(v).__name__}.")
        return [v if v is not None else default for v in items]

    def _rids(self) -> List[str]:
        rid = self.rid
        if rid is None:
            return [uuid.uuid4().hex for _ in range(self.batch_size)]
        if isinstance(rid, str):
            if self.batch_size != 1:
                raise ValueError("`rid` must be a list with one id per prompt.")
            return [rid]
        if isinstance(rid, list) and len(rid) == self.batch_size and all(isinstance(r, str) and r for r in rid):
            if len(set(rid)) != len(rid):
                raise ValueError(f"Duplicate request ID detected in the batch: {rid}")
            return rid
        raise ValueError("`rid` must be a non-empty string or a list of them, one per prompt.")

    def item(self, i: int) -> Dict[str, Any]:
        return {
            "text": (self.text if self.is_single else self.text[i]) if self.text is not None else None,
            "input_ids": (self.input_ids if self.is_single else self.input_ids[i])
            if self.input_ids is not None
            else None,
            "sampling_params": self.sampling_params[i],
            "rid": self.rid[i],
            "return_logprob": self.return_logprob[i],
            "logprob_start_len": self.logprob_start_len[i],
            "top_logprobs_num": self.top_logprobs_num[i],
        }


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)
