"""The HTTP server: FastAPI routes over the TokenizerManager, run by uvicorn (uvloop).

Errors: a bad request is a 400 with {"error": {"message"}} (also for streams: the first chunk is
produced before the 200 is sent); overload and internal failures use their status code with
{"object": "error", "message", "type", "code"}.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import signal
import threading
import time
from typing import Any, AsyncIterator, Optional

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response, StreamingResponse
from starlette.background import BackgroundTask

from sglang.srt.entrypoints.launcher import Runtime, launch_subprocesses, resolve_model_paths
from sglang.srt.managers.generate_input import GenerateReqInput
from sglang.srt.managers.tokenizer_manager import GenerateError, TokenizerManager
from sglang.srt.server_args import ServerArgs

logger = logging.getLogger("sglang.server")

WARMUP_PROMPT = "The capital city of France is"
HEALTH_TIMEOUT_S = 20.0


class ServerState:
    def __init__(self, server_args: ServerArgs, runtime: Runtime):
        self.server_args = server_args
        self.runtime = runtime
        self.tm: Optional[TokenizerManager] = None
        self.ready = False
        self.shutting_down = False


def json_response(obj: Any, status_code: int = 200) -> Response:
    return Response(content=orjson.dumps(obj), media_type="application/json", status_code=status_code)


def bad_request(msg: str) -> Response:
    return json_response({"error": {"message": msg}}, 400)


def error_response(status: int, msg: str) -> Response:
    return json_response({"object": "error", "message": msg, "type": str(status), "code": status}, status)


async def read_json(request: Request) -> Any:
    raw = await request.body()
    if not raw:
        raise ValueError("The request body is empty; expected a JSON object.")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise ValueError(f"Invalid JSON in the request body: {e}") from None


def sse(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n\n"


async def start_stream(gen: AsyncIterator[Any]):
    """Produce the first chunk before the 200, so validation failures become real status codes."""
    try:
        first = await gen.__anext__()
    except StopAsyncIteration:
        first = None
    return first


def create_app(state: ServerState) -> FastAPI:
    app = FastAPI(title="sglang", docs_url=None, redoc_url=None)
    app.state.s = state

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        return bad_request(str(exc))

    @app.middleware("http")
    async def _auth(request: Request, call_next):
        key = state.server_args.api_key
        if key and request.url.path not in ("/health", "/metrics"):
            if request.headers.get("authorization", "") != f"Bearer {key}":
                return json_response({"error": {"message": "Unauthorized: a valid API key is required."}}, 401)
        return await call_next(request)

    _add_native_routes(app, state)
    try:
        from sglang.srt.entrypoints.openai.routes import add_openai_routes
    except ImportError:
        add_openai_routes = None
    if add_openai_routes is not None:
        add_openai_routes(app, state)
    if state.server_args.enable_metrics:
        from sglang.srt.entrypoints.metrics_route import add_metrics_route

        add_metrics_route(app, state)
    return app


def _add_native_routes(app: FastAPI, state: ServerState) -> None:
    def tm() -> TokenizerManager:
        return state.tm

    @app.get("/health")
    async def health():
        if not state.ready or state.shutting_down or tm().dead_message:
            return Response(status_code=503)
        return Response(status_code=200)

    @app.get("/health_generate")
    async def health_generate():
        if not state.ready or state.shutting_down or tm().dead_message:
            return Response(status_code=503)
        obj = GenerateReqInput(
            input_ids=[0], sampling_params={"max_new_tokens": 1, "temperature": 0}, rid=f"HEALTH_CHECK_{time.time_ns()}"
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
        info.update(st)
        info["internal_states"] = [st]
        info["version"] = __import__("sglang").__version__
        info["process_pids"] = {p.name: p.pid for p in state.runtime.procs}
        info["ipc_dir"] = state.runtime.port_args.ipc_dir
        return info

    app.get("/get_server_info")(server_info)
    app.get("/server_info")(server_info)

    async def flush_cache():
        out = await tm().flush_cache()
        return Response(content=out.message, status_code=200 if out.success else 400)

    app.api_route("/flush_cache", methods=["GET", "POST"])(flush_cache)

    @app.post("/abort_request")
    async def abort_request(request: Request):
        try:
            body = await read_json(request)
            if not isinstance(body, dict):
                raise ValueError("The body must be a JSON object with `rid` or `abort_all`.")
            unknown = sorted(set(body) - {"rid", "abort_all"})
            if unknown:
                raise ValueError(f"Unknown field(s): {', '.join(unknown)}; send `rid` or `abort_all`.")
            rid, abort_all = body.get("rid"), body.get("abort_all", False)
            if not isinstance(abort_all, bool):
                raise ValueError("`abort_all` must be a boolean.")
            if not abort_all and not (isinstance(rid, str) and rid):
                raise ValueError("`rid` must be a non-empty string (or send abort_all: true).")
        except ValueError as e:
            return bad_request(str(e))
        await tm().abort_request(rid or "", abort_all)
        return Response(status_code=200)

    async def tokenize(request: Request):
        try:
            body = await read_json(request)
            prompt = body.get("prompt", body.get("text")) if isinstance(body, dict) else None
            if isinstance(prompt, str):
                ids = tm().tokenizer.encode(prompt, add_special_tokens=bool(body.get("add_special_tokens", True)))
                return {"tokens": ids, "count": len(ids), "max_model_len": tm().context_len}
            if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
                ids = [tm().tokenizer.encode(p) for p in prompt]
                return {"tokens": ids, "count": [len(x) for x in ids], "max_model_len": tm().context_len}
            raise ValueError("`prompt` must be a string or a list of strings.")
        except ValueError as e:
            return bad_request(str(e))

    async def detokenize(request: Request):
        try:
            body = await read_json(request)
            tokens = body.get("tokens") if isinstance(body, dict) else None
            if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
                raise ValueError("`tokens` must be a list of integers.")
            if any(t < 0 or t >= tm().vocab_size for t in tokens):
                raise ValueError(f"token ids must be in [0, {tm().vocab_size}).")
            return {"text": tm().tokenizer.decode(tokens)}
        except ValueError as e:
            return bad_request(str(e))

    for path in ("/tokenize", "/v1/tokenize"):
        app.post(path)(tokenize)
    for path in ("/detokenize", "/v1/detokenize"):
        app.post(path)(detokenize)

    async def generate(request: Request):
        try:
            obj = GenerateReqInput.from_json(await read_json(request))
        except ValueError as e:
            return bad_request(str(e))
        return await run_generate(tm(), obj, request)

    app.api_route("/generate", methods=["POST", "PUT"])(generate)


async def run_generate(tm: TokenizerManager, obj: GenerateReqInput, request: Request) -> Response:
    gen = tm.generate_request(obj, request)
    try:
        if not obj.stream:
            result = None
            async for out in gen:
                result = out
            return json_response(result)
        first = await start_stream(gen)
    except ValueError as e:
        return bad_request(str(e))
    except GenerateError as e:
        return error_response(e.status_code, e.message)

    async def body() -> AsyncIterator[bytes]:
        try:
            if first is not None:
                yield sse(first)
            async for out in gen:
                yield sse(out)
        except (ValueError, GenerateError) as e:
            code = getattr(e, "status_code", 400)
            yield sse({"error": {"message": str(e), "code": code}})
        finally:
            await gen.aclose()
        yield b"data: [DONE]\n\n"

    rids = obj.rid if isinstance(obj.rid, list) else [obj.rid]

    async def abort_after_end():
        # The response is over (normally, or because the client left): a request still running is freed.
        await asyncio.sleep(2)
        for rid in rids:
            await tm.abort_request(rid)

    return StreamingResponse(body(), media_type="text/event-stream", background=BackgroundTask(abort_after_end))


# ---------------------------------------------------------------------------- launching
def launch_server(server_args: ServerArgs) -> None:
    import uvicorn

    from sglang.srt.utils.process import configure_logger

    configure_logger(server_args)
    server_args = resolve_model_paths(server_args)
    runtime = launch_subprocesses(server_args)
    if server_args.node_rank > 0:
        # Other nodes only run their scheduler ranks; node 0 serves HTTP and broadcasts requests.
        logger.info("Node %d: scheduler ranks running; waiting.", server_args.node_rank)
        try:
            for p in runtime.procs:
                p.join()
        finally:
            runtime.shutdown()
        return
    state = ServerState(server_args, runtime)
    app = create_app(state)

    @app.on_event("startup")
    async def _startup():
        from sglang.srt.entrypoints.grammar_validation import attach_grammar_validator

        state.tm = TokenizerManager(server_args, runtime.port_args, runtime.ready)
        attach_grammar_validator(state.tm)
        state.tm.start()
        loop = asyncio.get_running_loop()
        runtime.start_watchdog(lambda msg: loop.call_soon_threadsafe(_on_child_death, state, msg))
        asyncio.create_task(_warmup(state))

    @app.on_event("shutdown")
    async def _shutdown():
        state.shutting_down = True
        runtime.shutdown()

    try:
        uvicorn.run(
            app, host=server_args.host, port=server_args.port, log_level="warning", loop="uvloop", timeout_keep_alive=5
        )
    finally:
        runtime.shutdown()


async def _warmup(state: ServerState) -> None:
    if not state.server_args.skip_server_warmup:
        obj = GenerateReqInput(text=WARMUP_PROMPT, sampling_params={"max_new_tokens": 8, "temperature": 0})
        if state.server_args.skip_tokenizer_init:
            obj = GenerateReqInput(input_ids=[10, 11, 12], sampling_params={"max_new_tokens": 8, "temperature": 0})
        try:
            async for _ in state.tm.generate_request(obj):
                pass
        except Exception as e:  # noqa: BLE001
            logger.error("Warm-up request failed: %s", e)
            _on_child_death(state, f"warm-up failed: {e}")
            return
    state.ready = True
    logger.info("The server is fired up and ready to roll!")


def _on_child_death(state: ServerState, msg: str) -> None:
    """Fail every client, then take the whole server down (a short grace lets error responses go out)."""
    if state.tm is not None:
        state.tm.fail_all(msg)
    state.shutting_down = True

    def stop() -> None:
        time.sleep(1.0)
        state.runtime.shutdown()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5.0)
        os._exit(1)

    threading.Thread(target=stop, daemon=True).start()
