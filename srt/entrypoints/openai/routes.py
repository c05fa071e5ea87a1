"""Registers the OpenAI-compatible routes on the HTTP server's app (called from create_app).

Authentication is not done here: the server's middleware already guards every path except
/health and /metrics when --api-key is set.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import Response

from sglang.srt.entrypoints.errors import error_response
from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest, CompletionRequest
from sglang.srt.entrypoints.openai.serving_chat import OpenAIServingChat
from sglang.srt.entrypoints.openai.serving_completions import OpenAIServingCompletion
from sglang.srt.entrypoints.openai.serving_models import ModelRegistry
from sglang.srt.entrypoints.openapi_docs import route_doc
from sglang.srt.entrypoints.server_state import ServerState, json_response


def add_openai_routes(app: FastAPI, state: ServerState) -> None:
    models = ModelRegistry(state)
    completions = OpenAIServingCompletion(state, models)
    chat = OpenAIServingChat(state, models)

    async def list_models() -> Response:
        return json_response(models.list_models())

    async def retrieve_model(model: str) -> Response:
        if model not in models.names():
            return error_response(models.not_found(model))
        return json_response(models.card(model))

    async def create_completion(request: Request) -> Response:
        return await completions.handle(request)

    async def create_chat_completion(request: Request) -> Response:
        return await chat.handle(request)

    app.get("/v1/models")(list_models)
    app.get("/v1/models/{model:path}")(retrieve_model)
    doc = route_doc(CompletionRequest, stream=True)
    app.api_route("/v1/completions", methods=["POST", "PUT"], openapi_extra=doc)(create_completion)
    doc = route_doc(ChatCompletionRequest, stream=True)
    app.api_route("/v1/chat/completions", methods=["POST", "PUT"], openapi_extra=doc)(
        create_chat_completion
    )
