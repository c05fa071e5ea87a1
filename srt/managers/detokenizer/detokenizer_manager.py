"""DetokenizerManager: token ids -> text deltas, incrementally, never splitting a UTF-8 character.

Per request it keeps a window of ids with two offsets: text before `read_offset` is settled
(decoded_text); [surr_offset, read_offset) is context so the tokenizer joins the next pieces
correctly. Text ending in U+FFFD (an incomplete multi-byte character) is held back.
"""

from __future__ import annotations

import logging
import signal
from collections import OrderedDict
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import zmq

from sglang.srt.core.finish_reason import FinishMatchedStr, FinishMatchedToken, FinishReason
from sglang.srt.core.io_struct.batch_output import map_common
from sglang.srt.core.io_struct.ipc import make_socket, recv_obj, send_obj
from sglang.srt.core.io_struct.to_detokenizer import BatchTokenIDOutput
from sglang.srt.core.io_struct.to_tokenizer import BatchStrOutput, DetokenizerError
from sglang.srt.server_args import PortArgs, ServerArgs

logger = logging.getLogger(__name__)


@dataclass
class DecodeStatus:
    decoded_text: str
    decode_ids: List[int]
    surr_offset: int
    read_offset: int
    sent_offset: int = 0


class LimitedCapacityDict(OrderedDict):
    """Drops the oldest entry past capacity, so a flood of streams cannot grow memory without bound."""

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity = capacity

    def __setitem__(self, key, value) -> None:
        if key not in self and len(self) >= self.capacity:
            self.popitem(last=False)
        super().__setitem__(key, value)


def find_printable_text(text: str) -> str:
    """The part of a not-yet-settled piece that is safe to show now."""
    if text.endswith("\n"):
        return text
    if text and _is_cjk(text[-1]):
        return text
    if len(text) > 1 and _is_cjk(text[-2]):
        return text[:-1]
    return text[: text.rfind(" ") + 1]


def _is_cjk(ch: str) -> bool:
    cp = ord(ch)
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


class IncrementalDetokenizer:
    """The pure part of the detokenizer, used by the process loop and by tests."""

    def __init__(self, tokenizer, max_states: int = 1 << 16):
        self.tokenizer = tokenizer
        self.states: Dict[str, DecodeStatus] = LimitedCapacityDict(max_states)

    def step(self, msg: BatchTokenIDOutput) -> Tuple[BatchStrOutput, List[str]]:
        """Returns the text deltas, and the rids whose state was lost (evicted)."""
        lost: List[str] = []
        keep: List[int] = []
        items = []
        for i, rid in enumerate(msg.rids):
            st = self._state(rid, msg.decode_ids[i], msg.read_offsets[i])
            if st is None:
                lost.append(rid)
                continue
            keep.append(i)
            reason = msg.finished_reasons[i]
            read_ids = st.decode_ids[st.surr_offset :]
            if (
                reason is not None
                and not msg.no_stop_trim[i]
                and isinstance(reason, FinishMatchedToken)
                and read_ids
            ):
                read_ids = read_ids[:-1]  # the matched stop token is not part of the text
            surr_ids = st.decode_ids[st.surr_offset : st.read_offset]
            items.append(
                (
                    st,
                    read_ids,
                    surr_ids,
                    msg.skip_special_tokens[i],
                    msg.spaces_between_special_tokens[i],
                )
            )
        texts = self._decode_all(items)
        out_strs: List[str] = []
        for (st, _, _, _, _), (read_text, surr_text), i in zip(items, texts, keep):
            reason = msg.finished_reasons[i]
            new_text = read_text[len(surr_text) :]
            if reason is None:
                if new_text and not new_text.endswith("\ufffd"):
                    st.decoded_text += new_text
                    st.surr_offset = st.read_offset
                    st.read_offset = len(st.decode_ids)
                    new_text = ""
                else:
                    new_text = find_printable_text(new_text)
            full = st.decoded_text + new_text
            if reason is not None:
                full = _trim_stop_str(full, reason, msg.no_stop_trim[i])
                self.states.pop(msg.rids[i], None)
            delta = full[st.sent_offset :] if len(full) > st.sent_offset else ""
            st.sent_offset = max(st.sent_offset, len(full))
            out_strs.append(delta)
        return _select(msg, keep, out_strs), lost

    def _state(self, rid: str, ids: List[int], read_offset: int) -> Optional[DecodeStatus]:
        st = self.states.get(rid)
        if st is None:
            if read_offset < 0:
                return None  # a continuation for a request whose state was evicted
            st = DecodeStatus("", list(ids), 0, read_offset)
            self.states[rid] = st
        else:
            st.decode_ids.extend(ids)
        return st

    def _decode_all(self, items) -> List[Tuple[str, str]]:
        groups: Dict[Tuple[bool, bool], List[int]] = {}
        for j, (_, _, _, skip, spaces) in enumerate(items):
            groups.setdefault((skip, spaces), []).append(j)
        out: List[Tuple[str, str]] = [("", "")] * len(items)
        for (skip, spaces), idx in groups.items():
            seqs = [items[j][1] for j in idx] + [items[j][2] for j in idx]
            texts = self.tokenizer.batch_decode(
                seqs, skip_special_tokens=skip, spaces_between_special_tokens=spaces
            )
            n = len(idx)
            for k, j in enumerate(idx):
                out[j] = (texts[k], texts[n + k])
        return out


def _trim_stop_str(text: str, reason: FinishReason, no_stop_trim: bool) -> str:
    if no_stop_trim or not isinstance(reason, FinishMatchedStr) or not reason.matched:
        return text
    pos = text.find(reason.matched)
    return text[:pos] if pos != -1 else text


def _select(msg: BatchTokenIDOutput, keep: List[int], out_strs: List[str]) -> BatchStrOutput:
    def pick(lst):
        return [lst[i] for i in keep] if lst else [None] * len(keep)

    return BatchStrOutput(**map_common(msg, pick), output_strs=out_strs)


def run_detokenizer_process(server_args: ServerArgs, port_args: PortArgs) -> None:
    from sglang.srt.utils.hf_tokenizer import get_tokenizer
    from sglang.srt.utils.process import configure_logger, kill_self_when_parent_dies

    configure_logger(server_args.log_level, prefix=" Detokenizer")
    kill_self_when_parent_dies(cleanup_dir=port_args.ipc_dir)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher shuts us down
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    tokenizer = get_tokenizer(
        server_args.tokenizer_path or server_args.model_path, server_args.trust_remote_code
    )
    ctx = zmq.Context(2)
    recv = make_socket(ctx, zmq.PULL, port_args.detokenizer_ipc_name, True)
    send = make_socket(ctx, zmq.PUSH, port_args.tokenizer_ipc_name, False)
    detok = IncrementalDetokenizer(tokenizer, server_args.detokenizer_max_states)
    ser = server_args.ipc_serializer
    while True:
        msg = recv_obj(recv, ser)
        if not isinstance(msg, BatchTokenIDOutput):
            send_obj(send, msg, ser)  # pass-through for anything not token output
            continue
        try:
            out, lost = detok.step(msg)
        except Exception as e:
            logger.exception("Detokenizer failed on a batch")
            send_obj(send, DetokenizerError(list(msg.rids), f"Detokenization failed: {e}"), ser)
            continue
        if lost:
            send_obj(
                send,
                DetokenizerError(
                    lost,
                    "Decode state not found for this request: the detokenizer tracks at most "
                    f"{server_args.detokenizer_max_states} requests at once (raise --detokenizer-max-states).",
                ),
                ser,
            )
        if out.rids:
            send_obj(send, out, ser)
