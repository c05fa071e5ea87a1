"""The formatter and linter keep the code uniform: CI fails on a file ruff would change or flag."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _ruff(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("ruff")
    cmd = [exe] if exe else [sys.executable, "-m", "ruff"]
    return subprocess.run([*cmd, *args], cwd=ROOT, capture_output=True, text=True, check=False)


@pytest.mark.parametrize(
    "args", [("check", "."), ("format", "--check", ".")], ids=["lint", "format"]
)
def test_ruff_is_clean(args):
    r = _ruff(*args)
    assert r.returncode == 0, f"ruff {' '.join(args)} failed:\n{r.stdout}{r.stderr}"
