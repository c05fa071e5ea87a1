"""The few server calls a benchmark makes besides generation: readiness, model info, stats, flush."""

from __future__ import annotations

import time
from typing import Any, Dict, Optional

import requests


def wait_ready(base_url: str, timeout: float = 60.0) -> None:
    deadline = time.time() + timeout
    last = ""
    while time.time() < deadline:
        try:
            r = requests.get(base_url + "/health", timeout=5)
            if r.status_code == 200:
                return
            last = f"HTTP {r.status_code}"
        except requests.RequestException as e:
            last = str(e)
        time.sleep(0.5)
    raise TimeoutError(f"{base_url} not ready after {timeout:.0f}s ({last})")


def get_model_info(base_url: str) -> Dict[str, Any]:
    for path in ("/model_info", "/get_model_info"):
        try:
            r = requests.get(base_url + path, timeout=10)
            if r.status_code == 200:
                return r.json()
        except requests.RequestException:
            pass
    return {}


def get_model_name(base_url: str) -> Optional[str]:
    """The served model name: /v1/models when the OpenAI routes exist, else /model_info."""
    try:
        r = requests.get(base_url + "/v1/models", timeout=10)
        if r.status_code == 200:
            data = r.json().get("data") or []
            if data:
                return data[0].get("id")
    except (requests.RequestException, ValueError):
        pass
    info = get_model_info(base_url)
    return info.get("served_model_name") or info.get("model_path")


def get_server_info(base_url: str) -> Dict[str, Any]:
    try:
        r = requests.get(base_url + "/server_info", timeout=30)
        if r.status_code == 200:
            return r.json()
    except requests.RequestException:
        pass
    return {}


def flush_cache(base_url: str, attempts: int = 20) -> bool:
    """The server refuses to flush while requests run; retry briefly after a warm-up."""
    for _ in range(attempts):
        try:
            r = requests.post(base_url + "/flush_cache", timeout=30)
            if r.status_code == 200:
                return True
        except requests.RequestException:
            pass
        time.sleep(0.5)
    return False
