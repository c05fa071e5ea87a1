"""OpenAI-format errors: one exception type, its JSON body, and the mapping from runtime exceptions.

HTTP error responses carry a flat body {"object": "error", "message", "type", "param", "code"}.
Errors that happen after the 200 of a stream are sent as an SSE event {"error": {...}}, the shape
the OpenAI clients look for inside a stream (they raise instead of parsing it as a chunk).
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import orjson
from fastapi.responses import Response
from pydantic import ValidationError

from sglang.srt.managers.tokenizer_manager import GenerateError

_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    404: "NotFoundError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


class OpenAIError(Exception):
    """An error meant for the client, with its HTTP status."""

    def __init__(self, status_code: int, message: str, param: Optional[str] = None):
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.param = param

    def body(self) -> Dict[str, Any]:
        return {
            "object": "error",
            "message": self.message,
            "type": _TYPES.get(self.status_code, "APIError"),
            "param": self.param,
            "code": self.status_code,
        }


def to_openai_error(exc: BaseException) -> OpenAIError:
    """Map what the request path raises onto an OpenAIError (unknown exceptions are 500s)."""
    if isinstance(exc, OpenAIError):
        return exc
    if isinstance(exc, ValidationError):
        return _from_validation(exc)
    if isinstance(exc, GenerateError):
        return OpenAIError(exc.status_code, exc.message)
    if isinstance(exc, ValueError):
        # The runtime's convention: ValueError is a bad request (see tokenizer_manager).
        return OpenAIError(400, str(exc))
    return OpenAIError(500, f"Internal server error: {type(exc).__name__}: {exc}")


def _from_validation(exc: ValidationError) -> OpenAIError:
    errs = exc.errors(include_url=False)
    if not errs:
        return OpenAIError(400, str(exc))
    first = errs[0]
    loc = [str(p) for p in first.get("loc", ())]
    # The top-level field is the OpenAI `param`; the full path (with union members) helps a human.
    param = loc[0] if loc else None
    msg = f"{'.'.join(loc)}: {first.get('msg')}" if loc else str(first.get("msg"))
    if len(errs) > 1:
        msg += f" (and {len(errs) - 1} more validation error(s))"
    return OpenAIError(400, msg, param)


def error_response(err: OpenAIError) -> Response:
    return Response(content=orjson.dumps(err.body()), media_type="application/json", status_code=err.status_code)


def stream_error_event(err: OpenAIError) -> bytes:
    return b"data: " + orjson.dumps({"error": err.body()}) + b"\n\n"
