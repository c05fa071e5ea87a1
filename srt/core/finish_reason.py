"""Why a request finished, as typed values with one wire form.

Processes pass the typed values (pickle / msgpack carry them as dataclasses); the HTTP process turns
them into the wire form once, for `meta_info.finish_reason` (SGLang's JSON: `{"type": "stop",
"matched": ...}`, `{"type": "length", "length": n}`, `{"type": "abort", "message": ...}`), and
`FinishReason.from_wire` reads that form back where only the JSON is at hand (the OpenAI routes)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any, Dict, Optional


class FinishKind(str, Enum):
    STOP = "stop"
    LENGTH = "length"
    ABORT = "abort"


@dataclass(frozen=True)
class FinishReason:
    kind = FinishKind.STOP

    def to_wire(self) -> Dict[str, Any]:
        return {"type": self.kind.value, **asdict(self)}

    @staticmethod
    def from_wire(wire: Optional[Dict[str, Any]]) -> Optional["FinishReason"]:
        if wire is None:
            return None
        kind = wire.get("type")
        if kind == FinishKind.LENGTH.value:
            return FinishLength(int(wire.get("length") or 0))
        if kind == FinishKind.ABORT.value:
            return FinishAbort(
                wire.get("message") or "Aborted", wire.get("status_code"), wire.get("err_type")
            )
        matched = wire.get("matched")
        return (
            FinishMatchedToken(matched)
            if isinstance(matched, int)
            else FinishMatchedStr(matched or "")
        )

    @property
    def openai_reason(self) -> str:
        """OpenAI's finish_reason ("stop" / "length"); an abort is reported as an error instead."""
        return "length" if self.kind is FinishKind.LENGTH else "stop"


@dataclass(frozen=True)
class FinishMatchedToken(FinishReason):
    """A stop token id, EOS, or the end of a grammar; the token itself is not part of the text."""

    matched: int


@dataclass(frozen=True)
class FinishMatchedStr(FinishReason):
    """A stop string or regex match (trimmed from the text unless no_stop_trim)."""

    matched: str


@dataclass(frozen=True)
class FinishLength(FinishReason):
    kind = FinishKind.LENGTH
    length: int


@dataclass(frozen=True)
class FinishAbort(FinishReason):
    kind = FinishKind.ABORT
    message: str = "Aborted"
    status_code: Optional[int] = None
    err_type: Optional[str] = None
