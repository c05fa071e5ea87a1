"""The HTTP app: FastAPI routes over the TokenizerManager (launching it is http_launch.py's job).

Errors: every route answers in the one shape of errors.py; a stream produces its first chunk before
the 200 is sent, so a bad request is a real 400 (or 503) there too. Bodies pass through the limits
of body_limits.py and, with --api-key, the check of api_key.py first.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException as StarletteHTTPException

from sglang.srt.core.generate_input import GenerateReqInput
from sglang.srt.core.io_struct.to_scheduler import ProfileReq
from sglang.srt.entrypoints.api_key import ApiKeyMiddleware
from sglang.srt.entrypoints.body_limits import BodyLimitMiddleware
from sglang.srt.entrypoints.control_bodies import pause_mode_of, profile_req_of
from sglang.srt.entrypoints.errors import (
    ApiError,
    bad_request,
    error_response,
    stream_error_event,
    to_api_error,
)
from sglang.srt.entrypoints.openapi_docs import (
    AbortBody,
    DetokenizeBody,
    GenerateBody,
    PauseGenerationBody,
    StartProfileBody,
    TokenizeBody,
    install_openapi,
    route_doc,
)
from sglang.srt.entrypoints.server_state import (
    ServerState,
    json_response,
    read_json,
    sse,
    start_stream,
)
from sglang.srt.entrypoints.streaming import ServerStream
from sglang.srt.entrypoints.weight_routes import BODIES as WEIGHT_BODIES
from sglang.srt.entrypoints.weight_routes import add_weight_routes
from sglang.srt.managers.tokenizer.request_state import GenerateError
from sglang.srt.managers.tokenizer.tokenizer_manager import TokenizerManager

logger = logging.getLogger("sglang.server")

HEALTH_TIMEOUT_S = 20.0
ABORT_AFTER_STREAM_S = 2.0


def create_app(state: ServerState) -> FastAPI:
    sa = state.server_args
    app = FastAPI(
        title="sglang", version=__import__("sglang").__version__, docs_url=None, redoc_url=None
    )
    app.state.s = state

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        return bad_request(str(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        # Unknown routes (404) and wrong methods (405) in the same shape as every other error.
        return error_response(
            ApiError(exc.status_code, str(exc.detail)), headers=getattr(exc, "headers", None)
        )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        logger.exception("Unhandled error on %s", request.url.path, exc_info=exc)
        return error_response(ApiError(500, f"Internal server error: {type(exc).__name__}: {exc}"))

    _add_native_routes(app, state)
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest, CompletionRequest
    from sglang.srt.entrypoints.openai.routes import add_openai_routes
    from sglang.srt.entrypoints.parser_routes import (
        ParseFunctionCallBody,
        SeparateReasoningBody,
        add_parser_routes,
    )

    add_openai_routes(app, state)
    add_parser_routes(app, state)
    add_weight_routes(app, state)
    if sa.enable_metrics:
        from sglang.srt.entrypoints.metrics_route import add_metrics_route

        add_metrics_route(app, state)
    install_openapi(
        app,
        [
            GenerateBody,
            AbortBody,
            PauseGenerationBody,
            *WEIGHT_BODIES,
            StartProfileBody,
            TokenizeBody,
            DetokenizeBody,
            CompletionRequest,
            ChatCompletionRequest,
            ParseFunctionCallBody,
            SeparateReasoningBody,
        ],
    )
    # The last middleware added runs first: the key is checked before any body is read.
    app.add_middleware(
        BodyLimitMiddleware, max_bytes=sa.max_request_bytes, read_timeout=sa.request_read_timeout
    )
    if sa.api_key:
        app.add_middleware(
            ApiKeyMiddleware, api_key=sa.api_key, metrics_open=sa.metrics_without_api_key
        )
    return app


def _add_native_routes(app: FastAPI, state: ServerState) -> None:
    def tm() -> TokenizerManager:
        return state.tm

    def unavailable() -> bool:
        return not state.ready or state.shutting_down or tm().dead_message is not None

    @app.get("/health")
    async def health():
        return Response(status_code=503 if unavailable() else 200)

    @app.get("/health_generate")
    async def health_generate():
        if unavailable():
            return Response(status_code=503)
        obj = GenerateReqInput(
            input_ids=[0],
            sampling_params={"max_new_tokens": 1, "temperature": 0},
            rid=f"HEALTH_CHECK_{time.time_ns()}",
            log_metrics=False,
        )

        async def run():
            async for _ in tm().generate_request(obj):
                pass

        try:
            await asyncio.wait_for(run(), HEALTH_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - any failure means unhealthy
            return Response(status_code=503)
        return Response(status_code=200)

    def model_info():
        sa = state.server_args
        return {
            "model_path": sa.model_path,
            "tokenizer_path": sa.tokenizer_path,
            "is_generation": True,
            "served_model_name": sa.served_name(),
        }

    app.get("/get_model_info")(model_info)
    app.get("/model_info")(model_info)

    async def server_info():
        st = await tm().get_internal_state()
        info = dataclasses.asdict(state.server_args)
        info["api_key"] = "<redacted>" if info["api_key"] else None  # a secret is never echoed
        info.update(st)
        info["internal_states"] = [st]
        info["version"] = __import__("sglang").__version__
        info["process_pids"] = {p.name: p.pid for p in state.runtime.procs}
        info["ipc_dir"] = state.runtime.port_args.ipc_dir
        return json_response(info)

    app.get("/get_server_info")(server_info)
    app.get("/server_info")(server_info)

    @app.get("/get_load")
    async def get_load():
        return await tm().get_load()

    async def flush_cache():
        out = await tm().flush_cache()
        return Response(content=out.message, status_code=200 if out.success else 400)

    app.api_route("/flush_cache", methods=["GET", "POST"])(flush_cache)

    @app.post("/abort_request", openapi_extra=route_doc(AbortBody))
    async def abort_request(request: Request):
        try:
            body = await read_json(request)
            if not isinstance(body, dict):
                raise ValueError("The body must be a JSON object with `rid` or `abort_all`.")
            unknown = sorted(set(body) - {"rid", "abort_all"})
            if unknown:
                raise ValueError(
                    f"Unknown field(s): {', '.join(unknown)}; send `rid` or `abort_all`."
                )
            rid, abort_all = body.get("rid"), body.get("abort_all", False)
            if not isinstance(abort_all, bool):
                raise ValueError("`abort_all` must be a boolean.")
            if not abort_all and not (isinstance(rid, str) and rid):
                raise ValueError("`rid` must be a non-empty string (or send abort_all: true).")
        except ValueError as e:
            return bad_request(str(e))
        await tm().abort_request(rid or "", abort_all)
        return Response(status_code=200)

    @app.post("/pause_generation", openapi_extra=route_doc(PauseGenerationBody))
    async def pause_generation(request: Request):
        try:
            body = await read_json(request) if await request.body() else {}
            mode = pause_mode_of(body)
        except ValueError as e:
            return bad_request(str(e))
        await tm().pause_generation(mode)
        return {"message": "Generation paused successfully.", "status": "ok"}

    async def start_profile(request: Request):
        try:
            req = profile_req_of(await read_json(request) if await request.body() else {})
        except ValueError as e:
            return bad_request(str(e))
        return await _profile_answer(req)

    async def stop_profile():
        return await _profile_answer(ProfileReq(start=False))

    async def _profile_answer(req: ProfileReq) -> Response:
        out = await tm().profile(req)
        if not out.success:
            return bad_request(out.message)
        return Response(content=out.message + "\n", status_code=200)

    app.api_route(
        "/start_profile", methods=["GET", "POST"], openapi_extra=route_doc(StartProfileBody)
    )(start_profile)
    app.api_route("/stop_profile", methods=["GET", "POST"])(stop_profile)

    @app.post("/continue_generation")
    async def continue_generation():
        await tm().continue_generation()
        return {"message": "Generation continued successfully.", "status": "ok"}

    async def tokenize(request: Request):
        try:
            body = await read_json(request)
            prompt = body.get("prompt", body.get("text")) if isinstance(body, dict) else None
            special = body.get("add_special_tokens", True) if isinstance(body, dict) else True
            if not isinstance(special, bool):
                raise ValueError("`add_special_tokens` must be a boolean.")
            single = isinstance(prompt, str)
            prompts = [prompt] if single else prompt
            if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
                raise ValueError("`prompt` must be a string or a list of strings.")
            if tm().tokenizer is None:
                raise ValueError(
                    "This server was started with --skip-tokenizer-init: it has no tokenizer."
                )
            ids = await tm().preparer.run(tm().preparer.encode_many, prompts, special)
        except ValueError as e:
            return bad_request(str(e))
        count = len(ids[0]) if single else [len(x) for x in ids]
        return {
            "tokens": ids[0] if single else ids,
            "count": count,
            "max_model_len": tm().context_len,
        }

    async def detokenize(request: Request):
        try:
            body = await read_json(request)
            tokens = body.get("tokens") if isinstance(body, dict) else None
            if not isinstance(tokens, list) or not all(
                isinstance(t, int) and not isinstance(t, bool) for t in tokens
            ):
                raise ValueError("`tokens` must be a list of integers.")
            if any(t < 0 or t >= tm().vocab_size for t in tokens):
                raise ValueError(f"token ids must be in [0, {tm().vocab_size}).")
            if tm().tokenizer is None:
                raise ValueError(
                    "This server was started with --skip-tokenizer-init: it has no tokenizer."
                )
            return {"text": await tm().preparer.run(tm().preparer.decode, tokens)}
        except ValueError as e:
            return bad_request(str(e))

    for path in ("/tokenize", "/v1/tokenize"):
        app.post(path, openapi_extra=route_doc(TokenizeBody))(tokenize)
    for path in ("/detokenize", "/v1/detokenize"):
        app.post(path, openapi_extra=route_doc(DetokenizeBody))(detokenize)

    async def generate(request: Request):
        try:
            obj = GenerateReqInput.from_json(await read_json(request))
        except ValueError as e:
            return bad_request(str(e))
        return await run_generate(state, obj, request)

    app.api_route(
        "/generate", methods=["POST", "PUT"], openapi_extra=route_doc(GenerateBody, stream=True)
    )(generate)


async def run_generate(state: ServerState, obj: GenerateReqInput, request: Request) -> Response:
    tm = state.tm
    gen = tm.generate_request(obj, request)
    try:
        if not obj.stream:
            result = None
            async for out in gen:
                result = out
            return json_response(result)
        first = await start_stream(gen)
    except (ValueError, GenerateError) as e:
        return error_response(to_api_error(e))

    async def body() -> AsyncIterator[bytes]:
        try:
            if first is not None:
                yield sse(first)
            async for out in gen:
                yield sse(out)
        except (ValueError, GenerateError) as e:
            yield stream_error_event(to_api_error(e))
        finally:
            await gen.aclose()
        yield b"data: [DONE]\n\n"

    rids = obj.rid if isinstance(obj.rid, list) else [obj.rid]

    async def abort_after_end():
        # The response is over (normally, or because the client left): a request still running is freed.
        await asyncio.sleep(ABORT_AFTER_STREAM_S)
        for rid in rids:
            await tm.abort_request(rid)

    return ServerStream(
        body(), state.server_args.slow_consumer_timeout, background=BackgroundTask(abort_after_end)
    )
