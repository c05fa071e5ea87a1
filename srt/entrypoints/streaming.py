"""SSE responses that cannot be held open forever by a client that stops reading.

Each event is handed to the server with a deadline (--slow-consumer-timeout). When the socket has
not drained in that time the stream ends: the body generator is closed (its cleanup aborts the
request in the scheduler) and the connection is closed without finishing the response, so a stuck
reader pins one socket buffer at most, never the request's KV cache or a growing output backlog.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, AsyncIterator

from fastapi.responses import StreamingResponse

logger = logging.getLogger(__name__)


class ServerStream(StreamingResponse):
    def __init__(self, body: AsyncIterator[bytes], send_timeout: float, **kw: Any):
        super().__init__(body, media_type="text/event-stream", **kw)
        self.send_timeout = send_timeout

    async def stream_response(self, send: Any) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        async for chunk in self.body_iterator:
            if isinstance(chunk, str):
                chunk = chunk.encode(self.charset)
            try:
                await asyncio.wait_for(
                    send({"type": "http.response.body", "body": chunk, "more_body": True}),
                    self.send_timeout,
                )
            except asyncio.TimeoutError:
                logger.warning(
                    "A streaming client read nothing for %.0f s; closing its connection.",
                    self.send_timeout,
                )
                await self.body_iterator.aclose()
                return
        await send({"type": "http.response.body", "body": b"", "more_body": False})
