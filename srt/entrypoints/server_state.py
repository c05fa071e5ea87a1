"""What the HTTP routes share: the server's state and the JSON / SSE response helpers."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Optional

import orjson
from fastapi import Request
from fastapi.responses import Response

from sglang.srt.entrypoints.body_limits import parse_json_body
from sglang.srt.entrypoints.launcher import Runtime
from sglang.srt.managers.tokenizer.tokenizer_manager import TokenizerManager
from sglang.srt.server_args import ServerArgs


class ServerState:
    def __init__(self, server_args: ServerArgs, runtime: Runtime):
        self.server_args = server_args
        self.runtime = runtime
        self.tm: Optional[TokenizerManager] = None
        self.ready = False
        self.shutting_down = False
        self.failure: Optional[str] = None  # why the server is going down, if a process died
        self.loop: Optional[asyncio.AbstractEventLoop] = None


def json_response(obj: Any, status_code: int = 200) -> Response:
    return Response(
        content=orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY),
        media_type="application/json",
        status_code=status_code,
    )


async def read_json(request: Request) -> Any:
    return parse_json_body(await request.body())


def sse(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n\n"


async def start_stream(gen: AsyncIterator[Any]):
    """Produce the first chunk before the 200, so validation failures become real status codes."""
    try:
        first = await gen.__anext__()
    except StopAsyncIteration:
        first = None
    return first
