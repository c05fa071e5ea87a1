"""What the interpreter asks of a backend, and the /generate protocol shared by our two backends.

`BaseBackend` is the interface. `NativeApiBackend` implements generation, streaming, select and
prefix caching in terms of /generate request bodies; RuntimeEndpoint sends them over HTTP and
EngineBackend hands them to an in-process Engine, so both behave identically.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from sglang.lang.chat_template import ChatTemplate, get_chat_template
from sglang.lang.choices import ChoicesDecision, ChoicesSamplingMethod, mean_logprob
from sglang.lang.ir import SglSamplingParams

logger = logging.getLogger(__name__)

GenerateResult = Tuple[str, Dict[str, Any]]


class BaseBackend:
    """Interface used by the interpreter. `s` is the StreamExecutor; backends read `s.text_`."""

    def get_chat_template(self) -> ChatTemplate:
        return get_chat_template("default")

    def cache_prefix(self, prefix: str) -> None:
        """Make `prefix` resident in the server's prefix cache (optional optimisation)."""

    def commit_lazy_operations(self, s: Any) -> None:
        """Called before fork so that the branches share the already-computed prefix."""

    def generate(self, s: Any, sampling_params: SglSamplingParams) -> GenerateResult:
        raise NotImplementedError

    def generate_stream(
        self, s: Any, sampling_params: SglSamplingParams
    ) -> Iterator[GenerateResult]:
        """Yields (new_text, meta_info) pieces; the default is one piece with everything."""
        yield self.generate(s, sampling_params)

    def select(
        self,
        s: Any,
        choices: Sequence[str],
        temperature: float,
        choices_method: ChoicesSamplingMethod,
    ) -> ChoicesDecision:
        raise NotImplementedError

    def flush_cache(self) -> None:
        pass

    def get_server_info(self) -> Dict[str, Any]:
        return {}

    def shutdown(self) -> None:
        pass


def _prefill_only(text: Union[str, List[str]]) -> Dict[str, Any]:
    return {"text": text, "sampling_params": {"max_new_tokens": 0}}


def choice_token_entries(
    entries: Sequence[Sequence[Any]], prefix: str, choice: str, prefix_tokens_hint: int
) -> List[Sequence[Any]]:
    """The logprob entries of `prefix + choice` that cover the choice.

    The request starts its logprobs two tokens before the end of the prefix because `prefix + choice`
    may tokenize differently at the seam ("is " + "Paris" -> " is", " Paris"). Walking back from the
    end over the entries' texts finds the first token that reaches into the choice; that token
    (even when it merged with the end of the prefix) belongs to the choice, earlier ones do not.
    Without usable texts we assume the prefix kept its own tokenization (`prefix_tokens_hint`).
    """
    combined = prefix + choice
    end = len(combined)  # where the text of entries[i] must end
    for i in range(len(entries) - 1, -1, -1):
        if end <= len(prefix):
            return list(entries[i + 1 :])  # entries[i] lies wholly inside the prefix
        text = entries[i][2] if len(entries[i]) > 2 else None
        if not isinstance(text, str) or not combined[:end].endswith(text):
            break  # texts unusable (missing, or per-token decoding is not lossless): use the hint
        end -= len(text)
    else:
        return list(entries)  # every entry reaches into the choice
    return list(entries[prefix_tokens_hint:]) or list(entries[-1:])


class NativeApiBackend(BaseBackend):
    """Frontend operations as /generate request bodies. Subclasses provide the transport."""

    def __init__(self) -> None:
        self._chat_template: Optional[ChatTemplate] = None
        self._chat_template_lock = threading.Lock()

    # --- transport -------------------------------------------------------------------------

    def _request(self, payload: Dict[str, Any]) -> Any:
        """Run one /generate body; a dict for a single prompt, a list for a batch."""
        raise NotImplementedError

    def _request_stream(self, payload: Dict[str, Any]) -> Iterator[Dict[str, Any]]:
        """Run one streaming /generate body; yields chunks whose `text` is cumulative."""
        raise NotImplementedError

    def _load_chat_template(self) -> ChatTemplate:
        raise NotImplementedError

    # --- interface -------------------------------------------------------------------------

    def get_chat_template(self) -> ChatTemplate:
        # Loading a tokenizer takes seconds: only do it when a program first uses a role.
        with self._chat_template_lock:
            if self._chat_template is None:
                self._chat_template = self._load_chat_template()
            return self._chat_template

    def cache_prefix(self, prefix: str) -> None:
        if prefix:
            self._request(_prefill_only(prefix))

    def commit_lazy_operations(self, s: Any) -> None:
        self.cache_prefix(s.text_)

    @staticmethod
    def _generate_payload(text: str, sp: SglSamplingParams) -> Dict[str, Any]:
        return {
            "text": text,
            "sampling_params": {
                "skip_special_tokens": True,
                "spaces_between_special_tokens": True,
                **sp.to_srt_kwargs(),
            },
            **sp.logprob_kwargs(),
        }

    def generate(self, s: Any, sampling_params: SglSamplingParams) -> GenerateResult:
        out = self._request(self._generate_payload(s.text_, sampling_params))
        return out["text"], out["meta_info"]

    def generate_stream(
        self, s: Any, sampling_params: SglSamplingParams
    ) -> Iterator[GenerateResult]:
        payload = {**self._generate_payload(s.text_, sampling_params), "stream": True}
        sent = ""  # what the program has already received
        for chunk in self._request_stream(payload):
            text = chunk.get("text", "")
            if not text.startswith(sent):
                # Text already handed out cannot be taken back; continue from its length.
                logger.warning("streamed text is not cumulative; continuing from its length")
            piece = text[len(sent) :]
            sent += piece
            yield piece, chunk.get("meta_info", {})

    def select(
        self,
        s: Any,
        choices: Sequence[str],
        temperature: float,
        choices_method: ChoicesSamplingMethod,
    ) -> ChoicesDecision:
        prefix = s.text_  # temperature is always 0 here: sgl.select rejects anything else
        # 1) Prefill the shared prefix once (the batch below then hits the cache) and learn its length.
        prompt_len = (
            self._request(_prefill_only(prefix))["meta_info"]["prompt_tokens"] if prefix else 0
        )
        # 2) Score all choices in one batch; start two tokens early to see through seam re-tokenization.
        start = max(prompt_len - 2, 0)
        outs = self._request(
            {
                "text": [prefix + c for c in choices],
                "sampling_params": {"max_new_tokens": 0, "temperature": 0},
                "return_logprob": True,
                "return_text_in_logprobs": True,
                "logprob_start_len": start,
            }
        )
        entries = [
            choice_token_entries(
                o["meta_info"]["input_token_logprobs"], prefix, c, prompt_len - start
            )
            for o, c in zip(outs, choices)
        ]
        unconditional = None
        if choices_method.requires_unconditional_logprobs:
            # 3) The same tokens without any context: how likely each choice is on its own.
            uncond_outs = self._request(
                {
                    "input_ids": [[e[1] for e in ents] for ents in entries],
                    "sampling_params": {"max_new_tokens": 0},
                    "return_logprob": True,
                    "logprob_start_len": 0,
                }
            )
            unconditional = [o["meta_info"]["input_token_logprobs"] for o in uncond_outs]
        return choices_method(
            choices=list(choices),
            normalized_prompt_logprobs=[mean_logprob(e) for e in entries],
            input_token_logprobs=entries,
            output_token_logprobs=[o["meta_info"].get("output_token_logprobs", []) for o in outs],
            unconditional_token_logprobs=unconditional,
        )
