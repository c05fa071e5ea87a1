"""A GGUF file's metadata (what the model config is built from), cached on disk by content.

Parsing a GGUF header (its vocabulary arrays) takes seconds; every server start and test needs it,
so the result is cached (utils/file_cache.py). model_loader/gguf_reader.py reads the tensors."""

from __future__ import annotations

import functools
import json
import os
from typing import Any, Dict, Set, Tuple

from sglang.srt.utils.file_cache import cache_dir


def gguf_cache_dir(path: str) -> str:
    return cache_dir("gguf", path)


@functools.lru_cache(maxsize=4)
def gguf_reader(path: str):
    import gguf

    return gguf.GGUFReader(path)


def read_gguf_metadata(path: str) -> Tuple[Dict[str, Any], Set[str]]:
    cached = os.path.join(gguf_cache_dir(path), "metadata.json")
    if os.path.exists(cached):
        with open(cached) as f:
            d = json.load(f)
        return d["metadata"], set(d["tensors"])
    reader = gguf_reader(path)
    md: Dict[str, Any] = {}
    for name, f in reader.fields.items():
        if name.startswith("tokenizer.ggml.") and name not in (
            "tokenizer.ggml.eos_token_id",
            "tokenizer.ggml.bos_token_id",
            "tokenizer.ggml.model",
        ):
            continue  # the vocabulary is large and read by the tokenizer loader instead
        try:
            val = f.contents()
            json.dumps(val)
        except Exception:  # noqa: BLE001 - pragma: no cover - exotic field types we do not need
            continue
        md[name] = val
    names = [t.name for t in reader.tensors]
    _atomic_write_json(cached, {"metadata": md, "tensors": names})
    return md, set(names)


def _atomic_write_json(path: str, obj: Any) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)
