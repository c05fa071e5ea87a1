"""Model names: which `model` values this server answers to, and the /v1/models cards.

One model is served; it answers to its served name, to its model path (clients often send the path
they launched with) and to `default` (what several tools send when they do not know the name). A
request naming any other model gets OpenAI's 404 `model_not_found`, so a client pointed at the wrong
server notices; GET /v1/models/{other} is the same 404.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional

from sglang.srt.entrypoints.errors import ApiError
from sglang.srt.entrypoints.server_state import ServerState

# The name tools send when they do not know the served one.
DEFAULT_MODEL_NAME = "default"


class ModelRegistry:
    def __init__(self, state: ServerState):
        self.state = state
        self.created = int(time.time())

    def served_name(self) -> str:
        return self.state.server_args.served_name()

    def names(self) -> List[str]:
        sa = self.state.server_args
        names = [self.served_name()]
        if sa.model_path and sa.model_path not in names:
            names.append(sa.model_path)
        return names

    def resolve(self, name: Optional[str]) -> str:
        """The model name to echo in responses; a 404 for a model this server does not serve."""
        if name is None or name == DEFAULT_MODEL_NAME:
            return self.served_name()
        if name not in self.names():
            raise self.not_found(name)
        return name

    def not_found(self, name: str) -> ApiError:
        return ApiError(
            404,
            f"The model `{name}` does not exist; this server serves `{self.served_name()}`.",
            "model",
            code="model_not_found",
        )

    def card(self, name: str) -> Dict[str, Any]:
        tm = self.state.tm
        return {
            "id": name,
            "object": "model",
            "created": self.created,
            "owned_by": "sglang",
            "root": self.state.server_args.model_path,
            "max_model_len": tm.context_len if tm is not None else None,
        }

    def list_models(self) -> Dict[str, Any]:
        return {"object": "list", "data": [self.card(self.served_name())]}
