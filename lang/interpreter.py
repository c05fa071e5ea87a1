"""Executes frontend programs: ProgramState (what the program sees), StreamExecutor (a worker thread
that runs the submitted expressions in order), fork/join, run_program and run_program_batch.

The program function runs in the caller's thread and only *submits* expressions; the worker thread
talks to the backend. Reading a variable blocks until the worker has produced it, so a program that
never reads intermediate results keeps requests flowing without waiting on Python control flow.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import uuid
from collections import deque
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import TYPE_CHECKING, Any, Deque, Dict, Iterator, List, Optional, Sequence, Set, Union

from tqdm.auto import tqdm

from sglang.lang.chat_template import ChatTemplate
from sglang.lang.global_config import global_config

if TYPE_CHECKING:
    from sglang.lang.function import SglFunction
from sglang.lang.ir import (
    SglArgument,
    SglCommitLazy,
    SglConcateAndAppend,
    SglConstantText,
    SglExpr,
    SglExprList,
    SglGen,
    SglRoleBegin,
    SglRoleEnd,
    SglSamplingParams,
    SglSelect,
    SglVarScopeBegin,
    SglVarScopeEnd,
    StopTracing,
    as_expr,
    cast_value,
)

logger = logging.getLogger(__name__)

_END = object()  # queue marker: the program function has returned


def _produced_var(node: SglExpr) -> Optional[str]:
    """Name of the variable a node assigns when executed, if any."""
    if isinstance(node, (SglGen, SglSelect, SglVarScopeEnd)):
        return node.name
    return None


def role_begin_text(template: ChatTemplate, role: str, first_message: bool) -> str:
    """Text that opens a role, including the template's default system message where it has one."""
    text = ""
    if first_message and role != "system" and template.default_system_prompt is not None:
        prefix, suffix = template.get_prefix_and_suffix("system")
        text = prefix + template.default_system_prompt + suffix
    return text + template.get_prefix_and_suffix(role)[0]


class StreamExecutor:
    """Runs one program's expressions on a worker thread and holds the program's text and variables."""

    def __init__(
        self,
        backend: Any,
        default_sampling_params: SglSamplingParams,
        stream: bool = False,
        chat_template: Optional[ChatTemplate] = None,
    ) -> None:
        self.sid = uuid.uuid4().hex
        self.backend = backend
        self.default_sampling_params = default_sampling_params
        self.stream = stream
        self._chat_template = chat_template

        self.text_ = ""
        self.messages_: List[Dict[str, Any]] = []
        self.variables: Dict[str, Any] = {}
        self.variable_event: Dict[str, threading.Event] = {}
        # One event per submitted assignment, in order: with `gen("x")` submitted twice, s["x"]
        # must wait for the second one, so each execution sets the event of its own submission.
        self._pending_events: Dict[str, Deque[threading.Event]] = {}
        self.meta_info: Dict[str, Any] = {}
        self.cur_role: Optional[str] = None
        self.cur_role_begin_pos = 0
        self.uses_roles = False
        self.var_scope_begin: Dict[str, int] = {}
        self.fork_start_text_pos: Optional[int] = None
        self.assigned_since_fork: List[str] = []  # join("gather_variable") collects these
        self.error_: Optional[BaseException] = None

        # Guards text_ growth, errors and the streaming views; waiters in text_iter sleep on it.
        self._cv = threading.Condition()
        self.stream_var_text: Dict[str, str] = {}
        self.stream_var_done: Set[str] = set()
        self.finished = False

        self._queue: "queue.Queue[Any]" = queue.Queue()
        self._worker: Optional[threading.Thread] = None
        self._worker_lock = threading.Lock()

    # --- submission and the worker ---------------------------------------------------------

    @property
    def chat_template(self) -> ChatTemplate:
        if self._chat_template is None:
            self._chat_template = self.backend.get_chat_template()
        return self._chat_template

    def submit(self, expr: Any) -> None:
        nodes = as_expr(expr).flatten()
        with self._cv:
            for node in nodes:
                # Register the event now, in the program's thread, so that s[name] right after
                # submission waits for this assignment instead of returning an older value.
                name = _produced_var(node)
                if name:
                    ev = threading.Event()
                    if self.error_ is not None:  # it will never run: readers must not wait
                        ev.set()
                    self.variable_event[name] = ev
                    self._pending_events.setdefault(name, deque()).append(ev)
        self._put(nodes)

    def _put(self, items: Sequence[Any]) -> None:
        with self._worker_lock:
            for item in items:
                self._queue.put(item)
            if self._worker is None:
                self._worker = threading.Thread(
                    target=self._work, name=f"sgl-{self.sid[:8]}", daemon=True
                )
                self._worker.start()

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is _END:
                    with self._cv:
                        self.finished = True
                        self._cv.notify_all()
                elif self.error_ is None:  # after an error, drain without executing
                    self._execute(item)
            except BaseException as e:  # noqa: BLE001 - every failure must reach the program
                self.fail(e)
            finally:
                self._queue.task_done()
            with self._worker_lock:
                # Exit when idle after END; a later submit starts a fresh worker.
                if item is _END and self._queue.empty():
                    self._worker = None
                    return

    def fail(self, error: BaseException) -> None:
        """Record the first error and wake everyone waiting on this program."""
        with self._cv:
            if self.error_ is None:
                self.error_ = error
            for ev in self.variable_event.values():
                ev.set()
            for pending in self._pending_events.values():
                for ev in pending:
                    ev.set()
            self._cv.notify_all()

    def end(self) -> None:
        """The program function is done: let the worker finish the queue and exit."""
        self._put([_END])

    def wait(self) -> None:
        self._queue.join()

    def sync(self) -> None:
        self.wait()
        self.raise_if_failed()

    def raise_if_failed(self) -> None:
        if self.error_ is not None:
            raise self.error_

    # --- reading ----------------------------------------------------------------------------

    def get_var(self, name: str) -> Any:
        ev = self.variable_event.get(name)
        if ev is None:
            raise KeyError(f"the program has no variable {name!r}")
        ev.wait()
        self.raise_if_failed()
        return self.variables[name]

    def set_var(
        self, name: str, value: Any, meta_info: Any = None, text: Optional[str] = None
    ) -> None:
        """Assign a variable; `text` is its generated text when the value is a cast of it."""
        with self._cv:
            self.variables[name] = value
            self.meta_info[name] = meta_info
            self.assigned_since_fork.append(name)
            self.stream_var_text[name] = (
                text if text is not None else (value if isinstance(value, str) else str(value))
            )
            self.stream_var_done.add(name)
            pending = self._pending_events.get(name)
            ev = (
                pending.popleft()
                if pending
                else self.variable_event.setdefault(name, threading.Event())
            )
            self._cv.notify_all()
        ev.set()

    def _append(self, text: str, var: Optional[str] = None) -> None:
        if not text:
            return
        with self._cv:
            self.text_ += text
            if var is not None:
                self.stream_var_text[var] = self.stream_var_text.get(var, "") + text
            self._cv.notify_all()

    # --- execution ---------------------------------------------------------------------------

    def _execute(self, node: SglExpr) -> None:
        if isinstance(node, SglConstantText):
            self._append(node.value)
        elif isinstance(node, SglGen):
            self._execute_gen(node)
        elif isinstance(node, SglSelect):
            decision = self.backend.select(
                self, node.choices, node.temperature, node.choices_method
            )
            self._append(decision.decision)
            if node.name:
                self.set_var(node.name, decision.decision, decision.meta_info)
        elif isinstance(node, SglRoleBegin):
            self._role_begin(node.role)
        elif isinstance(node, SglRoleEnd):
            self._role_end(node.role)
        elif isinstance(node, SglVarScopeBegin):
            self.var_scope_begin[node.name] = len(self.text_)
        elif isinstance(node, SglVarScopeEnd):
            self.set_var(node.name, self.text_[self.var_scope_begin.pop(node.name) :])
        elif isinstance(node, SglCommitLazy):
            self.backend.commit_lazy_operations(self)
        elif isinstance(node, SglConcateAndAppend):
            for state in node.states:
                child = state.stream_executor
                child.sync()
                self._append(child.text_[child.fork_start_text_pos :])
        elif isinstance(node, SglArgument):
            raise TypeError(f"argument placeholder {node.name!r} reached a real run")
        else:
            raise TypeError(f"unknown expression {type(node).__name__}")

    def _sampling_params(self, node: SglGen) -> SglSamplingParams:
        sp = self.default_sampling_params.merged(node.overrides)
        # In chat-formatted prompts the end-of-turn marker must end a gen even if the server keeps it.
        if self.uses_roles and self.chat_template.stop_str:
            stop = [sp.stop] if isinstance(sp.stop, str) else list(sp.stop)
            sp = sp.merged(
                {"stop": stop + [x for x in self.chat_template.stop_str if x not in stop]}
            )
        return sp

    def _execute_gen(self, node: SglGen) -> None:
        sp = self._sampling_params(node)
        if self.stream:
            if node.name:
                with self._cv:
                    self.stream_var_text[node.name] = ""
                    self.stream_var_done.discard(node.name)
            pieces, meta = [], {}
            for piece, meta in self.backend.generate_stream(self, sp):  # noqa: B007 - the last meta is kept
                pieces.append(piece)
                self._append(piece, node.name)
            comp = "".join(pieces)
        else:
            comp, meta = self.backend.generate(self, sp)
            self._append(comp)
        if node.name:
            self.set_var(node.name, cast_value(sp.dtype, comp), meta, text=comp)

    def _role_begin(self, role: str) -> None:
        if self.cur_role is not None:
            raise ValueError(
                f"role {role!r} opened inside role {self.cur_role!r}; roles cannot nest"
            )
        template = self.chat_template
        first = not self.messages_
        if first and role != "system" and template.default_system_prompt is not None:
            self.messages_.append({"role": "system", "content": template.default_system_prompt})
        self._append(role_begin_text(template, role, first))
        self.uses_roles = True
        self.cur_role = role
        self.cur_role_begin_pos = len(self.text_)

    def _role_end(self, role: str) -> None:
        if self.cur_role != role:
            raise ValueError(f"closing role {role!r} but the open role is {self.cur_role!r}")
        content = self.text_[self.cur_role_begin_pos :]
        self._append(self.chat_template.get_prefix_and_suffix(role)[1])
        self.messages_.append({"role": role, "content": content})
        self.cur_role = None

    # --- fork --------------------------------------------------------------------------------

    def fork(self, size: int) -> List["StreamExecutor"]:
        if size > 1:
            # Put the shared prefix into the server's radix cache once, before the branches race.
            self.submit(SglCommitLazy())
        self.sync()
        children = []
        for _ in range(size):
            child = StreamExecutor(
                self.backend, self.default_sampling_params, chat_template=self._chat_template
            )
            child.text_ = self.text_
            child.messages_ = list(self.messages_)
            child.variables = dict(self.variables)
            child.meta_info = dict(self.meta_info)
            for name in child.variables:
                child.variable_event[name] = threading.Event()
                child.variable_event[name].set()
            child.cur_role, child.cur_role_begin_pos = self.cur_role, self.cur_role_begin_pos
            child.uses_roles = self.uses_roles
            child.fork_start_text_pos = len(self.text_)
            children.append(child)
        return children


# ---------------------------------------------------------------------------------------------
# What the program function sees
# ---------------------------------------------------------------------------------------------


class _RoleMethods:
    """`s.user("hi")` appends a whole message; `with s.user(): ...` wraps what the block appends."""

    def _submit(self, expr: Any) -> None:
        raise NotImplementedError

    def _role(self, role: str, expr: Any = None) -> Any:
        if expr is not None:
            self._submit(SglExprList([SglRoleBegin(role), as_expr(expr), SglRoleEnd(role)]))
            return None

        @contextlib.contextmanager
        def scope() -> Iterator[None]:
            self._submit(SglRoleBegin(role))
            yield
            self._submit(SglRoleEnd(role))

        return scope()

    def system(self, expr: Any = None) -> Any:
        return self._role("system", expr)

    def user(self, expr: Any = None) -> Any:
        return self._role("user", expr)

    def assistant(self, expr: Any = None) -> Any:
        return self._role("assistant", expr)

    @contextlib.contextmanager
    def var_scope(self, name: str) -> Iterator[None]:
        """Everything appended inside the block becomes variable `name`."""
        self._submit(SglVarScopeBegin(name))
        yield
        self._submit(SglVarScopeEnd(name))


class ProgramState(_RoleMethods):
    def __init__(self, stream_executor: StreamExecutor) -> None:
        self.stream_executor = stream_executor

    def _submit(self, expr: Any) -> None:
        self.stream_executor.submit(expr)

    def __iadd__(self, other: Any) -> "ProgramState":
        self._submit(other)
        return self

    def __getitem__(self, name: str) -> Any:
        return self.stream_executor.get_var(name)

    def __contains__(self, name: str) -> bool:
        return name in self.stream_executor.variable_event

    def get_var(self, name: str) -> Any:
        return self[name]

    def get_meta_info(self, name: str) -> Any:
        self.stream_executor.get_var(name)
        return self.stream_executor.meta_info.get(name)

    def set_var(self, name: str, value: Any) -> None:
        self.stream_executor.sync()
        self.stream_executor.set_var(name, value)

    def text(self) -> str:
        self.stream_executor.sync()
        return self.stream_executor.text_

    def messages(self) -> List[Dict[str, Any]]:
        self.stream_executor.sync()
        return list(self.stream_executor.messages_)

    def sync(self) -> None:
        self.stream_executor.sync()

    def error(self) -> Optional[BaseException]:
        """The error that stopped the program, if any (after waiting for it to finish)."""
        self.stream_executor.wait()
        return self.stream_executor.error_

    def fork(self, size: int = 1) -> "ProgramStateGroup":
        return ProgramStateGroup([ProgramState(e) for e in self.stream_executor.fork(size)], self)

    def copy(self) -> "ProgramState":
        return self.fork(1)[0]

    def text_iter(self, var_name: Optional[str] = None) -> Iterator[str]:
        """Chunks of the program text (or of one variable) as they are generated.

        Joined together they equal `text()` (or the variable's text). Without stream=True the whole
        text comes as one chunk once the program is done.
        """
        ex = self.stream_executor
        if not ex.stream:
            if var_name is None:
                yield self.text()
            else:
                self[var_name]  # waits, and raises if the program failed
                yield ex.stream_var_text[var_name]
            return

        def current() -> str:
            return ex.text_ if var_name is None else ex.stream_var_text.get(var_name, "")

        def done() -> bool:
            return (
                ex.finished
                or ex.error_ is not None
                or (var_name is not None and var_name in ex.stream_var_done)
            )

        pos = 0
        while True:
            with ex._cv:
                ex._cv.wait_for(lambda pos=pos: len(current()) > pos or done())
                chunk, finished = current()[pos:], done()
            if chunk:
                pos += len(chunk)
                yield chunk
            elif finished:
                break
        ex.raise_if_failed()

    def __repr__(self) -> str:
        return (
            f"ProgramState({self.stream_executor.text_!r})"  # no sync: repr must not block or raise
        )


class ProgramStateGroup:
    """The branches of a fork; `join()` brings their results back to the parent."""

    def __init__(self, states: List[ProgramState], parent: ProgramState) -> None:
        self.states = states
        self.parent = parent

    def __len__(self) -> int:
        return len(self.states)

    def __getitem__(self, i: int) -> ProgramState:
        return self.states[i]

    def __setitem__(self, i: int, state: ProgramState) -> None:
        # `forks[i] += expr` assigns the (same) state back after __iadd__.
        self.states[i] = state

    def __iter__(self) -> Iterator[ProgramState]:
        return iter(self.states)

    def __iadd__(self, other: Any) -> "ProgramStateGroup":
        """`forks += expr` appends to every branch; a list/tuple gives one expression per branch."""
        if isinstance(other, (list, tuple)):
            if len(other) != len(self.states):
                raise ValueError(f"{len(other)} expressions for {len(self.states)} branches")
            for state, expr in zip(self.states, other):
                state += expr
        else:
            for state in self.states:
                state += other
        return self

    def join(self, mode: str = "gather_variable") -> None:
        parent = self.parent.stream_executor
        if mode == "gather_variable":
            for state in self.states:
                state.stream_executor.sync()
            parent.sync()
            names: List[str] = []
            for state in self.states:
                names += [n for n in state.stream_executor.assigned_since_fork if n not in names]
            for name in names:
                children = [s.stream_executor for s in self.states]
                parent.set_var(
                    name,
                    [c.variables.get(name) for c in children],
                    [c.meta_info.get(name) for c in children],
                )
        elif mode == "concate_and_append":
            parent.submit(SglConcateAndAppend(self.states))
            parent.sync()
        else:
            raise ValueError(
                f"unknown join mode {mode!r}; use 'gather_variable' or 'concate_and_append'"
            )
        for state in self.states:
            state.stream_executor.end()


# ---------------------------------------------------------------------------------------------
# Running programs
# ---------------------------------------------------------------------------------------------


def _run_body(program: SglFunction, state: ProgramState, arguments: Dict[str, Any]) -> None:
    """Run the function with errors captured in the state (threads have nobody to raise to)."""
    try:
        program.func(state, **arguments)
    except BaseException as e:  # noqa: BLE001
        state.stream_executor.fail(e)
    finally:
        state.stream_executor.end()


def run_program(
    program: SglFunction,
    backend: Any,
    arguments: Dict[str, Any],
    default_sampling_params: SglSamplingParams,
    stream: bool = False,
) -> ProgramState:
    """Without stream: returns when the program is done (backend errors surface when the state is
    read). With stream: returns at once while the program runs in a thread; iterate `text_iter()`."""
    state = ProgramState(StreamExecutor(backend, default_sampling_params, stream=stream))
    if stream:
        threading.Thread(target=_run_body, args=(program, state, arguments), daemon=True).start()
        return state
    try:
        program.func(state, **arguments)
    finally:
        state.stream_executor.end()
        state.stream_executor.wait()
    return state


class _PrefixTracer(_RoleMethods):
    """Stands in for ProgramState while tracing: collects the leading constant text, stops at the
    first thing whose text depends on the arguments or on generation."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.prefix = ""
        self.first_message = True
        self.cur_role: Optional[str] = None

    def _submit(self, expr: Any) -> None:
        for node in as_expr(expr).flatten():
            if isinstance(node, SglConstantText):
                self.prefix += node.value
            elif isinstance(node, SglRoleBegin) and self.cur_role is None:
                self.prefix += role_begin_text(
                    self.backend.get_chat_template(), node.role, self.first_message
                )
                self.first_message, self.cur_role = False, node.role
            elif isinstance(node, SglRoleEnd) and self.cur_role == node.role:
                self.prefix += self.backend.get_chat_template().get_prefix_and_suffix(node.role)[1]
                self.cur_role = None
            else:
                raise StopTracing(type(node).__name__)

    def __iadd__(self, other: Any) -> "_PrefixTracer":
        self._submit(other)
        return self

    def __getattr__(self, name: str) -> Any:
        # s["x"], s.fork(), s.text(), ...: the trace cannot continue without running the program.
        raise StopTracing(name)

    def __getitem__(self, name: str) -> Any:
        raise StopTracing(name)


def extract_prefix_by_tracing(program: SglFunction, backend: Any) -> str:
    """The text every run of `program` starts with, whatever its arguments."""
    tracer = _PrefixTracer(backend)
    placeholders = {n: SglArgument(n) for n in program.arg_names}
    placeholders.update(program.bind_arguments)  # bound values are the same for every run
    try:
        program.func(tracer, **placeholders)
    except StopTracing:
        pass
    except Exception as e:  # noqa: BLE001 - programs may do anything with a placeholder; the prefix so far holds
        logger.debug("tracing %s stopped at %r", program.func.__name__, e)
    return tracer.prefix


def cache_program(program: SglFunction, backend: Any) -> None:
    prefix = extract_prefix_by_tracing(program, backend)
    if len(prefix) > global_config.precache_min_chars:
        try:
            backend.cache_prefix(prefix)
        except Exception as e:  # noqa: BLE001 - an optimisation only: the programs themselves will report errors
            logger.warning("precaching the shared prefix failed: %s", e)


def _num_threads(num_threads: Union[int, str], n: int) -> int:
    if num_threads == "auto":
        num_threads = max(global_config.min_auto_threads, 16 * (os.cpu_count() or 1))
    return max(1, min(int(num_threads), n))


def run_program_batch(
    program: SglFunction,
    backend: Any,
    batch_arguments: Sequence[Dict[str, Any]],
    default_sampling_params: SglSamplingParams,
    num_threads: Union[int, str] = "auto",
    progress_bar: bool = False,
) -> List[ProgramState]:
    """Run the program once per argument dict; states come back in input order. A failing program
    does not stop the others: its state raises when read."""
    if not batch_arguments:
        return []
    if global_config.enable_precache_with_tracing and len(batch_arguments) > 1:
        cache_program(program, backend)

    def run_one(arguments: Dict[str, Any]) -> ProgramState:
        state = ProgramState(StreamExecutor(backend, default_sampling_params))
        _run_body(program, state, arguments)
        state.stream_executor.wait()
        return state

    with ThreadPoolExecutor(_num_threads(num_threads, len(batch_arguments))) as pool:
        futures = [pool.submit(run_one, a) for a in batch_arguments]
        with tqdm(total=len(futures), disable=not progress_bar) as bar:
            for _ in as_completed(futures):
                bar.update(1)
        return [f.result() for f in futures]
