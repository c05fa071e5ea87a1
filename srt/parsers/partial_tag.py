"""The one rule both stream parsers hold text back by: an output that ends in a cut-off tag."""

from __future__ import annotations


def cut_tag_len(text: str, tag: str) -> int:
    """Length of the longest end of `text` that is a proper start of `tag` (0 if none): those
    characters may yet become the tag, so a stream must not send them."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0
