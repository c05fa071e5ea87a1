"""Frontend language against a running server (RuntimeEndpoint over HTTP).

Needs the `server_url` fixture (from test/conftest.py) or the SGLANG_TEST_SERVER_URL environment
variable; without either, every test here is skipped. Kept cheap for SmolLM2-135M on a 2-core CPU:
short prompts, at most 16 new tokens per gen.
"""

from __future__ import annotations

import os
import re

import pytest

import sglang as sgl

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def server(request) -> str:
    try:
        return request.getfixturevalue("server_url")
    except pytest.FixtureLookupError:
        url = os.environ.get("SGLANG_TEST_SERVER_URL")
        if not url:
            pytest.skip("no server: provide the server_url fixture or SGLANG_TEST_SERVER_URL")
        return url


@pytest.fixture
def backend(server):
    b = sgl.RuntimeEndpoint(server)
    yield b
    b.shutdown()


@pytest.fixture
def tokenizer(backend):
    from sglang.srt.utils.hf_tokenizer import get_tokenizer

    return get_tokenizer(backend.model_info["tokenizer_path"])


@sgl.function
def few_shot_capital(s, country):
    s += "Q: What is the capital of France?\nA: Paris\n"
    s += "Q: What is the capital of Japan?\nA: Tokyo\n"
    s += (
        "Q: What is the capital of "
        + country
        + "?\nA:"
        + sgl.gen("answer", max_tokens=8, stop="\n")
    )


def test_few_shot_gen_with_stop(backend):
    state = few_shot_capital.run("Italy", backend=backend, temperature=0)
    answer = state["answer"]
    assert "\n" not in answer and answer.strip()
    assert "rome" in answer.lower()
    assert state.text().endswith("A:" + answer)
    meta = state.get_meta_info("answer")
    assert meta["prompt_tokens"] > 0 and 0 < meta["completion_tokens"] <= 8


def _hf_choice_mean_logprob(model, tokenizer, prefix: str, choice: str) -> float:
    """Mean logprob of the tokens of prefix+choice that reach into the choice, computed by HF."""
    import torch

    enc = tokenizer(prefix + choice, return_offsets_mapping=True)
    ids = enc["input_ids"]
    positions = [
        i for i, (_, end) in enumerate(enc["offset_mapping"]) if end > len(prefix) and i > 0
    ]
    with torch.no_grad():
        logp = model(torch.tensor([ids])).logits[0].float().log_softmax(-1)
    return sum(logp[i - 1, ids[i]].item() for i in positions) / len(positions)


def test_select_matches_hf_logprobs(backend, tokenizer):
    model_fixtures = pytest.importorskip("model_fixtures")
    model_path = backend.model_info["model_path"]
    if not os.path.exists(model_path):
        pytest.skip(f"model {model_path} is not readable here")
    model = model_fixtures.load_hf_model(model_path)

    prefix = "The capital of France is"
    choices = [" Paris", " London", " a big city in Europe"]

    @sgl.function
    def pick(s):
        s += prefix + sgl.select("city", choices)

    state = pick.run(backend=backend)
    ours = state.get_meta_info("city")["normalized_prompt_logprobs"]
    ref = [_hf_choice_mean_logprob(model, tokenizer, prefix, c) for c in choices]
    assert ours == pytest.approx(ref, abs=2e-2)
    assert state["city"] == choices[max(range(len(ref)), key=ref.__getitem__)]
    assert state.text() == prefix + state["city"]


def test_select_methods(backend):
    @sgl.function
    def judge(s, method):
        s += "Q: Is the sun hot? Answer yes or no.\nA:" + sgl.select(
            "a", [" yes", " no"], choices_method=method
        )

    for method in (sgl.greedy_token_selection, sgl.unconditional_likelihood_normalized):
        state = judge.run(method, backend=backend)
        assert state["a"] in (" yes", " no")
    assert len(state.get_meta_info("a")["unconditional_token_logprobs"]) == 2


def test_fork_branches_hit_the_prefix_cache(backend):
    backend.flush_cache()
    shared = (
        "The following is a list of short facts about rivers, mountains and lakes of the world, "
        "written for a school geography quiz with one sentence per fact. "
    ) * 2

    @sgl.function
    def branches(s):
        s += shared
        forks = s.fork(3)
        for i, f in enumerate(forks):
            f += f"Fact {i + 1}:" + sgl.gen("fact", max_tokens=4, temperature=0)
        forks.join()

    state = branches.run(backend=backend)
    assert len(state["fact"]) == 3
    for meta in state.get_meta_info("fact"):
        # Everything but the few branch-specific tokens comes from the committed prefix.
        assert meta["cached_tokens"] >= meta["prompt_tokens"] - 8 > 0


def test_regex_and_dtype_gens(backend):
    @sgl.function
    def typed(s):
        s += (
            "Is water wet? Answer yes or no: "
            + sgl.gen("yn", regex=r"(yes|no)", max_tokens=4)
            + "\n"
        )
        s += "How many days are in a week? " + sgl.gen_int("days", max_tokens=4) + "\n"
        s += "Pi is about " + sgl.gen("pi", dtype=float, max_tokens=8) + "\n"
        s += "Is fire cold? True or False: " + sgl.gen("b", dtype=bool, max_tokens=4) + "\n"
        s += "Name a color in quotes: " + sgl.gen_string("color", max_tokens=8) + "\n"

    state = typed.run(backend=backend, temperature=0)
    assert state["yn"] in ("yes", "no")
    assert isinstance(state["days"], int)
    assert isinstance(state["pi"], float)
    assert isinstance(state["b"], bool)
    assert isinstance(state["color"], str)
    assert re.search(r"days are in a week\? [-+]?[0-9]+", state.text())


def test_streaming(backend):
    @sgl.function
    def story(s):
        s += "Once upon a time" + sgl.gen("story", max_tokens=16, temperature=0)

    state = story.run(backend=backend, stream=True)
    chunks = list(state.text_iter())
    assert "".join(chunks) == state.text()
    assert state.text().startswith("Once upon a time")

    state = story.run(backend=backend, stream=True)
    var_chunks = list(state.text_iter("story"))
    assert "".join(var_chunks) == state["story"]


def test_roles_with_chat_template(backend):
    @sgl.function
    def chat(s, question):
        s += sgl.system("You answer in one word.")
        s += sgl.user(question)
        s += sgl.assistant(sgl.gen("answer", max_tokens=8))

    state = chat.run("What color is the sky?", backend=backend, temperature=0)
    messages = state.messages()
    assert [m["role"] for m in messages] == ["system", "user", "assistant"]
    assert messages[2]["content"] == state["answer"]
    template = backend.get_chat_template()
    prefix, suffix = template.get_prefix_and_suffix("assistant")
    assert state.text().endswith(prefix + state["answer"] + suffix)


def test_run_batch_32(backend):
    @sgl.function
    def add(s, a, b):
        s += f"Q: What is {a} plus {b}?\nA:" + sgl.gen("answer", max_tokens=4, stop="\n")

    args = [{"a": i, "b": i + 1} for i in range(32)]
    states = add.run_batch(args, backend=backend, temperature=0, progress_bar=True)
    assert len(states) == 32
    for arg, state in zip(args, states):
        assert state.text().startswith(f"Q: What is {arg['a']} plus {arg['b']}?")
        assert isinstance(state["answer"], str)


def test_server_errors_surface(backend):
    @sgl.function
    def bad(s):
        s += "Hello" + sgl.gen("x", max_tokens=4, top_p=5.0)  # the server rejects top_p > 1

    state = bad.run(backend=backend)
    with pytest.raises(RuntimeError, match="400"):
        state["x"]


def test_server_info_and_flush(backend):
    sgl.flush_cache(backend)
    assert isinstance(sgl.get_server_info(backend), dict)
    assert backend.model_info["model_path"]


@pytest.mark.slow
def test_engine_backend_program():
    """The same program over the in-process Engine (starts its own scheduler on the default model)."""
    pytest.importorskip("sglang.srt.entrypoints.engine")
    backend = sgl.EngineBackend()
    try:
        state = few_shot_capital.run("Italy", backend=backend, temperature=0)
        assert "rome" in state["answer"].lower()

        @sgl.function
        def pick(s):
            s += "The capital of France is" + sgl.select("city", [" Paris", " London"])

        assert pick.run(backend=backend)["city"] == " Paris"
    finally:
        backend.shutdown()
