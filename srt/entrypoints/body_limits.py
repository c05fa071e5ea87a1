"""Request bodies with limits: size (413 before reading), upload time (408) and JSON nesting depth.

An ASGI middleware reads every request body itself, before any route runs: a Content-Length over
--max-request-bytes is refused unread, a body that grows past it while streaming in is cut off,
and an upload that takes longer than --request-read-timeout is answered 408 and closed. The route
then sees the buffered body as usual (later receive() calls still report a disconnect).
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Dict, List, Optional

import orjson

from sglang.srt.entrypoints.errors import ApiError

# Deeper JSON than any real request needs; deeper values overflow the recursion of the encoders
# that carry a request to the scheduler.
MAX_JSON_DEPTH = 64
_SCALARS = (int, float, str, bool, type(None))

Scope = Dict[str, Any]
Message = Dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class BodyLimitMiddleware:
    def __init__(self, app: Any, max_bytes: int, read_timeout: float):
        self.app = app
        self.max_bytes = max_bytes
        self.read_timeout = read_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await _reply(send, self._too_large(f" ({declared} bytes)"))
            return
        try:
            body = await asyncio.wait_for(self._read(receive), self.read_timeout)
        except asyncio.TimeoutError:
            err = ApiError(408, f"The request body did not arrive within {self.read_timeout:g} s.")
            await _reply(send, err, close=True)
            return
        except _TooLarge:
            await _reply(send, self._too_large(""), close=True)
            return
        if body is None:
            return  # the client left while sending
        await self.app(scope, _replay(body, receive), send)

    def _too_large(self, size: str) -> ApiError:
        return ApiError(
            413,
            f"The request body{size} is larger than this server accepts ({self.max_bytes} bytes; --max-request-bytes).",
        )

    async def _read(self, receive: Receive) -> Optional[bytes]:
        chunks: List[bytes] = []
        size = 0
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return None
            chunk = msg.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                raise _TooLarge()
            chunks.append(chunk)
            if not msg.get("more_body", False):
                return b"".join(chunks)


class _TooLarge(Exception):
    pass


def _content_length(scope: Scope) -> Optional[int]:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # the connection's later events (a disconnect)

    return replay


async def _reply(send: Send, err: ApiError, close: bool = False) -> None:
    body = orjson.dumps(err.body())
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": err.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def json_depth_exceeds(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether a parsed JSON value nests deeper than `limit` (lists of scalars are skipped in C)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            if set(map(type, node)).issubset(_SCALARS):
                continue
            children = node
        else:
            continue
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return False


def parse_json_body(raw: bytes) -> Any:
    """The body as JSON; ValueError (a 400) if it is empty, invalid or nested too deep."""
    if not raw:
        raise ValueError("The request body is empty; expected a JSON object.")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise ValueError(f"Invalid JSON in the request body: {e}") from None
    if json_depth_exceeds(body):
        raise ValueError(f"The request body nests deeper than {MAX_JSON_DEPTH} levels.")
    return body
