"""The first fifteen minutes: a busy port, help text, typos, bad model paths and an unguarded Engine
script each get one clear message, fast, before anything slow starts."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import psutil
from server_utils import free_port

CLI = [sys.executable, "-m", "sglang.srt.entrypoints.cli"]


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def test_a_busy_port_is_reported_before_the_model_loads():
    port = free_port()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port))
        holder.listen(1)
        proc = subprocess.Popen(
            [*CLI, "serve", "--port", str(port)],
            stderr=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        children_seen = 0
        try:
            while proc.poll() is None:
                try:
                    children_seen = max(
                        children_seen, len(psutil.Process(proc.pid).children(recursive=True))
                    )
                except psutil.NoSuchProcess:
                    break
                time.sleep(0.01)
            out, err = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 1
    assert f"Port {port} on 127.0.0.1 is already in use" in err and "--port" in err, err
    assert f"PID {os.getpid()}" in err  # the process holding it, when it can be seen
    # Before anything slow: no scheduler or detokenizer process was started, no weights were read.
    assert children_seen == 0 and "Loading weights" not in err + out
    assert "Traceback" not in err


def test_help_lists_defaults_and_a_typo_suggests_the_flag():
    r = _cli("serve", "--help")
    assert r.returncode == 0
    assert (
        "--port PORT" in r.stdout
        and "(default: 30000)" in r.stdout
        and "(default: 127.0.0.1)" in r.stdout
    )
    r = _cli("serve", "--prot", "30001")
    assert r.returncode == 2
    assert "usage: sglang serve" in r.stderr and "--prot (did you mean --port?)" in r.stderr, (
        r.stderr
    )
    r = _cli("serve", "--port", "eighty")
    assert (
        r.returncode == 2 and "usage: sglang serve" in r.stderr and "invalid int value" in r.stderr
    )


def test_a_model_path_that_cannot_work_is_one_line(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    for path, fragment in (
        (empty, "folder without config.json"),
        (text, "not a .gguf file"),
        (tmp_path / "nope", "does not exist"),
    ):
        r = _cli("serve", "--model-path", str(path), "--port", str(free_port()))
        assert r.returncode == 1 and fragment in r.stderr, r.stderr
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_an_engine_script_without_a_main_guard_says_what_to_do(tmp_path):
    script = tmp_path / "bad_engine.py"
    script.write_text(
        'from sglang import Engine\n\nengine = Engine()\nprint(engine.generate("Hi"))\n'
    )
    r = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, check=False
    )
    assert r.returncode != 0
    assert (
        f"top level of {script} (line 3)" in r.stderr and 'if __name__ == "__main__":' in r.stderr
    ), r.stderr
    assert "died during startup" not in r.stderr  # refused before any process started
