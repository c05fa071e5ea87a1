"""The weight routes, SGLang's names and answers: updates from disk, from tensors and by broadcast
from a trainer's process group, joining and leaving that group, reading a weight back, the
weights' version label, and lending the device memory to a trainer (release / resume). They answer
{success, message}, 200 or 400."""

from __future__ import annotations

from typing import Any, Callable, Dict

from fastapi import FastAPI, Request
from fastapi.responses import Response

from sglang.srt.core.io_struct.to_scheduler import (
    ReleaseMemoryOccupationReqInput,
    ResumeMemoryOccupationReqInput,
)
from sglang.srt.entrypoints.control_bodies import (
    destroy_group_of,
    distributed_update_of,
    get_weights_of,
    init_group_of,
    memory_tags_of,
    tensor_update_of,
    update_weights_of,
    weight_version_of,
)
from sglang.srt.entrypoints.errors import bad_request
from sglang.srt.entrypoints.openapi_docs import (
    DestroyWeightsUpdateGroupBody,
    GetWeightsByNameBody,
    InitWeightsUpdateGroupBody,
    MemoryOccupationBody,
    UpdateWeightsFromDiskBody,
    UpdateWeightsFromDistributedBody,
    UpdateWeightsFromTensorBody,
    UpdateWeightVersionBody,
    route_doc,
)
from sglang.srt.entrypoints.server_state import ServerState, json_response, read_json

# The request bodies, for the OpenAPI spec's components.
BODIES = [
    UpdateWeightsFromDiskBody,
    UpdateWeightsFromTensorBody,
    UpdateWeightsFromDistributedBody,
    InitWeightsUpdateGroupBody,
    DestroyWeightsUpdateGroupBody,
    GetWeightsByNameBody,
    UpdateWeightVersionBody,
    MemoryOccupationBody,
]


def _answer(ok: bool, message: str, **extra: Any) -> Response:
    # SGLang's result body, on failure too: clients read `success` and `message`.
    return json_response({"success": ok, "message": message, **extra}, 200 if ok else 400)


def add_weight_routes(app: FastAPI, state: ServerState) -> None:
    def tm():
        return state.tm

    def update_route(path: str, body: type, parse: Callable, extra: Dict[str, Any]) -> None:
        async def route(request: Request) -> Response:
            try:
                req, version = parse(await read_json(request))
            except ValueError as e:
                return bad_request(str(e))
            ok, message = await tm().update_weights(req, version)
            return _answer(ok, message, **extra)

        app.post(path, openapi_extra=route_doc(body))(route)

    update_route(
        "/update_weights_from_disk",
        UpdateWeightsFromDiskBody,
        update_weights_of,
        {"num_paused_requests": 0},
    )
    update_route("/update_weights_from_tensor", UpdateWeightsFromTensorBody, tensor_update_of, {})
    update_route(
        "/update_weights_from_distributed",
        UpdateWeightsFromDistributedBody,
        distributed_update_of,
        {},
    )

    @app.post("/init_weights_update_group", openapi_extra=route_doc(InitWeightsUpdateGroupBody))
    async def init_weights_update_group(request: Request):
        try:
            req = init_group_of(await read_json(request))
        except ValueError as e:
            return bad_request(str(e))
        return _answer(*await tm().weights_update_group(req))

    @app.post(
        "/destroy_weights_update_group", openapi_extra=route_doc(DestroyWeightsUpdateGroupBody)
    )
    async def destroy_weights_update_group(request: Request):
        try:
            req = destroy_group_of(await read_json(request) if await request.body() else {})
        except ValueError as e:
            return bad_request(str(e))
        return _answer(*await tm().weights_update_group(req))

    async def get_weights_by_name(request: Request):
        try:
            req = get_weights_of(await read_json(request))
        except ValueError as e:
            return bad_request(str(e))
        out = await tm().get_weights_by_name(req)
        if out.parameter is None:
            return bad_request(out.message)
        return json_response(out.parameter)

    app.api_route(
        "/get_weights_by_name",
        methods=["GET", "POST"],
        openapi_extra=route_doc(GetWeightsByNameBody),
    )(get_weights_by_name)

    @app.post("/update_weight_version", openapi_extra=route_doc(UpdateWeightVersionBody))
    async def update_weight_version(request: Request):
        try:
            version, abort_all = weight_version_of(await read_json(request))
        except ValueError as e:
            return bad_request(str(e))
        if abort_all:
            await tm().abort_request(abort_all=True)
        tm().weight_version = version
        return _answer(True, f"Weight version set to {version}.", new_version=version)

    def memory_route(path: str, message: type) -> None:
        async def route(request: Request) -> Response:
            try:
                tags = memory_tags_of(await read_json(request) if await request.body() else {})
            except ValueError as e:
                return bad_request(str(e))
            return _answer(*await tm().memory_occupation(message(tags)))

        app.post(path, openapi_extra=route_doc(MemoryOccupationBody))(route)

    memory_route("/release_memory_occupation", ReleaseMemoryOccupationReqInput)
    memory_route("/resume_memory_occupation", ResumeMemoryOccupationReqInput)

    async def weight_version():
        return json_response({"weight_version": tm().weight_version})

    for path in ("/get_weight_version", "/weight_version"):
        app.get(path)(weight_version)
