"""Backend over an in-process Engine: the same /generate bodies, handed over as Python calls."""

from __future__ import annotations

from typing import Any, Dict, Iterator, Optional

from sglang.lang.backend.base_backend import NativeApiBackend
from sglang.lang.chat_template import ChatTemplate, chat_template_for_model, get_chat_template

# /generate body fields that Engine.generate takes as keyword arguments of the same name.
_PASSTHROUGH = (
    "input_ids",
    "sampling_params",
    "return_logprob",
    "logprob_start_len",
    "top_logprobs_num",
    "return_text_in_logprobs",
)


class EngineBackend(NativeApiBackend):
    """`EngineBackend(engine)` wraps an existing Engine; `EngineBackend(model_path=..., **server_args)`
    starts one (and shuts it down in `shutdown()`)."""

    def __init__(
        self,
        engine: Any = None,
        model_path: Optional[str] = None,
        chat_template_name: Optional[str] = None,
        **server_args: Any,
    ) -> None:
        super().__init__()
        self._owns_engine = engine is None
        if engine is None:
            from sglang.srt.entrypoints.engine import Engine  # heavy: only when we must start one

            engine = Engine(model_path=model_path, **server_args)
        self.engine = engine
        if chat_template_name is not None:
            self._chat_template = get_chat_template(chat_template_name)

    @staticmethod
    def _engine_kwargs(payload: Dict[str, Any]) -> Dict[str, Any]:
        kwargs = {k: payload[k] for k in _PASSTHROUGH if payload.get(k) is not None}
        if "text" in payload:
            kwargs["prompt"] = payload["text"]
        return kwargs

    def _request(self, payload: Dict[str, Any]) -> Any:
        return self.engine.generate(**self._engine_kwargs(payload))

    def _request_stream(self, payload: Dict[str, Any]) -> Iterator[Dict[str, Any]]:
        return iter(self.engine.generate(**self._engine_kwargs(payload), stream=True))

    def _load_chat_template(self) -> ChatTemplate:
        info = self.engine.get_model_info()
        return chat_template_for_model(info.get("model_path", ""), tokenizer=self.engine.tokenizer)

    def flush_cache(self) -> None:
        self.engine.flush_cache()

    def get_server_info(self) -> Dict[str, Any]:
        get = getattr(self.engine, "get_server_info", None)
        return get() if get is not None else {"model_info": self.engine.get_model_info()}

    def shutdown(self) -> None:
        if self._owns_engine:
            self.engine.shutdown()
