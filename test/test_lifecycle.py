"""Process lifecycle: a dying child takes the server down cleanly; SIGTERM leaves no orphans or ipc files."""

from __future__ import annotations

import json
import os
import signal
import socket
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


def _read_stream(url: str, out: dict, i: int) -> None:
    body = {
        "text": f"Story {i}:",
        "stream": True,
        "sampling_params": {"max_new_tokens": 4000, "ignore_eos": True},
    }
    lines = []
    try:
        with requests.post(url + "/generate", json=body, stream=True, timeout=300) as r:
            for line in r.iter_lines():
                if line.startswith(b"data: "):
                    lines.append(line[6:])
    except requests.RequestException as e:
        lines.append(repr(e).encode())
    out[i] = lines


def test_sigterm_drains_streams_cuts_a_stuck_reader_and_exits_0():
    """8 reading streams and one client that never reads: SIGTERM refuses new requests, gives the running
    ones --graceful-shutdown-timeout, then ends each stream with an error event and [DONE] (not a cut
    connection), and the server exits 0 with no orphan process and no ipc folder left."""
    srv = ServerProcess(["--max-total-tokens", "40000", "--graceful-shutdown-timeout", "2"])
    info = srv.server_info()
    pids, ipc_dir = info["process_pids"], info["ipc_dir"]
    streams: dict = {}
    readers = [threading.Thread(target=_read_stream, args=(srv.url, streams, i)) for i in range(8)]
    for t in readers:
        t.start()
    stuck = socket.socket()
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stuck.connect(("127.0.0.1", srv.port))
    body = json.dumps(
        {
            "text": "Never read",
            "stream": True,
            "sampling_params": {"max_new_tokens": 4000, "ignore_eos": True},
        }
    )
    stuck.sendall(
        f"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body.encode()
    )
    assert _wait(lambda: srv.server_info()["num_running_reqs"] == 9 and len(streams) == 0, 300)
    srv.proc.send_signal(signal.SIGTERM)
    assert _wait(lambda: srv.proc.poll() is not None, 300), "the server did not exit"
    assert srv.proc.returncode == 0
    for t in readers:
        t.join(60)
    stuck.close()
    for i in range(8):
        lines = streams[i]
        assert lines[-1] == b"[DONE]", lines[-3:]
        last = json.loads(lines[-2])
        assert last.get("object") == "error" and "shutting down" in last["message"], last
        done = [json.loads(x) for x in lines[:-2] if x.startswith(b"{")]
        assert (
            done and done[-1]["meta_info"]["completion_tokens"] < 4000
        )  # cut by the shutdown, not finished
    assert _wait(lambda: all(_gone(p) for p in pids.values()), 30), "orphan processes left"
    assert not os.path.exists(ipc_dir)
    assert "leaked semaphore" not in srv.log_text()  # killed children hold no named semaphores
    srv.stop()


def test_kill_9_of_the_server_leaves_no_children_and_no_ipc_folder():
    srv = ServerProcess(["--max-total-tokens", "2048", "--skip-server-warmup"])
    info = srv.server_info()
    pids, ipc_dir = info["process_pids"], info["ipc_dir"]
    os.kill(srv.proc.pid, signal.SIGKILL)
    srv.proc.wait(30)
    assert _wait(lambda: all(_gone(p) for p in pids.values()), 60), "orphan processes left"
    assert _wait(lambda: not os.path.exists(ipc_dir), 60), "the ipc folder was left behind"
    srv.stop()
