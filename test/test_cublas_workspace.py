"""--cublas-workspace-kib: the environment torch reads at its first cuBLAS call."""

import pytest

from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.cublas_workspace import configure_cublas_workspace

VARS = ("CUBLAS_WORKSPACE_CONFIG", "CUBLASLT_WORKSPACE_SIZE")


@pytest.fixture
def clean_env(monkeypatch):
    for v in VARS:
        monkeypatch.delenv(v, raising=False)
    return monkeypatch


def test_sets_both_variables(clean_env) -> None:
    import os

    assert configure_cublas_workspace(64) == 64
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":64:1"
    assert os.environ["CUBLASLT_WORKSPACE_SIZE"] == "64"


def test_default_and_user_setting_left_alone(clean_env) -> None:
    import os

    assert configure_cublas_workspace(-1) is None and not any(v in os.environ for v in VARS)
    assert configure_cublas_workspace(None) is None and not any(v in os.environ for v in VARS)
    clean_env.setenv("CUBLASLT_WORKSPACE_SIZE", "4096")
    assert configure_cublas_workspace(64) is None
    assert (
        os.environ["CUBLASLT_WORKSPACE_SIZE"] == "4096"
        and "CUBLAS_WORKSPACE_CONFIG" not in os.environ
    )


def test_flag_default_and_validation() -> None:
    assert ServerArgs().cublas_workspace_kib == 64
    assert ServerArgs(cublas_workspace_kib=-1).cublas_workspace_kib == -1
    with pytest.raises(ValueError, match="cublas-workspace-kib"):
        ServerArgs(cublas_workspace_kib=-2)
