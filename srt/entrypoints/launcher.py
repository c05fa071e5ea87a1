"""Starting and stopping the scheduler and detokenizer processes, shared by the HTTP server and Engine.

If any child dies, the watchdog tells the owner (which fails every waiting client) and the rest of
the process tree is taken down: no orphans, no hung clients, no stale ipc files.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing as mp
import multiprocessing.connection
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional

from sglang.srt.core.io_struct.to_launcher import SchedulerReady
from sglang.srt.server_args import PortArgs, ServerArgs

logger = logging.getLogger(__name__)

STARTUP_TIMEOUT_S = 900


def resolve_model_paths(server_args: ServerArgs) -> ServerArgs:
    """No model path means the embedded SmolLM2-135M-Instruct."""
    if server_args.model_path is None:
        from sglang.srt.utils.embedded_model import embedded_model_path

        server_args = dataclasses.replace(server_args, model_path=embedded_model_path())
        if server_args.served_model_name is None:
            server_args.served_model_name = "SmolLM2-135M-Instruct"
    if server_args.tokenizer_path is None:
        server_args = dataclasses.replace(server_args, tokenizer_path=server_args.model_path)
    check_model_path(server_args.model_path)
    return server_args


def check_model_path(path: str) -> None:
    """A model path that cannot work is one clear message here, not a traceback from a child process."""
    what = "an HF model folder (config.json and *.safetensors) or a .gguf file"
    if not os.path.exists(path):
        raise ValueError(f"--model-path {path!r} does not exist; give {what}.")
    if os.path.isdir(path):
        if not os.path.exists(os.path.join(path, "config.json")) and not any(
            f.endswith(".gguf") for f in os.listdir(path)
        ):
            raise ValueError(
                f"--model-path {path!r} is a folder without config.json or a .gguf file; give {what}."
            )
    elif not path.endswith(".gguf"):
        raise ValueError(f"--model-path {path!r} is a file but not a .gguf file; give {what}.")


@dataclass
class Runtime:
    server_args: ServerArgs
    port_args: PortArgs
    ready: SchedulerReady
    procs: List[mp.Process]
    on_child_death: Optional[Callable[[str], None]] = None
    _stopping: bool = False
    _watch: Optional[threading.Thread] = field(default=None, repr=False)

    def start_watchdog(self, on_child_death: Callable[[str], None]) -> None:
        self.on_child_death = on_child_death
        self._watch = threading.Thread(
            target=self._watch_children, daemon=True, name="child-watchdog"
        )
        self._watch.start()

    def _watch_children(self) -> None:
        sentinels = {p.sentinel: p for p in self.procs}
        ready = multiprocessing.connection.wait(list(sentinels))
        if self._stopping:
            return
        dead = sentinels[ready[0]]
        msg = f"The {dead.name} process exited unexpectedly (exit code {dead.exitcode}); the server is shutting down."
        logger.error(msg)
        if self.on_child_death is not None:
            try:
                self.on_child_death(msg)
            except Exception:
                logger.exception("on_child_death failed")

    def shutdown(self) -> None:
        if self._stopping:
            return
        self._stopping = True
        # Children keep no state worth flushing, and they ignore SIGTERM (a signal to the whole process
        # group must reach the parent first, so it can tell clients); kill them outright.
        for p in self.procs:
            if p.is_alive():
                p.kill()
        for p in self.procs:
            p.join(5)
        shutil.rmtree(self.port_args.ipc_dir, ignore_errors=True)


def launch_subprocesses(server_args: ServerArgs) -> Runtime:
    from sglang.srt.managers.detokenizer.detokenizer_manager import run_detokenizer_process
    from sglang.srt.managers.scheduler.scheduler import run_scheduler_process

    ctx = mp.get_context("spawn")
    if server_args.resolved_device() == "cpu":
        # Three processes share the cores: spinning OpenMP workers would starve each other (seen: 2.7x slower).
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    port_args = PortArgs.init_new(server_args)
    procs: List[mp.Process] = []
    readers = []
    try:
        per_node = server_args.tp_size // server_args.nnodes
        first = server_args.node_rank * per_node
        dp = server_args.dp_size
        replicas = [port_args.for_replica(i) for i in range(dp)] if dp > 1 else [port_args]
        for dp_rank, rep in enumerate(replicas):
            for rank in range(first, first + per_node):
                reader, writer = ctx.Pipe(duplex=False)
                gpu = server_args.base_gpu_id + dp_rank * per_node + rank - first
                name = f"scheduler-dp{dp_rank}-tp{rank}" if dp > 1 else f"scheduler-tp{rank}"
                p = ctx.Process(
                    target=run_scheduler_process,
                    args=(server_args, rep, gpu, rank, writer),
                    name=name,
                    daemon=True,
                )
                p.start()
                procs.append(p)
                readers.append(reader)
        if dp > 1:
            from sglang.srt.managers.data_parallel.data_parallel_controller import (
                run_data_parallel_controller,
            )

            c = ctx.Process(
                target=run_data_parallel_controller,
                args=(server_args, port_args, replicas),
                name="dp-controller",
                daemon=True,
            )
            c.start()
            procs.append(c)
        if not server_args.skip_tokenizer_init and server_args.node_rank == 0:
            d = ctx.Process(
                target=run_detokenizer_process,
                args=(server_args, port_args),
                name="detokenizer",
                daemon=True,
            )
            d.start()
            procs.append(d)
        ready = _wait_ready(readers, procs)
    except BaseException:
        for p in procs:
            if p.is_alive():
                p.kill()
        shutil.rmtree(port_args.ipc_dir, ignore_errors=True)
        raise
    return Runtime(server_args, port_args, ready, procs)


def _wait_ready(readers, procs: List[mp.Process]) -> SchedulerReady:
    infos: List[SchedulerReady] = []
    deadline = time.time() + STARTUP_TIMEOUT_S
    for reader in readers:
        while True:
            if reader.poll(0.2):
                kind, payload = reader.recv()
                if kind == "error":
                    raise RuntimeError(f"Scheduler failed to start: {payload}")
                infos.append(payload)
                break
            dead = [p for p in procs if not p.is_alive()]
            if dead:
                raise RuntimeError(
                    f"The {dead[0].name} process died during startup (exit code {dead[0].exitcode})"
                )
            if time.time() > deadline:
                raise RuntimeError("Timed out waiting for the scheduler to start")
    # Every rank must agree on the pool size; the smallest one bounds all.
    ready = infos[0]
    ready.max_total_num_tokens = min(i.max_total_num_tokens for i in infos)
    return ready
