"""Tokenizer loading: HF folders directly, GGUF files through transformers once, then from a cache folder.

Converting a GGUF vocabulary takes seconds; every process (tokenizer manager, scheduler,
detokenizer, tests) needs the tokenizer, so the converted form is cached on disk by file content.
"""

from __future__ import annotations

import logging
import os
import shutil
from typing import Any, Optional

from transformers import AutoTokenizer

from sglang.srt.utils.file_cache import cache_dir

logger = logging.getLogger(__name__)


def _gguf_cache_dir(gguf_path: str) -> str:
    return cache_dir("tokenizers", gguf_path)


def get_tokenizer(
    path: str, trust_remote_code: bool = False, chat_template: Optional[str] = None
) -> Any:
    """Load a tokenizer from a folder, or from a .gguf file (folder/file.gguf)."""
    if path.endswith(".gguf") and os.path.isfile(path):
        cache = _gguf_cache_dir(path)
        if os.path.exists(os.path.join(cache, "tokenizer_config.json")):
            tok = AutoTokenizer.from_pretrained(cache)
        else:
            logger.info(
                "Reading the tokenizer out of %s once; later starts load it from %s.", path, cache
            )
            tok = AutoTokenizer.from_pretrained(
                os.path.dirname(path) or ".", gguf_file=os.path.basename(path)
            )
            tmp = cache + f".tmp{os.getpid()}"
            tok.save_pretrained(tmp)
            try:
                os.replace(tmp, cache)
            except OSError:  # another process won the race; ours is identical
                shutil.rmtree(tmp, ignore_errors=True)
    else:
        tok = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    if chat_template:
        if os.path.isfile(chat_template):
            with open(chat_template) as f:
                chat_template = f.read()
        tok.chat_template = chat_template
    return tok
