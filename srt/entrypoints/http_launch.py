"""`sglang serve`: bind the port, start the processes, serve HTTP, and shut down in bounded time.

Order: the listening socket is bound before the model loads (a busy port is a message within a
second); the scheduler and detokenizer start; uvicorn serves on the bound socket; a warm-up request
runs, then the ready line prints the URL. On SIGTERM (or Ctrl-C) new requests are refused at once,
running ones get --graceful-shutdown-timeout seconds, the rest are aborted, and the process exits 0.
If any child process dies, every client is told and the whole server exits 1.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from typing import TYPE_CHECKING, Any

from sglang.srt.core.generate_input import GenerateReqInput
from sglang.srt.entrypoints.launcher import launch_subprocesses, resolve_model_paths
from sglang.srt.entrypoints.listen_socket import bind_listen_socket
from sglang.srt.server_args import ServerArgs

if TYPE_CHECKING:
    from sglang.srt.entrypoints.server_state import ServerState

logger = logging.getLogger("sglang.server")

WARMUP_PROMPT = "The capital city of France is"
# How long before uvicorn's graceful-shutdown deadline the remaining requests are aborted.
DRAIN_MARGIN_S = 0.5


def launch_server(server_args: ServerArgs) -> None:
    import uvicorn

    from sglang.srt.utils.process import configure_logger

    configure_logger(server_args.log_level)
    server_args = resolve_model_paths(server_args)
    sock = (
        bind_listen_socket(server_args.host, server_args.port)
        if server_args.node_rank == 0
        else None
    )
    # The HTTP stack (FastAPI, transformers, xgrammar) takes seconds to import: do it while the
    # scheduler and detokenizer processes start, not before.
    preload = threading.Thread(target=_import_http_stack, daemon=True, name="import-http")
    preload.start()
    runtime = launch_subprocesses(server_args)
    preload.join()
    from sglang.srt.entrypoints.http_server import create_app
    from sglang.srt.entrypoints.server_state import ServerState
    from sglang.srt.managers.tokenizer.tokenizer_manager import TokenizerManager

    if sock is None:
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
        loop = state.loop = asyncio.get_running_loop()
        runtime.start_watchdog(lambda msg: loop.call_soon_threadsafe(_on_child_death, state, msg))
        app.state.warmup_task = asyncio.create_task(_warmup(state))

    @app.on_event("shutdown")
    async def _shutdown():
        state.shutting_down = True
        if state.tm is not None:
            left = await state.tm.drain(0.0)
            if left:
                logger.info("Aborted %d request(s) still running at shutdown.", left)
        runtime.shutdown()

    config = uvicorn.Config(
        app,
        log_level="warning",
        loop="uvloop",
        timeout_keep_alive=5,
        timeout_graceful_shutdown=server_args.graceful_shutdown_timeout,
    )
    server = _GracefulServer(config, state)
    # uvicorn re-raises the signal that stopped it once it has shut down gracefully; this handler
    # turns that SIGTERM into a normal exit (status 0) instead of death by signal.
    signal.signal(signal.SIGTERM, _exit_normally)
    try:
        server.run(sockets=[sock])
    except SystemExit as e:
        if e.code not in (0, None):
            raise
    finally:
        runtime.shutdown()
        sock.close()
    if state.failure is not None:
        raise RuntimeError(state.failure)


def _import_http_stack() -> None:
    import sglang.srt.entrypoints.grammar_validation
    import sglang.srt.entrypoints.http_server
    import sglang.srt.entrypoints.openai.routes  # noqa: F401

    try:
        import xgrammar  # noqa: F401
    except ImportError:
        pass


def _exit_normally(signum: int, frame: Any) -> None:
    raise SystemExit(0)


class _GracefulServer:
    """uvicorn.Server whose first exit signal also stops the TokenizerManager taking new requests."""

    def __new__(cls, config: Any, state: ServerState) -> Any:
        import uvicorn

        class Server(uvicorn.Server):
            def handle_exit(self, sig: int, frame: Any) -> None:
                if not state.shutting_down:
                    state.shutting_down = True
                    timeout = state.server_args.graceful_shutdown_timeout
                    logger.info(
                        "Shutting down: new requests are refused; running ones get %.0f s to finish.",
                        timeout,
                    )
                    if state.tm is not None:
                        state.tm.closing_message = "The server is shutting down."
                    if state.tm is not None and state.loop is not None:
                        # Abort what is left a little before uvicorn cancels the responses, so that
                        # every stream still ends with an error event and [DONE], not a cut connection.
                        drain = state.tm.drain(max(timeout - DRAIN_MARGIN_S, 0.0))
                        state.loop.call_soon_threadsafe(lambda: state.loop.create_task(drain))
                super().handle_exit(sig, frame)

        return Server(config)


async def _warmup(state: ServerState) -> None:
    sa = state.server_args
    if not sa.skip_server_warmup:
        sp = {"max_new_tokens": 8, "temperature": 0}
        if sa.skip_tokenizer_init:
            obj = GenerateReqInput(input_ids=[10, 11, 12], sampling_params=sp, log_metrics=False)
        else:
            obj = GenerateReqInput(text=WARMUP_PROMPT, sampling_params=sp, log_metrics=False)
        try:
            async for _ in state.tm.generate_request(obj):
                pass
        except Exception as e:  # noqa: BLE001 - any failure here means the server cannot serve
            logger.error("Warm-up request failed: %s", e)
            _on_child_death(state, f"warm-up failed: {e}")
            return
    state.ready = True
    host = "127.0.0.1" if sa.host in ("0.0.0.0", "::") else sa.host
    logger.info(
        "The server is fired up and ready to roll! Serving %s at http://%s:%d (for example: curl http://%s:%d/v1/models)",
        sa.served_name(),
        host,
        sa.port,
        host,
        sa.port,
    )


def _on_child_death(state: ServerState, msg: str) -> None:
    """Fail every client, then take the whole server down (a short grace lets error responses go out)."""
    if state.tm is not None:
        state.tm.fail_all(msg)
    state.shutting_down = True
    state.failure = msg

    def stop() -> None:
        time.sleep(1.0)
        state.runtime.shutdown()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5.0)
        os._exit(1)

    threading.Thread(target=stop, daemon=True).start()
