"""Unit tests of the frontend language (sglang.lang) that need no server.

The interpreter tests run against `ScriptedBackend`, a small deterministic backend implementing the
backend interface, so fork/join, errors, streaming and run_batch are checked without a model.
"""

from __future__ import annotations

import random
import threading
import time

import pytest

import sglang as sgl
from sglang.lang.backend.base_backend import BaseBackend, choice_token_entries
from sglang.lang.chat_template import (
    chat_template_for_model,
    derive_chat_template,
    get_chat_template,
    match_chat_template_by_path,
)
from sglang.lang.choices import ChoicesDecision
from sglang.lang.global_config import global_config
from sglang.lang.interpreter import extract_prefix_by_tracing
from sglang.lang.ir import (
    REGEX_BOOL,
    REGEX_FLOAT,
    REGEX_INT,
    REGEX_STR,
    SglConstantText,
    SglGen,
    SglRoleBegin,
    SglRoleEnd,
    SglSamplingParams,
    SglSelect,
    cast_value,
)

pytestmark = pytest.mark.timeout(60)


# ---------------------------------------------------------------------------------------------
# Choice methods on hand-made logprobs
# ---------------------------------------------------------------------------------------------


def _entries(*lps):
    return [[lp, 100 + i, f"t{i}"] for i, lp in enumerate(lps)]


def _decide(method, choices, per_choice, unconditional=None):
    means = [
        sum(x[0] for x in e if x[0] is not None) / len([x for x in e if x[0] is not None])
        for e in per_choice
    ]
    return method(
        choices=choices,
        normalized_prompt_logprobs=means,
        input_token_logprobs=per_choice,
        output_token_logprobs=[[] for _ in choices],
        unconditional_token_logprobs=unconditional,
    )


def test_token_length_normalized_picks_best_mean():
    per_choice = [_entries(-0.5, -0.01, -0.01), _entries(-0.4, -2.0), _entries(-0.6)]
    d = _decide(sgl.token_length_normalized, ["long", "two", "one"], per_choice)
    assert isinstance(d, ChoicesDecision)
    assert d.decision == "long"
    assert d.meta_info["normalized_prompt_logprobs"] == pytest.approx([-0.52 / 3, -1.2, -0.6])


def test_greedy_token_selection_follows_the_first_token():
    # Same data: the best first token belongs to "two", which greedy decoding would commit to.
    per_choice = [_entries(-0.5, -0.01, -0.01), _entries(-0.4, -2.0), _entries(-0.6)]
    d = _decide(sgl.greedy_token_selection, ["long", "two", "one"], per_choice)
    assert d.decision == "two"
    # Shorter rows are padded with their own mean.
    assert d.meta_info["greedy_logprob_matrix"][2] == pytest.approx([-0.6, -0.6, -0.6])


def test_greedy_token_selection_prefix_choices():
    # "organ" is a prefix of "organism": tie on the first token, then organ's mean beats "ism".
    per_choice = [_entries(-0.1), _entries(-0.1, -3.0), _entries(-5.0, -0.001)]
    d = _decide(sgl.greedy_token_selection, ["organ", "organism", "other"], per_choice)
    assert d.decision == "organ"
    per_choice[1] = _entries(-0.1, -0.05)  # now "ism" is more likely than stopping
    assert (
        _decide(sgl.greedy_token_selection, ["organ", "organism", "other"], per_choice).decision
        == "organism"
    )


def test_unconditional_likelihood_normalized_discounts_common_choices():
    per_choice = [_entries(-1.0, -1.0), _entries(-0.5, -0.5)]
    unconditional = [_entries(None, -3.0), _entries(None, -0.2)]
    assert _decide(sgl.token_length_normalized, ["rare", "common"], per_choice).decision == "common"
    d = _decide(
        sgl.unconditional_likelihood_normalized, ["rare", "common"], per_choice, unconditional
    )
    assert d.decision == "rare"
    # First unconditional logprob (None) counts as 0: rare = mean(-1, 2) = 0.5, common = mean(-0.5, -0.3).
    assert d.meta_info["normalized_unconditional_prompt_logprobs"] == pytest.approx([0.5, -0.4])
    assert sgl.unconditional_likelihood_normalized.requires_unconditional_logprobs
    assert not sgl.token_length_normalized.requires_unconditional_logprobs


def test_choice_token_entries_cuts_the_shared_prefix():
    # Logprobs start two tokens before the end of the prefix; the seam token " Paris" merged "is " + "Paris".
    entries = [[-1.0, 2988, " answer"], [-2.0, 314, " is"], [-0.5, 7042, " Paris"]]
    assert choice_token_entries(entries, "The answer is ", "Paris", 2) == [[-0.5, 7042, " Paris"]]
    # No merge: both prefix tokens are dropped, all choice tokens kept.
    entries = [[-2.0, 1, "A"], [-1.0, 2, ":"], [-0.3, 3, " ye"], [-0.1, 4, "s"]]
    assert choice_token_entries(entries, "A:", " yes", 2) == entries[2:]
    # A BOS entry with a text that is not in the prompt does not disturb the walk from the end.
    entries = [[None, 1, "<s>"], [-1.0, 5, "Hi"]]
    assert choice_token_entries(entries, "", "Hi", 0) == [[-1.0, 5, "Hi"]]
    # Without token texts the prefix length hint decides.
    entries = [[-2.0, 1, None], [-1.0, 2, None], [-0.3, 3, None]]
    assert choice_token_entries(entries, "A:", " yes", 2) == [[-0.3, 3, None]]


# ---------------------------------------------------------------------------------------------
# IR building and sampling parameters
# ---------------------------------------------------------------------------------------------


def test_ir_building():
    expr = "Q: " + sgl.gen("a", max_tokens=5, stop="\n") + " done"
    nodes = expr.flatten()
    assert [type(n) for n in nodes] == [SglConstantText, SglGen, SglConstantText]
    assert nodes[1].name == "a" and nodes[1].overrides == {"max_new_tokens": 5, "stop": "\n"}

    sel = sgl.gen("c", choices=["x", "y"])
    assert isinstance(sel, SglSelect) and sel.choices == ["x", "y"] and sel.temperature == 0.0
    assert sel.choices_method is sgl.token_length_normalized
    sel = sgl.select("c", ["x", "y"], choices_method=sgl.greedy_token_selection)
    assert sel.choices_method is sgl.greedy_token_selection

    role = sgl.user("hi " + sgl.gen("x")).flatten()
    assert [type(n) for n in role] == [SglRoleBegin, SglConstantText, SglGen, SglRoleEnd]
    assert role[0].role == role[-1].role == "user"
    assert isinstance(sgl.assistant_begin(), SglRoleBegin) and isinstance(
        sgl.system_end(), SglRoleEnd
    )

    assert sgl.gen_int("n").overrides == {"dtype": int}
    assert sgl.gen_string("n").overrides == {"dtype": str}
    assert sgl.gen("n", dtype="float").overrides == {"dtype": float}
    assert sgl.gen("j", json_schema={"type": "object"}).overrides == {
        "json_schema": '{"type": "object"}'
    }


def test_ir_validation():
    with pytest.raises(ValueError):
        sgl.gen("x", regex="([a-z")
    with pytest.raises(ValueError):
        sgl.gen("x", dtype=list)
    with pytest.raises(ValueError):
        sgl.select("x", [])
    with pytest.raises(ValueError):
        sgl.select("x", ["a", ""])
    with pytest.raises(ValueError):
        sgl.select("x", ["a", "b"], temperature=0.7)
    with pytest.raises(TypeError):
        sgl.function(lambda state: None)
    with pytest.raises(TypeError):
        "x" + sgl.gen("a") + 5


def test_sampling_params_translation():
    kw = SglSamplingParams().to_srt_kwargs()
    assert kw == {
        "max_new_tokens": 128,
        "min_new_tokens": 0,
        "n": 1,
        "stop": [],
        "stop_token_ids": [],
        "stop_regex": [],
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,
        "min_p": 0.0,
        "frequency_penalty": 0.0,
        "presence_penalty": 0.0,
        "ignore_eos": False,
    }
    # Per-gen overrides merge onto the run defaults; None keeps the default.
    sp = SglSamplingParams(temperature=0.0, max_new_tokens=32).merged(
        {"max_new_tokens": 8, "stop": "\n", "top_p": None, "regex": "[ab]+"}
    )
    kw = sp.to_srt_kwargs()
    assert (kw["max_new_tokens"], kw["temperature"], kw["stop"], kw["regex"]) == (
        8,
        0.0,
        ["\n"],
        "[ab]+",
    )
    assert "json_schema" not in kw
    assert sp.logprob_kwargs() == {}
    sp = sp.merged({"return_logprob": True, "logprob_start_len": 3})
    assert sp.logprob_kwargs() == {"return_logprob": True, "logprob_start_len": 3}


@pytest.mark.parametrize(
    "dtype,regex,extra_stop",
    [
        (int, REGEX_INT, [" ", "\n"]),
        (float, REGEX_FLOAT, [" ", "\n"]),
        (str, REGEX_STR, []),
        (bool, REGEX_BOOL, []),
    ],
)
def test_dtype_becomes_regex(dtype, regex, extra_stop):
    kw = SglSamplingParams(dtype=dtype, stop=["."]).to_srt_kwargs()
    assert kw["regex"] == regex
    assert kw["stop"] == ["."] + extra_stop


def test_dtype_overrides_regex_with_warning():
    with pytest.warns(UserWarning):
        kw = SglSamplingParams(dtype=int, regex="[a-z]+", stop="\n").to_srt_kwargs()
    assert kw["regex"] == REGEX_INT and kw["stop"] == ["\n", " "]


def test_cast_value():
    assert cast_value(int, "42 \n") == 42
    assert cast_value(float, "-3.5") == -3.5
    assert cast_value(bool, "True") is True and cast_value(bool, "False") is False
    assert cast_value(str, '"hello world"') == "hello world"
    assert cast_value(None, " raw ") == " raw "
    with pytest.raises(ValueError):
        cast_value(int, "")


# ---------------------------------------------------------------------------------------------
# Chat templates
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smollm_tokenizer():
    from sglang.srt.utils.embedded_model import embedded_model_path
    from sglang.srt.utils.hf_tokenizer import get_tokenizer

    try:
        return get_tokenizer(embedded_model_path())
    except FileNotFoundError as e:
        pytest.skip(str(e))


def test_chat_template_from_smollm2_tokenizer(smollm_tokenizer):
    t = derive_chat_template(smollm_tokenizer)
    for role in ("system", "user", "assistant"):
        assert t.get_prefix_and_suffix(role) == (f"<|im_start|>{role}\n", "<|im_end|>\n")
    assert (
        t.default_system_prompt
        == "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
    )
    assert t.stop_str == ("<|im_end|>",)
    table = get_chat_template("smollm2")
    assert t.role_prefix_and_suffix == table.role_prefix_and_suffix
    assert t.default_system_prompt == table.default_system_prompt
    # Rendering with the derived pieces reproduces the tokenizer's own rendering.
    msgs = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    sys_p, sys_s = t.get_prefix_and_suffix("system")
    ours = (
        sys_p
        + t.default_system_prompt
        + sys_s
        + "".join(
            t.get_prefix_and_suffix(m["role"])[0]
            + m["content"]
            + t.get_prefix_and_suffix(m["role"])[1]
            for m in msgs
        )
    )
    assert ours == smollm_tokenizer.apply_chat_template(msgs, tokenize=False)


_LLAMA3_LIKE = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
_SYSTEM_FOLDED = (
    "{% for m in messages %}{% if m['role'] == 'system' %}{% set ns = m['content'] %}"
    "{% elif m['role'] == 'user' %}[INST] {{ m['content'] }} [/INST]{% else %}{{ m['content'] }}</s>"
    "{% endif %}{% endfor %}"
)


def test_chat_template_other_formats(smollm_tokenizer):
    tok = smollm_tokenizer
    saved = tok.chat_template
    try:
        tok.chat_template = _LLAMA3_LIKE
        t = derive_chat_template(tok)
        # The template's {{ bos_token }} is left to the server's tokenizer, not put in role texts.
        assert (
            t.get_prefix_and_suffix("system")[0] == "<|start_header_id|>system<|end_header_id|>\n\n"
        )
        assert t.get_prefix_and_suffix("user") == (
            "<|start_header_id|>user<|end_header_id|>\n\n",
            "<|eot_id|>",
        )
        assert (
            t.get_prefix_and_suffix("assistant")[0]
            == "<|start_header_id|>assistant<|end_header_id|>\n\n"
        )
        assert t.default_system_prompt is None and t.stop_str == ("<|eot_id|>",)
        tok.chat_template = _SYSTEM_FOLDED  # system text does not render as its own message
        with pytest.raises(ValueError):
            derive_chat_template(tok)
        assert (
            chat_template_for_model("/models/Llama-3.2-1B-Instruct", tokenizer=tok).name
            == "llama-3"
        )
    finally:
        tok.chat_template = saved


def test_chat_template_path_table():
    assert match_chat_template_by_path("/x/SmolLM2-135M-Instruct.Q4_1.gguf").name == "smollm2"
    assert match_chat_template_by_path("Qwen/Qwen2.5-7B-Instruct").name == "qwen2.5"
    assert match_chat_template_by_path("Qwen/Qwen3-8B").name == "chatml"
    assert match_chat_template_by_path("meta-llama/Meta-Llama-3-8B").name == "llama-3"
    assert match_chat_template_by_path("some/model").name == "default"
    # An unloadable tokenizer path falls back to the table.
    assert (
        chat_template_for_model("SmolLM2", tokenizer_path="/nonexistent/tokenizer").name
        == "smollm2"
    )


# ---------------------------------------------------------------------------------------------
# Interpreter, over a deterministic backend
# ---------------------------------------------------------------------------------------------


class ScriptedBackend(BaseBackend):
    """gen -> "<last word of the prompt>" cut to max_new_tokens characters ("42" for int regexes);
    select -> the first choice that occurs in the prompt, else the last; "BOOM" in the prompt fails."""

    def __init__(self, jitter: float = 0.0) -> None:
        self.jitter = jitter
        self.calls = []
        self._lock = threading.Lock()

    def _record(self, op, text):
        with self._lock:
            self.calls.append((op, text))

    def get_chat_template(self):
        return get_chat_template("smollm2")

    def cache_prefix(self, prefix):
        self._record("cache_prefix", prefix)

    def commit_lazy_operations(self, s):
        self._record("commit", s.text_)

    def generate(self, s, sampling_params):
        text = s.text_
        self._record("generate", text)
        if "BOOM" in text:
            raise RuntimeError("backend exploded")
        if self.jitter:
            time.sleep(random.random() * self.jitter)
        kw = sampling_params.to_srt_kwargs()
        out = "42" if kw.get("regex") == REGEX_INT else f"<{(text.split() or [''])[-1]}>"
        return out[: kw["max_new_tokens"]], {"completion_tokens": len(out), "stop": kw["stop"]}

    def generate_stream(self, s, sampling_params):
        out, meta = self.generate(s, sampling_params)
        for i in range(0, len(out), 2):
            time.sleep(0.01)  # like a server: pieces arrive over time
            yield out[i : i + 2], meta

    def select(self, s, choices, temperature, choices_method):
        self._record("select", s.text_)
        hits = [c for c in choices if c in s.text_]
        return ChoicesDecision(hits[0] if hits else choices[-1], {"scored": list(choices)})


@pytest.fixture
def backend():
    return ScriptedBackend()


def test_run_gen_select_and_dtype(backend):
    @sgl.function
    def prog(s, word):
        s += "Say " + word + ":" + sgl.gen("echo", max_tokens=4)
        s += " n=" + sgl.gen_int("n") + " pick " + sgl.select("pick", ["cat", "dog"])
        s += " again " + sgl.gen("pick2", choices=["cat", "Say"])

    state = prog.run("hello", backend=backend)
    assert state["echo"] == "<hel"  # max_tokens reached the backend
    assert state["n"] == 42
    assert state["pick"] == "dog" and state["pick2"] == "Say"
    assert state.text() == "Say hello:<hel n=42 pick dog again Say"
    assert state.get_meta_info("pick") == {"scored": ["cat", "dog"]}


def test_run_defaults_and_gen_overrides(backend):
    @sgl.function
    def prog(s):
        s += "a" + sgl.gen("x") + sgl.gen("y", stop="!")

    state = prog.run(backend=backend, stop=["\n"], max_new_tokens=2)
    assert state["x"] == "<a"
    assert state.get_meta_info("x")["stop"] == ["\n"]
    assert state.get_meta_info("y")["stop"] == ["!"]


def test_roles_messages_and_template_stop(backend):
    @sgl.function
    def chat(s, question):
        s += sgl.user(question)
        s += sgl.assistant(sgl.gen("answer"))
        with s.user():
            s += "thanks"

    state = chat.run("What?", backend=backend)
    t = get_chat_template("smollm2")
    assert state.text().startswith(
        "<|im_start|>system\n" + t.default_system_prompt + "<|im_end|>\n"
    )
    assert state["answer"] == "<<|im_start|>assistant>"
    assert (
        "<|im_start|>user\nWhat?<|im_end|>\n<|im_start|>assistant\n<<|im_start|>assistant><|im_end|>\n"
        in state.text()
    )
    assert state.messages() == [
        {"role": "system", "content": t.default_system_prompt},
        {"role": "user", "content": "What?"},
        {"role": "assistant", "content": state["answer"]},
        {"role": "user", "content": "thanks"},
    ]
    assert state.text().endswith("<|im_start|>user\nthanks<|im_end|>\n")
    assert "<|im_end|>" in state.get_meta_info("answer")["stop"]  # end-of-turn marker ends gens


def test_nested_roles_fail(backend):
    @sgl.function
    def bad(s):
        s += sgl.user_begin() + sgl.assistant_begin() + sgl.gen("x")

    state = bad.run(backend=backend)
    with pytest.raises(ValueError, match="cannot nest"):
        state.text()


def test_fork_join_gathers_variables(backend):
    @sgl.function
    def prog(s):
        s += "Topic:"
        forks = s.fork(3)
        for i, f in enumerate(forks):
            f += f" part{i} " + sgl.gen("detail", max_tokens=8)
        forks.join()
        s += " summary " + sgl.gen("summary")

    state = prog.run(backend=backend)
    assert state["detail"] == ["<part0>", "<part1>", "<part2>"]
    assert state.text() == "Topic: summary <summary>"
    # The shared prefix was committed once, before the branches generated with their full text.
    assert backend.calls[0] == ("commit", "Topic:")
    assert sorted(t for op, t in backend.calls if op == "generate")[:3] == [
        "Topic: part0 ",
        "Topic: part1 ",
        "Topic: part2 ",
    ]


def test_fork_concat_and_group_iadd(backend):
    @sgl.function
    def prog(s):
        s += "Start"
        forks = s.fork(2)
        forks += [" A", " B"]
        forks += sgl.gen("g")
        forks.join(mode="concate_and_append")

    state = prog.run(backend=backend)
    assert state.text() == "Start A<A> B<B>"


def test_errors_surface_instead_of_hanging(backend):
    @sgl.function
    def prog(s):
        s += "BOOM " + sgl.gen("x") + sgl.gen("y")

    state = prog.run(backend=backend)
    for read in (lambda: state["x"], lambda: state["y"], state.text, state.sync, state.messages):
        with pytest.raises(RuntimeError, match="exploded"):
            read()
    assert isinstance(state.error(), RuntimeError)

    @sgl.function
    def reads_inside(s):
        s += "BOOM" + sgl.gen("x")
        s += s["x"]  # the program itself sees the error

    with pytest.raises(RuntimeError, match="exploded"):
        reads_inside.run(backend=backend)

    @sgl.function
    def fork_fails(s):
        s += "ok"
        forks = s.fork(2)
        forks[1] += "BOOM" + sgl.gen("x")
        forks.join()

    with pytest.raises(RuntimeError, match="exploded"):
        fork_fails.run(backend=backend)


def test_variable_reuse_waits_for_latest(backend):
    @sgl.function
    def prog(s):
        for word in ("one", "two", "three"):
            s += " " + word + sgl.gen("x")
        s += " got " + s["x"]

    state = prog.run(backend=ScriptedBackend(jitter=0.01))
    assert state["x"] == "<three>"
    assert state.text().endswith(" got <three>")


def test_var_scope_and_copy(backend):
    @sgl.function
    def prog(s):
        with s.var_scope("block"):
            s += "inside " + sgl.gen("g")
        s += " outside"

    state = prog.run(backend=backend)
    assert state["block"] == "inside <inside>"
    clone = state.copy()
    clone += " more"
    assert clone.text() == "inside <inside> outside more"
    assert state.text() == "inside <inside> outside"


def test_streaming_chunks_concatenate(backend):
    @sgl.function
    def prog(s, topic):
        s += "Tell me about " + topic + "." + sgl.gen("answer")
        s += " And" + sgl.gen("more")

    state = prog.run("streaming", backend=backend, stream=True)
    chunks = list(state.text_iter())
    assert len(chunks) > 2
    assert "".join(chunks) == state.text() == "Tell me about streaming.<streaming.> And<And>"

    state = prog.run("vars", backend=backend, stream=True)
    var_chunks = list(state.text_iter("answer"))
    assert len(var_chunks) > 1 and "".join(var_chunks) == state["answer"] == "<vars.>"

    state = prog.run("plain", backend=backend)  # without stream=True: one chunk
    assert list(state.text_iter()) == [state.text()]


def test_streaming_error_surfaces(backend):
    @sgl.function
    def prog(s):
        s += "fine" + sgl.gen("a")
        raise KeyError("program bug")

    state = prog.run(backend=backend, stream=True)
    with pytest.raises(KeyError, match="program bug"):
        "".join(state.text_iter())

    @sgl.function
    def prog2(s):
        s += "BOOM" + sgl.gen("a")

    state = prog2.run(backend=backend, stream=True)
    with pytest.raises(RuntimeError, match="exploded"):
        list(state.text_iter("a"))


def test_run_batch_keeps_order_and_precaches_long_prefix():
    backend = ScriptedBackend(jitter=0.02)
    shared = "You are a careful assistant. Answer every question with a single short word. "

    @sgl.function
    def qa(s, question):
        s += shared + "Q: " + question + " A:" + sgl.gen("answer", max_tokens=16)

    states = qa.run_batch(
        [{"question": f"q{i}"} for i in range(24)],
        backend=backend,
        num_threads=8,
        progress_bar=True,
    )
    assert [st["answer"] for st in states] == ["<A:>"] * 24
    assert [st.text().split("Q: ")[1].split(" ")[0] for st in states] == [
        f"q{i}" for i in range(24)
    ]
    assert backend.calls[0] == ("cache_prefix", shared + "Q: ")
    assert extract_prefix_by_tracing(qa, backend) == shared + "Q: "

    @sgl.function
    def short(s, x):
        s += "Hi " + x + sgl.gen("y")

    backend = ScriptedBackend()
    short.run_batch([{"x": "a"}, {"x": "b"}], backend=backend)
    assert all(op != "cache_prefix" for op, _ in backend.calls)


def test_run_batch_isolates_failures(backend):
    @sgl.function
    def prog(s, word):
        s += word + sgl.gen("x")

    states = prog.run_batch([{"word": "ok"}, {"word": "BOOM"}, {"word": "fine"}], backend=backend)
    assert states[0]["x"] == "<ok>" and states[2]["x"] == "<fine>"
    with pytest.raises(RuntimeError):
        states[1]["x"]


def test_tracing_with_roles_and_bind(backend):
    @sgl.function
    def chat(s, system_prompt, question):
        s += sgl.system(system_prompt)
        s += sgl.user(question)
        s += sgl.assistant(sgl.gen("a"))

    bound = chat.bind(system_prompt="Be brief.")
    prefix = extract_prefix_by_tracing(bound, backend)
    assert prefix == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n"
    state = bound.run(question="Why?", backend=backend)
    assert state.messages()[0] == {"role": "system", "content": "Be brief."}


def test_default_backend_and_argument_errors(backend):
    @sgl.function
    def prog(s, a, b="B"):
        s += a + b

    old = global_config.default_backend
    try:
        sgl.set_default_backend(backend)
        assert prog("A").text() == "AB"
        assert prog.run(a="x", b="y").text() == "xy"
        with pytest.raises(TypeError):
            prog.run()
        with pytest.raises(TypeError):
            prog.run("a", c=1)
    finally:
        global_config.default_backend = old
