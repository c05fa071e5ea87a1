"""Process lifecycle: a dying child takes the server down cleanly; SIGTERM leaves no orphans or ipc files."""

from __future__ import annotations

import os
import signal
import threading
import time

import psutil
import requests
from server_utils import ServerProcess


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait(cond, timeout: float) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.2)
    return False


def test_killing_the_detokenizer_ends_the_server_cleanly():
    srv = ServerProcess(["--max-total-tokens", "4096"])
    try:
        info = srv.server_info()
        pids, ipc_dir = info["process_pids"], info["ipc_dir"]
        result = {}

        def client():
            try:
                r = requests.post(
                    srv.url + "/generate",
                    timeout=60,
                    json={
                        "text": "Write a long story",
                        "sampling_params": {"max_new_tokens": 2000, "ignore_eos": True},
                    },
                )
                result["status"] = r.status_code
            except requests.RequestException as e:
                result["error"] = repr(e)

        t = threading.Thread(target=client)
        t.start()
        time.sleep(1.5)
        os.kill(pids["detokenizer"], signal.SIGKILL)
        t.join(30)
        assert not t.is_alive(), "the client hung after the detokenizer died"
        assert result.get("status", 500) >= 500 or "error" in result, result
        assert _wait(lambda: srv.proc.poll() is not None, 30), "the server kept running"
        assert _wait(lambda: all(_gone(p) for p in pids.values()), 15), "orphan processes left"
        assert not os.path.exists(ipc_dir), "ipc files left behind"
    finally:
        srv.stop()


def test_sigterm_shuts_everything_down():
    srv = ServerProcess(["--max-total-tokens", "4096"])
    info = srv.server_info()
    pids, ipc_dir = info["process_pids"], info["ipc_dir"]
    srv.proc.send_signal(signal.SIGTERM)
    assert _wait(lambda: srv.proc.poll() is not None, 30)
    assert _wait(lambda: all(_gone(p) for p in pids.values()), 15), "orphan processes left"
    assert not os.path.exists(ipc_dir)
