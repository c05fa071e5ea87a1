"""Process plumbing: logging format, parent-death watch, and killing a process tree."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sys
import threading
import time
from typing import Optional

import psutil


def configure_logger(log_level: str, prefix: str = "") -> None:
    level = getattr(logging, log_level.upper(), logging.INFO)
    fmt = f"[%(asctime)s{prefix}] %(message)s"
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(fmt, datefmt="%Y-%m-%d %H:%M:%S"))
    root.addHandler(handler)
    root.setLevel(level)
    for noisy in ("uvicorn.access", "httpx", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def kill_self_when_parent_dies(poll_s: float = 0.5, cleanup_dir: Optional[str] = None) -> None:
    """Children must never outlive the server: exit as soon as the parent process is gone.

    A parent killed outright (SIGKILL) cannot remove its IPC socket folder; its children do."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            if os.getppid() != parent or not psutil.pid_exists(parent):
                if cleanup_dir:
                    shutil.rmtree(cleanup_dir, ignore_errors=True)
                os._exit(0)
            time.sleep(poll_s)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def kill_process_tree(
    pid: Optional[int] = None, include_parent: bool = True, sig: int = signal.SIGKILL
) -> None:
    pid = pid or os.getpid()
    try:
        proc = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    for child in proc.children(recursive=True):
        try:
            child.send_signal(sig)
        except psutil.NoSuchProcess:
            pass
    if include_parent:
        try:
            proc.send_signal(sig)
        except psutil.NoSuchProcess:
            pass
