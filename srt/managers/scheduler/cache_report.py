"""--enable-cache-report: where a request's prompt left the longest cached path, found at its
first prefill, while its match (prefix_indices, last_node) is fresh and locked."""

from __future__ import annotations

from sglang.srt.core.prompt_break import BreakCause, PromptBreak
from sglang.srt.core.req import Req
from sglang.srt.mem_cache.base_prefix_cache import BasePrefixCache

# Tokens of the cached continuation to report: enough to recognise text, little on the wire.
CONTINUATION_TOKENS = 8


def find_prompt_break(req: Req, tree_cache: BasePrefixCache) -> PromptBreak:
    pos = len(req.prefix_indices)
    if tree_cache.disable:
        return PromptBreak(pos, BreakCause.NO_CACHE.value)
    nxt = tree_cache.cached_continuation(req.last_node, req.extra_key, CONTINUATION_TOKENS)
    prompt = req.origin_input_ids
    if not nxt:
        cause = BreakCause.CACHE_END
    elif pos >= req.match_limit and pos < len(prompt) and nxt[0] == prompt[pos]:
        # The cache goes on like the prompt; the match stopped because the rest is computed anyway.
        cause = BreakCause.RECOMPUTE
    else:
        cause = BreakCause.DIVERGED
    return PromptBreak(pos, cause.value, nxt)
