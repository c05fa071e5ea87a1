"""Role prefixes and suffixes for `sgl.system / user / assistant`.

The frontend builds prompts as plain text, so each role needs the exact text the model's chat
template puts around a message. We get it from the tokenizer's own Jinja template by rendering
messages whose contents are sentinel strings and cutting the output at the sentinels; a small table
of well-known templates covers tokenizers we cannot load.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

logger = logging.getLogger(__name__)

ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class ChatTemplate:
    name: str
    role_prefix_and_suffix: Dict[str, Tuple[str, str]]
    # Content of the system message the template inserts when a conversation starts without one.
    default_system_prompt: Optional[str] = None
    # Added to every gen's stop list: the end-of-turn marker.
    stop_str: Tuple[str, ...] = field(default_factory=tuple)

    def get_prefix_and_suffix(self, role: str) -> Tuple[str, str]:
        if role not in self.role_prefix_and_suffix:
            raise ValueError(f"chat template {self.name!r} has no role {role!r}")
        return self.role_prefix_and_suffix[role]


def _chatml(name: str, default_system_prompt: Optional[str] = None) -> ChatTemplate:
    return ChatTemplate(
        name=name,
        role_prefix_and_suffix={r: (f"<|im_start|>{r}\n", "<|im_end|>\n") for r in ROLES},
        default_system_prompt=default_system_prompt,
        stop_str=("<|im_end|>",),
    )


KNOWN_TEMPLATES: Dict[str, ChatTemplate] = {
    "default": ChatTemplate(
        name="default",
        role_prefix_and_suffix={
            "system": ("System: ", "\n\n"),
            "user": ("User: ", "\n\n"),
            "assistant": ("Assistant: ", "\n\n"),
        },
    ),
    "chatml": _chatml("chatml"),
    "smollm2": _chatml(
        "smollm2", "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
    ),
    "qwen2.5": _chatml(
        "qwen2.5", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    ),
    "llama-3": ChatTemplate(
        name="llama-3",
        # The tokenizer adds <|begin_of_text|> itself, so the prompt text must not repeat it.
        role_prefix_and_suffix={
            r: (f"<|start_header_id|>{r}<|end_header_id|>\n\n", "<|eot_id|>") for r in ROLES
        },
        stop_str=("<|eot_id|>",),
    ),
}

# Checked in order against the lower-cased model path; the first hit wins.
_PATH_HINTS: List[Tuple[Tuple[str, ...], str]] = [
    (("smollm",), "smollm2"),
    (("qwen2.5", "qwen2_5", "qwen2-5"), "qwen2.5"),
    (("qwen",), "chatml"),
    (("llama-3", "llama3", "llama_3"), "llama-3"),
]


def get_chat_template(name: str) -> ChatTemplate:
    if name not in KNOWN_TEMPLATES:
        raise ValueError(f"unknown chat template {name!r}; known: {sorted(KNOWN_TEMPLATES)}")
    return KNOWN_TEMPLATES[name]


def match_chat_template_by_path(model_path: str) -> ChatTemplate:
    low = (model_path or "").lower()
    for hints, name in _PATH_HINTS:
        if any(h in low for h in hints):
            return KNOWN_TEMPLATES[name]
    return KNOWN_TEMPLATES["default"]


# ---------------------------------------------------------------------------------------------
# Derivation from a tokenizer's Jinja template
# ---------------------------------------------------------------------------------------------

# Plain ASCII words: survive `| trim`, never merge with template text, never appear in templates.
_S, _U, _A = "SGLSENTINELSYSTEMQ", "SGLSENTINELUSERQ", "SGLSENTINELASSISTANTQ"


def _render(tokenizer: Any, messages: List[Dict[str, str]], generation_prompt: bool) -> str:
    text = tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=generation_prompt
    )
    if not isinstance(text, str):
        raise TypeError("apply_chat_template did not return text")
    return text


def _template_bos(tokenizer: Any) -> Optional[str]:
    """The BOS text a template writes through `bos_token`. Prompts are plain text that the server
    tokenizes (adding BOS itself when the tokenizer wants one), so role texts must not carry it."""
    bos = getattr(tokenizer, "bos_token", None)
    return bos if bos and "bos_token" in tokenizer.chat_template else None


def _split_once(text: str, sentinel: str) -> Tuple[str, str]:
    if text.count(sentinel) != 1:
        raise ValueError(f"sentinel {sentinel} rendered {text.count(sentinel)} times")
    head, tail = text.split(sentinel)
    return head, tail


def _strip_start(text: str, prefix: str) -> str:
    if not text.startswith(prefix):
        raise ValueError(f"expected {prefix!r} at the start of {text[:80]!r}")
    return text[len(prefix) :]


def derive_chat_template(tokenizer: Any, name: str = "from-tokenizer") -> ChatTemplate:
    """Role texts from the tokenizer's chat template; raises ValueError when the template does not
    render each role as `prefix + content + suffix` (e.g. system text folded into the user turn)."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("tokenizer has no chat template")
    bos = _template_bos(tokenizer)

    def render(messages: List[Dict[str, str]], generation_prompt: bool = False) -> str:
        text = _render(tokenizer, messages, generation_prompt)
        return text[len(bos) :] if bos and text.startswith(bos) else text

    sys_msg, user_msg = {"role": "system", "content": _S}, {"role": "user", "content": _U}
    full = render([sys_msg, user_msg, {"role": "assistant", "content": _A}])
    sys_prefix, rest = _split_once(full, _S)
    between_su, rest = _split_once(rest, _U)
    _, asst_suffix = _split_once(rest, _A)

    sys_suffix = _split_once(render([sys_msg]), _S)[1]
    user_alone_head, user_suffix = _split_once(render([user_msg]), _U)
    user_prefix = _strip_start(between_su, sys_suffix)
    # The generation prompt is what the model sees when it answers, so it defines the assistant prefix.
    asst_prefix = _strip_start(_split_once(render([sys_msg, user_msg], True), _U)[1], user_suffix)
    if not (user_prefix or asst_prefix):
        raise ValueError("template does not mark roles")

    default_system = None
    if not user_alone_head.endswith(user_prefix):
        raise ValueError("user message renders differently without a system message")
    inserted = user_alone_head[: len(user_alone_head) - len(user_prefix)]
    if inserted:
        if not (inserted.startswith(sys_prefix) and inserted.endswith(sys_suffix)):
            raise ValueError(f"template inserts text that is not a system message: {inserted!r}")
        default_system = inserted[len(sys_prefix) : len(inserted) - len(sys_suffix)]

    stop = asst_suffix.strip()
    return ChatTemplate(
        name=name,
        role_prefix_and_suffix={
            "system": (sys_prefix, sys_suffix),
            "user": (user_prefix, user_suffix),
            "assistant": (asst_prefix, asst_suffix),
        },
        default_system_prompt=default_system,
        stop_str=(stop,) if stop else (),
    )


def chat_template_for_model(
    model_path: str, tokenizer: Any = None, tokenizer_path: Optional[str] = None
) -> ChatTemplate:
    """Best template we can get: the tokenizer's own (loaded from `tokenizer_path` if needed),
    else the table entry matching the model path."""
    try:
        if tokenizer is None and tokenizer_path:
            from sglang.srt.utils.hf_tokenizer import get_tokenizer

            tokenizer = get_tokenizer(tokenizer_path)
        if tokenizer is not None:
            return derive_chat_template(tokenizer)
    except Exception as e:  # noqa: BLE001 - any tokenizer/template failure only costs us precision, not function
        logger.info("chat template not derived from the tokenizer (%s); matching by model path", e)
    return match_chat_template_by_path(model_path)
