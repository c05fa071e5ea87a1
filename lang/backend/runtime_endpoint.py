"""Backend that talks to a running server over its native HTTP API (/generate and friends)."""

from __future__ import annotations

import json
from typing import Any, Dict, Iterator, Optional, Tuple, Union

import requests
from requests.adapters import HTTPAdapter

from sglang.lang.backend.base_backend import NativeApiBackend
from sglang.lang.chat_template import ChatTemplate, chat_template_for_model, get_chat_template

Timeout = Union[None, float, Tuple[float, Optional[float]]]


def _error_message(resp: requests.Response) -> str:
    """The server reports errors as {"error": {"message"}} or {"object": "error", "message"}."""
    try:
        body = resp.json()
    except ValueError:
        return resp.text.strip() or resp.reason
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and "message" in err:
            return str(err["message"])
        if isinstance(err, str):
            return err
        if "message" in body:
            return str(body["message"])
    return json.dumps(body)


class RuntimeEndpoint(NativeApiBackend):
    def __init__(
        self,
        base_url: str,
        api_key: Optional[str] = None,
        chat_template_name: Optional[str] = None,
        timeout: Timeout = (10.0, 600.0),
    ) -> None:
        super().__init__()
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        # One pooled session for every program thread: urllib3 pools are thread-safe and run_batch
        # keeps many requests in flight at once.
        self._session = requests.Session()
        adapter = HTTPAdapter(pool_connections=4, pool_maxsize=256)
        self._session.mount("http://", adapter)
        self._session.mount("https://", adapter)
        self.model_info: Dict[str, Any] = self._call("GET", "/get_model_info").json()
        if chat_template_name is not None:
            self._chat_template = get_chat_template(chat_template_name)

    # --- HTTP ------------------------------------------------------------------------------

    def _call(
        self, method: str, path: str, body: Optional[Dict[str, Any]] = None, stream: bool = False
    ) -> requests.Response:
        try:
            resp = self._session.request(
                method,
                self.base_url + path,
                json=body,
                headers=self._headers,
                stream=stream,
                timeout=self.timeout,
            )
        except requests.RequestException as e:
            raise RuntimeError(f"{method} {self.base_url}{path} failed: {e}") from e
        if resp.status_code != 200:
            msg = _error_message(resp)
            resp.close()
            raise RuntimeError(f"{method} {path} returned HTTP {resp.status_code}: {msg}")
        return resp

    def _request(self, payload: Dict[str, Any]) -> Any:
        return self._call("POST", "/generate", payload).json()

    def _request_stream(self, payload: Dict[str, Any]) -> Iterator[Dict[str, Any]]:
        with self._call("POST", "/generate", payload, stream=True) as resp:
            for line in resp.iter_lines(decode_unicode=True):
                if not line or not line.startswith("data:"):
                    continue
                data = line[len("data:") :].strip()
                if data == "[DONE]":
                    return
                chunk = json.loads(data)
                if isinstance(chunk, dict) and ("error" in chunk or chunk.get("object") == "error"):
                    err = chunk.get("error")
                    msg = (
                        err.get("message")
                        if isinstance(err, dict)
                        else (err or chunk.get("message"))
                    )
                    raise RuntimeError(f"stream from /generate failed: {msg}")
                yield chunk
        raise RuntimeError("stream from /generate ended without [DONE]")

    def _load_chat_template(self) -> ChatTemplate:
        # The server shares our filesystem in the common case; if the tokenizer cannot be loaded
        # here, chat_template_for_model falls back to the model-path table.
        return chat_template_for_model(
            self.model_info.get("model_path", ""),
            tokenizer_path=self.model_info.get("tokenizer_path"),
        )

    # --- server operations -----------------------------------------------------------------

    def flush_cache(self) -> None:
        self._call("POST", "/flush_cache").close()

    def get_server_info(self) -> Dict[str, Any]:
        return self._call("GET", "/server_info").json()

    def get_model_info(self) -> Dict[str, Any]:
        return dict(self.model_info)

    def shutdown(self) -> None:
        self._session.close()
