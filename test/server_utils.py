"""Launching real `sglang serve` processes for tests, and the idle KV invariant check after each test."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional

import requests

# The API key of the `guarded_server` fixture (conftest.py).
GUARD_KEY = "sk-guarded-test-key"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    def __init__(
        self,
        args: Optional[List[str]] = None,
        env: Optional[Dict[str, str]] = None,
        startup_timeout: float = 240.0,
        api_key: Optional[str] = None,
    ):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = list(args or []) + (["--api-key", api_key] if api_key else [])
        # What the helpers below send: the key, when the server wants one.
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.log = tempfile.NamedTemporaryFile(
            "w+", prefix="sglang-test-", suffix=".log", delete=False
        )
        full_env = dict(os.environ)
        full_env.setdefault("SGLANG_STRICT_MEM_CHECK", "1")
        full_env.update(env or {})
        cmd = [
            sys.executable,
            "-m",
            "sglang.srt.entrypoints.cli",
            "serve",
            "--port",
            str(self.port),
            *self.args,
        ]
        self.proc = subprocess.Popen(
            cmd, stdout=self.log, stderr=subprocess.STDOUT, env=full_env, start_new_session=True
        )
        self._wait_healthy(startup_timeout)

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"server exited during startup ({self.proc.returncode}):\n{self.log_tail()}"
                )
            try:
                if requests.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"server did not become healthy in {timeout}s:\n{self.log_tail()}")

    def log_text(self) -> str:
        with open(self.log.name) as f:
            return f.read()

    def log_tail(self, n: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-n:])

    def alive(self) -> bool:
        return self.proc.poll() is None

    def server_info(self) -> dict:
        r = requests.get(self.url + "/server_info", headers=self.headers, timeout=30)
        r.raise_for_status()
        return r.json()

    def wait_idle(self, timeout: float = 60.0) -> dict:
        deadline = time.time() + timeout
        info = {}
        while time.time() < deadline:
            info = self.server_info()
            if info["num_running_reqs"] == 0 and info["num_waiting_reqs"] == 0:
                return info
            time.sleep(0.2)
        raise AssertionError(f"server not idle after {timeout}s: {info}")

    def check_idle_invariant(self) -> None:
        """available + evictable + protected == total, nothing protected, when idle."""
        assert self.alive(), f"server died:\n{self.log_tail()}"
        info = self.wait_idle()
        # The loop checks its own invariant on every idle pass (each <= 50 ms apart); give it two.
        time.sleep(0.1)
        info = self.server_info()
        total = info["max_total_num_tokens"]
        a, e, p = info["available_tokens"], info["evictable_tokens"], info["protected_tokens"]
        assert a + e + p == total, f"KV accounting broken: {a} + {e} + {p} != {total}"
        assert p == 0, f"{p} tokens still protected while idle"
        if "hicache_host_total_tokens" in info:  # the host tier too, once its copies settle
            info = self._wait_host_settled()
            ha, he = info["hicache_host_available_tokens"], info["hicache_host_evictable_tokens"]
            assert ha + he == info["hicache_host_total_tokens"], f"host accounting broken: {info}"
        assert "leak" not in self.log_text().lower(), self.log_tail()

    def _wait_host_settled(self, timeout: float = 60.0) -> dict:
        deadline = time.time() + timeout
        while True:
            info = self.server_info()
            if info["hicache_host_protected_tokens"] == 0 or time.time() > deadline:
                return info
            time.sleep(0.1)

    def stop(self) -> None:
        """SIGTERM the server's process group (SIGKILL if it lingers); the log file goes with it
        (set SGLANG_KEEP_TEST_LOGS=1 to keep it)."""
        self._terminate()
        if not os.environ.get("SGLANG_KEEP_TEST_LOGS"):
            try:
                os.unlink(self.log.name)
            except OSError:
                pass

    def _terminate(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)


def generate(url: str, text=None, input_ids=None, timeout: float = 120, **kw) -> requests.Response:
    body = dict(kw)
    if text is not None:
        body["text"] = text
    if input_ids is not None:
        body["input_ids"] = input_ids
    return requests.post(url + "/generate", json=body, timeout=timeout)


def stream_chunks(
    url: str, body: dict, timeout: float = 120, on_chunk: Optional[Callable[[dict], None]] = None
) -> List[dict]:
    """The parsed chunks of a streamed /generate; `on_chunk` sees each one as it arrives."""
    import json

    out = []
    with requests.post(
        url + "/generate", json=dict(body, stream=True), stream=True, timeout=timeout
    ) as r:
        assert r.status_code == 200, r.text
        for line in r.iter_lines():
            if not line:
                continue
            assert line.startswith(b"data: "), line
            data = line[6:]
            if data == b"[DONE]":
                break
            out.append(json.loads(data))
            if on_chunk is not None:
                on_chunk(out[-1])
    return out


def assert_error_shape(r: requests.Response, status: int, typ: str) -> dict:
    """The one error body of every route (srt/entrypoints/errors.py); returns it."""
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"object", "message", "type", "param", "code", "error"}, body
    assert (body["object"], body["type"], body["code"]) == ("error", typ, status), body
    assert (
        body["message"]
        and body["error"]["message"] == body["message"]
        and body["error"]["type"] == typ
    )
    return body
