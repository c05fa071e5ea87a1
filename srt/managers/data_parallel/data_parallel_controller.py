"""Data parallelism: one controller in front of --dp-size replicas (each a TP group of schedulers).

Generation requests go to one replica (round robin, or the replica holding the fewest tokens);
aborts and control messages go to every replica. Replicas send their outputs straight to the shared
detokenizer; control replies go to the tokenizer manager, which expects one per replica.
"""

from __future__ import annotations

import logging
import signal
from typing import Dict, List

import zmq

from sglang.srt.core.io_struct.ipc import make_socket, recv_obj, send_obj
from sglang.srt.core.io_struct.to_dp_controller import DPLoad
from sglang.srt.core.io_struct.to_scheduler import TokenizedGenerateReqInput
from sglang.srt.server_args import PortArgs, ServerArgs

logger = logging.getLogger(__name__)


class LoadBalancer:
    def __init__(self, n: int, method: str):
        self.n = n
        self.method = method
        self.next = 0
        self.reported: Dict[int, int] = {i: 0 for i in range(n)}
        self.assigned: Dict[int, int] = {
            i: 0 for i in range(n)
        }  # tokens sent since the last report

    def pick(self, req: TokenizedGenerateReqInput) -> int:
        if self.method == "round_robin":
            i = self.next
            self.next = (self.next + 1) % self.n
            return i
        # total_tokens: the replica with the fewest tokens held (last report + what we sent since).
        i = min(range(self.n), key=lambda k: (self.reported[k] + self.assigned[k], k))
        self.assigned[i] += len(req.input_ids) + (req.sampling_params.max_new_tokens or 0)
        return i

    def report(self, load: DPLoad) -> None:
        self.reported[load.dp_rank] = load.used_tokens
        self.assigned[load.dp_rank] = 0


def run_data_parallel_controller(
    server_args: ServerArgs, port_args: PortArgs, replicas: List[PortArgs]
) -> None:
    from sglang.srt.utils.process import configure_logger, kill_self_when_parent_dies

    configure_logger(server_args.log_level, prefix=" DP")
    kill_self_when_parent_dies(cleanup_dir=port_args.ipc_dir)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ser = server_args.ipc_serializer
    ctx = zmq.Context(2)
    recv = make_socket(ctx, zmq.PULL, port_args.scheduler_input_ipc_name, True)
    loads = make_socket(ctx, zmq.PULL, port_args.dp_load_ipc_name, True)
    sends = [make_socket(ctx, zmq.PUSH, r.scheduler_input_ipc_name, False) for r in replicas]
    lb = LoadBalancer(len(replicas), server_args.load_balance_method)
    poller = zmq.Poller()
    poller.register(recv, zmq.POLLIN)
    poller.register(loads, zmq.POLLIN)
    while True:
        ready = dict(poller.poll())
        while loads in ready:
            try:
                lb.report(recv_obj(loads, ser, zmq.NOBLOCK))
            except zmq.ZMQError:
                break
        if recv not in ready:
            continue
        while True:
            try:
                obj = recv_obj(recv, ser, zmq.NOBLOCK)
            except zmq.ZMQError:
                break
            if isinstance(obj, TokenizedGenerateReqInput):
                send_obj(sends[lb.pick(obj)], obj, ser)
            else:
                for s in sends:
                    send_obj(s, obj, ser)
