"""Where converted model files are cached, and the content key they are cached under.

Converting a GGUF file (its vocabulary into an HF tokenizer folder, its quantised weights into
float32 safetensors) takes tens of seconds, so the results live in `$SGLANG_CACHE_DIR` (default
~/.cache/sglang). They are keyed by the file's content (its size and a hash of its first 16 MiB,
which hold the header and tensor table), so the same model installed in several virtualenvs or
copied elsewhere shares one cache entry, and a changed file gets a new one.
"""

from __future__ import annotations

import functools
import hashlib
import os

HEAD_BYTES = 16 << 20


def cache_root() -> str:
    return os.environ.get(
        "SGLANG_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "sglang")
    )


def content_key(path: str) -> str:
    st = os.stat(path)
    return _content_key(os.path.realpath(path), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _content_key(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        h.update(f.read(HEAD_BYTES))
    return h.hexdigest()[:20]


def cache_dir(kind: str, path: str) -> str:
    """The cache folder for one kind of conversion ("gguf", "tokenizers") of the file at `path`."""
    return os.path.join(cache_root(), kind, content_key(path))
