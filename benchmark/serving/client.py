"""One benchmark request over HTTP, timed from the client's side (aiohttp, SSE).

Backends: `sglang` (native /generate, cumulative text and output_ids per chunk), `sglang-oai`
(/v1/completions) and `sglang-oai-chat` (/v1/chat/completions), both OpenAI deltas.

Timing rules (the client's view is the only one that includes the network and the frontend):
- TTFT is the time to the first chunk that carries content, not the first SSE frame: an empty
  bookkeeping frame would make TTFT look too small.
- ITL is per token: a chunk carrying k new tokens after a gap g adds g then k-1 zeros, which is what
  a reader of the stream experiences (coalesced chunks and --stream-interval show up as zeros).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Dict, List, Optional

import aiohttp

from .datasets import BenchRequest

BACKENDS = ("sglang", "sglang-oai", "sglang-oai-chat")


@dataclass
class RequestResult:
    success: bool = False
    status: int = 0
    error: str = ""
    prompt_len: int = 0  # server-reported when available, else planned
    output_len: int = 0  # server-reported completion tokens (0 if unknown)
    cached_tokens: Optional[int] = None
    generated_text: str = ""
    ttft: float = 0.0
    latency: float = 0.0
    itl: List[float] = field(default_factory=list)
    chunk_tokens: List[int] = field(default_factory=list)
    frames: int = 0  # SSE data frames with content
    start: float = 0.0  # perf_counter at send
    finish_reason: Any = None


@dataclass
class RequestConfig:
    base_url: str
    model: str
    stream: bool = True
    ignore_eos: bool = True
    temperature: float = 0.0
    extra_body: Dict[str, Any] = field(default_factory=dict)
    send_token_ids: bool = True  # native backend: send input_ids (exact lengths) rather than text


async def _sse_payloads(resp: aiohttp.ClientResponse) -> AsyncIterator[Any]:
    """JSON objects of `data:` lines until [DONE]; comment and blank lines are skipped."""
    async for raw in resp.content:
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            return
        yield json.loads(data)


class _Timer:
    """Records chunk arrival times and turns them into TTFT and per-token ITL."""

    def __init__(self, out: RequestResult):
        self.out = out
        self.last: Optional[float] = None

    def chunk(self, n_tokens: int) -> None:
        now = time.perf_counter()
        if n_tokens <= 0:
            return
        self.out.frames += 1
        self.out.chunk_tokens.append(n_tokens)
        if self.last is None:
            self.out.ttft = now - self.out.start
            self.out.itl.extend([0.0] * (n_tokens - 1))
        else:
            self.out.itl.append(now - self.last)
            self.out.itl.extend([0.0] * (n_tokens - 1))
        self.last = now


async def _fail_from_status(resp: aiohttp.ClientResponse, out: RequestResult) -> RequestResult:
    body = await resp.text()
    out.status = resp.status
    try:
        parsed = json.loads(body)
        msg = parsed.get("message") or (parsed.get("error") or {}).get("message") or body
    except (ValueError, AttributeError):
        msg = body
    out.error = f"HTTP {resp.status}: {msg}".strip()
    return out


def _error_text(obj: Dict[str, Any]) -> Optional[str]:
    err = obj.get("error")
    if not err:
        return None
    return err.get("message", str(err)) if isinstance(err, dict) else str(err)


# ---------------------------------------------------------------------------- native /generate
async def request_native(
    session: aiohttp.ClientSession, cfg: RequestConfig, req: BenchRequest
) -> RequestResult:
    body: Dict[str, Any] = {
        "sampling_params": {
            "max_new_tokens": req.output_len,
            "temperature": cfg.temperature,
            "ignore_eos": cfg.ignore_eos,
        },
        "stream": cfg.stream,
    }
    if cfg.send_token_ids and req.prompt_ids is not None:
        body["input_ids"] = req.prompt_ids
    else:
        body["text"] = req.prompt
    body.update(cfg.extra_body)
    out = RequestResult(prompt_len=req.prompt_len, start=time.perf_counter())
    timer = _Timer(out)
    try:
        async with session.post(cfg.base_url + "/generate", json=body) as resp:
            if resp.status != 200:
                return await _fail_from_status(resp, out)
            out.status = 200
            last: Optional[Dict[str, Any]] = None
            if cfg.stream:
                seen = 0
                async for obj in _sse_payloads(resp):
                    err = _error_text(obj)
                    if err:
                        out.error = err
                        return out
                    meta = obj.get("meta_info", {})
                    # completion_tokens is cumulative in both streaming modes, so count from it.
                    total = meta.get("completion_tokens", len(obj.get("output_ids") or []))
                    timer.chunk(total - seen)
                    seen = max(seen, total)
                    last = obj
            else:
                last = await resp.json()
                timer.chunk(last.get("meta_info", {}).get("completion_tokens", 0))
    except (aiohttp.ClientError, ValueError, OSError) as e:
        out.error = f"{type(e).__name__}: {e}"
        return out
    out.latency = time.perf_counter() - out.start
    if last is None:
        out.error = "stream ended without a result"
        return out
    meta = last.get("meta_info", {})
    out.generated_text = last.get("text", "")
    out.output_len = int(meta.get("completion_tokens", 0))
    out.prompt_len = int(meta.get("prompt_tokens", req.prompt_len))
    out.cached_tokens = meta.get("cached_tokens")
    out.finish_reason = meta.get("finish_reason")
    if isinstance(out.finish_reason, dict) and out.finish_reason.get("type") == "abort":
        out.error = out.finish_reason.get("message") or "aborted"
        return out
    out.success = True
    return out


# ---------------------------------------------------------------------------- OpenAI routes
def _oai_body(cfg: RequestConfig, req: BenchRequest, chat: bool) -> Dict[str, Any]:
    body: Dict[str, Any] = {
        "model": cfg.model,
        "max_tokens": req.output_len,
        "temperature": cfg.temperature,
        "stream": cfg.stream,
        "ignore_eos": cfg.ignore_eos,
    }
    if cfg.stream:
        body["stream_options"] = {"include_usage": True}
    if chat:
        msgs = []
        if req.system is not None:
            msgs.append({"role": "system", "content": req.system})
        msgs.append({"role": "user", "content": req.user if req.system is not None else req.prompt})
        body["messages"] = msgs
    else:
        body["prompt"] = req.prompt
    body.update(cfg.extra_body)
    return body


def _apply_usage(out: RequestResult, usage: Optional[Dict[str, Any]]) -> None:
    if not usage:
        return
    out.output_len = int(usage.get("completion_tokens") or out.output_len)
    out.prompt_len = int(usage.get("prompt_tokens") or out.prompt_len)
    details = usage.get("prompt_tokens_details") or {}
    if details.get("cached_tokens") is not None:
        out.cached_tokens = int(details["cached_tokens"])


async def _request_oai(
    session: aiohttp.ClientSession, cfg: RequestConfig, req: BenchRequest, chat: bool
) -> RequestResult:
    path = "/v1/chat/completions" if chat else "/v1/completions"
    out = RequestResult(prompt_len=req.prompt_len, start=time.perf_counter())
    timer = _Timer(out)
    pieces: List[str] = []
    try:
        async with session.post(cfg.base_url + path, json=_oai_body(cfg, req, chat)) as resp:
            if resp.status != 200:
                return await _fail_from_status(resp, out)
            out.status = 200
            if cfg.stream:
                async for obj in _sse_payloads(resp):
                    err = _error_text(obj)
                    if err:
                        out.error = err
                        return out
                    _apply_usage(out, obj.get("usage"))
                    for choice in obj.get("choices") or []:
                        delta = (
                            (choice.get("delta") or {}).get("content")
                            if chat
                            else choice.get("text")
                        )
                        if delta:
                            pieces.append(delta)
                            timer.chunk(1)  # token counts per delta are not reported; one per frame
                        if choice.get("finish_reason"):
                            out.finish_reason = choice["finish_reason"]
            else:
                obj = await resp.json()
                choice = (obj.get("choices") or [{}])[0]
                text = (choice.get("message") or {}).get("content") if chat else choice.get("text")
                pieces.append(text or "")
                out.finish_reason = choice.get("finish_reason")
                _apply_usage(out, obj.get("usage"))
                timer.chunk(max(out.output_len, 1))
    except (aiohttp.ClientError, ValueError, OSError) as e:
        out.error = f"{type(e).__name__}: {e}"
        return out
    out.latency = time.perf_counter() - out.start
    out.generated_text = "".join(pieces)
    if out.finish_reason == "abort":
        out.error = "aborted"
        return out
    out.success = True
    return out


async def request_oai_completions(
    session: aiohttp.ClientSession, cfg: RequestConfig, req: BenchRequest
) -> RequestResult:
    return await _request_oai(session, cfg, req, chat=False)


async def request_oai_chat(
    session: aiohttp.ClientSession, cfg: RequestConfig, req: BenchRequest
) -> RequestResult:
    return await _request_oai(session, cfg, req, chat=True)


REQUEST_FUNCS: Dict[str, Callable] = {
    "sglang": request_native,
    "sglang-oai": request_oai_completions,
    "sglang-oai-chat": request_oai_chat,
}
