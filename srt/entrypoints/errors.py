"""One error shape for every HTTP route, native and OpenAI-compatible alike.

Body of every error response (and of the SSE error event a stream ends with after its 200):

    {"object": "error", "message": M, "type": T, "param": P, "code": STATUS,
     "error": {"message": M, "type": T, "param": P, "code": C}}

The top-level fields are SGLang's ErrorResponse; `error` is the object OpenAI clients look for
(the `openai` package reads `body["error"]` first). Both carry the same message and type; C is an
OpenAI-style code such as "model_not_found" where one applies, else the HTTP status. T names the
class of failure after the `openai` package's exception classes, so a client can branch on it.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import orjson
from fastapi.responses import Response
from pydantic import ValidationError

from sglang.srt.managers.tokenizer.request_state import GenerateError

ERROR_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    404: "NotFoundError",
    405: "MethodNotAllowedError",
    408: "RequestTimeoutError",
    413: "RequestTooLargeError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


class ApiError(Exception):
    """An error meant for the client, with its HTTP status."""

    def __init__(
        self,
        status_code: int,
        message: str,
        param: Optional[str] = None,
        code: Optional[str] = None,
    ):
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.param = param
        self.code = code

    @property
    def type(self) -> str:
        return ERROR_TYPES.get(self.status_code, "APIError")

    def body(self) -> Dict[str, Any]:
        inner = {
            "message": self.message,
            "type": self.type,
            "param": self.param,
            "code": self.code or self.status_code,
        }
        return {"object": "error", "message": self.message, "type": self.type, "param": self.param,
                "code": self.status_code, "error": inner}  # fmt: skip


def to_api_error(exc: BaseException) -> ApiError:
    """Map what a request path raises onto an ApiError (anything unexpected is a 500)."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, ValidationError):
        return _from_validation(exc)
    if isinstance(exc, GenerateError):
        return ApiError(exc.status_code, exc.message)
    if isinstance(exc, ValueError):
        # The runtime's convention: ValueError is a bad request (see tokenizer_manager).
        return ApiError(400, str(exc))
    return ApiError(500, f"Internal server error: {type(exc).__name__}: {exc}")


def _from_validation(exc: ValidationError) -> ApiError:
    errs = exc.errors(include_url=False)
    if not errs:
        return ApiError(400, str(exc))
    first = errs[0]
    loc = [str(p) for p in first.get("loc", ())]
    # The top-level field is the OpenAI `param`; the full path (with union members) helps a human.
    param = loc[0] if loc else None
    msg = f"{'.'.join(loc)}: {first.get('msg')}" if loc else str(first.get("msg"))
    if len(errs) > 1:
        msg += f" (and {len(errs) - 1} more validation error(s))"
    return ApiError(400, msg, param)


def error_response(err: ApiError, headers: Optional[Dict[str, str]] = None) -> Response:
    return Response(
        content=orjson.dumps(err.body()),
        media_type="application/json",
        status_code=err.status_code,
        headers=headers,
    )


def bad_request(message: str, param: Optional[str] = None) -> Response:
    return error_response(ApiError(400, message, param))


def stream_error_event(err: ApiError) -> bytes:
    return b"data: " + orjson.dumps(err.body()) + b"\n\n"
