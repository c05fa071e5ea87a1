"""Model names: which `model` values this server answers to, and the /v1/models cards.

One model is served; it answers to its served name and to its model path (clients often send the
path they launched with). A request naming any other model is a bad request (400) that says so, so a
client pointed at the wrong server notices; GET /v1/models/{other} is a 404 (no such resource).
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional

from sglang.srt.entrypoints.http_server import ServerState
from sglang.srt.entrypoints.openai.errors import OpenAIError


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
        """The model name to echo in responses; 400 for a model this server does not serve."""
        if name is None:
            return self.served_name()
        if name not in self.names():
            raise OpenAIError(
                400, f"The model `{name}` does not exist; this server serves `{self.served_name()}`.", "model"
            )
        return name

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
