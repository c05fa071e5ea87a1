"""--api-key: every route needs `Authorization: Bearer <key>`, except the health probes.

/health and /health_generate stay open so load balancers and orchestrators can probe without the
secret (they reveal only up or down); /metrics needs the key unless --metrics-without-api-key.
The key is compared in constant time and never echoed (see /server_info).
"""

from __future__ import annotations

import hmac
from typing import Any, FrozenSet

import orjson

from sglang.srt.entrypoints.errors import ApiError

OPEN_PATHS: FrozenSet[str] = frozenset({"/health", "/health_generate"})


class ApiKeyMiddleware:
    def __init__(self, app: Any, api_key: str, metrics_open: bool):
        self.app = app
        self.expected = f"Bearer {api_key}".encode()
        self.open_paths = OPEN_PATHS | ({"/metrics"} if metrics_open else frozenset())

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if (
            scope["type"] != "http"
            or scope.get("path") in self.open_paths
            or self._authorized(scope)
        ):
            await self.app(scope, receive, send)
            return
        err = ApiError(
            401, "Unauthorized: a valid API key is required (Authorization: Bearer <key>)."
        )
        body = orjson.dumps(err.body())
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"www-authenticate", b"Bearer"),
        ]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _authorized(self, scope: Any) -> bool:
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                return hmac.compare_digest(value, self.expected)
        return False
