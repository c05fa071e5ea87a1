"""OpenAI-compatible routes, driven by the real `openai` client against a real server.

Every generated text is checked against native /generate for the same greedy request, so these
tests pin the translation layer, not the model. Generation lengths stay small (CPU).
"""

from __future__ import annotations

import json
import threading
import time

import jsonschema
import openai
import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from server_utils import GUARD_KEY, generate

from sglang.srt.entrypoints.errors import to_api_error
from sglang.srt.entrypoints.openai.choices import Choices
from sglang.srt.entrypoints.openai.protocol import CompletionRequest
from sglang.srt.managers.tokenizer.request_state import GenerateError

MODEL = "SmolLM2-135M-Instruct"
PROMPT = "The capital of France is"
MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]
N = 10


@pytest.fixture
def client(server_url):
    return openai.OpenAI(base_url=server_url + "/v1", api_key="x", max_retries=0, timeout=120)


def native(url, text=None, input_ids=None, **kw):
    r = generate(url, text=text, input_ids=input_ids, **kw)
    assert r.status_code == 200, r.text
    return r.json()


def greedy(max_new_tokens=N, **sp):
    return {"max_new_tokens": max_new_tokens, "temperature": 0, **sp}


def chat_prompt(tok, messages=MESSAGES):
    return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def collect_stream(stream):
    """(text per choice index, finish reasons per index, chunks)."""
    texts, finishes, chunks = {}, {}, []
    for ch in stream:
        chunks.append(ch)
        for c in ch.choices:
            piece = c.text if hasattr(c, "text") else (c.delta.content or "")
            texts[c.index] = texts.get(c.index, "") + piece
            if c.finish_reason is not None:
                finishes.setdefault(c.index, []).append(c.finish_reason)
    return texts, finishes, chunks


# ---------------------------------------------------------------------------- no server
def test_error_mapping_status_codes():
    assert to_api_error(GenerateError(503, "The request queue is full.")).body() == {
        "object": "error",
        "message": "The request queue is full.",
        "type": "ServiceUnavailableError",
        "param": None,
        "code": 503,
        "error": {
            "message": "The request queue is full.",
            "type": "ServiceUnavailableError",
            "param": None,
            "code": 503,
        },
    }
    assert to_api_error(ValueError("bad")).status_code == 400
    with pytest.raises(Exception) as e:
        CompletionRequest.model_validate({"prompt": "x", "top_p": 1.5})
    err = to_api_error(e.value)
    assert (err.status_code, err.param) == (400, "top_p")


def test_choices_map_subrequests_and_compute_deltas():
    ch = Choices(["a", "b"], n=2)
    assert [ch.get(r).index for r in ("a-0", "a-1", "b-0", "b-1")] == [0, 1, 2, 3]
    lp = [[-0.1, 5, "x"], [-0.2, 6, "y"]]
    meta = {"id": "b-1", "finish_reason": None, "output_token_logprobs": lp}
    d1 = ch.delta({"text": "He", "output_ids": [5], "meta_info": meta}, incremental=False)
    d2 = ch.delta({"text": "Hello", "output_ids": [5, 6], "meta_info": meta}, incremental=False)
    assert (d1.text, d1.first, d1.logprobs) == ("He", True, lp[:1])
    assert (d2.text, d2.first, d2.logprobs) == ("llo", False, lp[1:])
    # --incremental-streaming-output: text, ids and logprob lists are each chunk's own.
    inc = Choices(["c"], n=1)
    d3 = inc.delta(
        {
            "text": "He",
            "output_ids": [5],
            "meta_info": dict(meta, id="c", output_token_logprobs=lp[:1]),
        },
        True,
    )
    d4 = inc.delta(
        {
            "text": "llo",
            "output_ids": [6],
            "meta_info": dict(meta, id="c", output_token_logprobs=lp[1:]),
        },
        True,
    )
    assert (d3.text, d3.logprobs, d4.text, d4.logprobs) == ("He", lp[:1], "llo", lp[1:])
    for rid in ch.rids():
        ch.record_finish(
            ch.get(rid), {"prompt_tokens": 4, "completion_tokens": 2, "cached_tokens": 1}
        )
    # Prompt tokens once per prompt, completion tokens once per choice.
    assert ch.usage(cache_report=True) == {
        "prompt_tokens": 8,
        "completion_tokens": 8,
        "total_tokens": 16,
        "prompt_tokens_details": {"cached_tokens": 2},
    }


# ---------------------------------------------------------------------------- models
def test_models_list_retrieve_and_unknown(client, server_url):
    ids = [m.id for m in client.models.list().data]
    assert ids == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL
    path = requests.get(server_url + "/model_info").json()["model_path"]
    assert (
        requests.get(f"{server_url}/v1/models/{path}").status_code == 200
    )  # the model path is an alias
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")
    r = requests.get(server_url + "/v1/models/no/such/model")
    assert r.status_code == 404
    assert r.json()["object"] == "error" and r.json()["code"] == 404
    assert r.json()["error"]["code"] == "model_not_found"
    for create in (
        lambda m: client.completions.create(model=m, prompt=PROMPT, max_tokens=1),
        lambda m: client.chat.completions.create(model=m, messages=MESSAGES, max_tokens=1),
    ):
        with pytest.raises(
            openai.NotFoundError, match="does not exist"
        ) as info:  # OpenAI's model_not_found
            create("gpt-4")
        assert info.value.code == "model_not_found" and info.value.param == "model"
        # The model path and `default` are accepted as model names; `default` echoes the served name.
        assert create(path).model == path
        assert create("default").model == MODEL


# ---------------------------------------------------------------------------- completions
def test_completion_matches_native_and_usage(client, server_url, tok):
    ref = native(server_url, PROMPT, sampling_params=greedy())
    r = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=N, temperature=0)
    assert r.object == "text_completion" and len(r.choices) == 1
    c = r.choices[0]
    assert c.index == 0 and c.text == ref["text"] and c.finish_reason == "length"
    assert r.usage.prompt_tokens == len(tok.encode(PROMPT))
    assert r.usage.completion_tokens == len(ref["output_ids"]) == N
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    # --enable-cache-report: the prompt was just cached by the native request.
    assert r.usage.prompt_tokens_details.cached_tokens > 0


def test_completion_stream_equals_non_stream(client):
    full = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=N, temperature=0)
    stream = client.completions.create(
        model=MODEL,
        prompt=PROMPT,
        max_tokens=N,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    texts, finishes, chunks = collect_stream(stream)
    assert texts == {0: full.choices[0].text}
    assert finishes == {0: ["length"]}
    assert all(ch.object == "text_completion" for ch in chunks)
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (
        full.usage.prompt_tokens,
        full.usage.completion_tokens,
    )
    assert all(ch.usage is None for ch in chunks[:-1])


def test_completion_prompt_forms(client, server_url, tok):
    other = "List three colors:"
    refs = [native(server_url, p, sampling_params=greedy(6))["text"] for p in (PROMPT, other)]
    ids = tok.encode(PROMPT)
    r = client.completions.create(model=MODEL, prompt=ids, max_tokens=6, temperature=0)
    assert [c.text for c in r.choices] == refs[:1]
    assert r.usage.prompt_tokens == len(ids)
    for prompt in ([PROMPT, other], [ids, tok.encode(other)]):
        r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=6, temperature=0)
        assert [c.index for c in r.choices] == [0, 1]
        assert [c.text for c in r.choices] == refs
        assert r.usage.prompt_tokens == len(ids) + len(tok.encode(other))
        assert r.usage.completion_tokens == 12
    stream = client.completions.create(
        model=MODEL, prompt=[PROMPT, other], max_tokens=6, temperature=0, stream=True
    )
    texts, finishes, _ = collect_stream(stream)
    assert texts == {0: refs[0], 1: refs[1]} and finishes == {0: ["length"], 1: ["length"]}


def test_completion_n2_and_seed(client):
    kw = dict(model=MODEL, prompt="Once upon a time", max_tokens=6, temperature=1.0, seed=1234)
    r = client.completions.create(n=2, **kw)
    assert [c.index for c in r.choices] == [0, 1]
    assert r.usage.completion_tokens == 12
    assert all(c.finish_reason == "length" for c in r.choices)
    # The same seed gives the same sample.
    again = client.completions.create(n=1, **kw)
    assert again.choices[0].text == r.choices[0].text
    texts, finishes, _ = collect_stream(client.completions.create(n=2, stream=True, **kw))
    assert sorted(texts) == [0, 1] and finishes == {0: ["length"], 1: ["length"]}


def test_completion_logprobs_match_native(client, server_url):
    ref = native(
        server_url,
        PROMPT,
        sampling_params=greedy(4),
        return_logprob=True,
        top_logprobs_num=2,
        return_text_in_logprobs=True,
    )["meta_info"]
    r = client.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=4, temperature=0, logprobs=2
    )
    lp = r.choices[0].logprobs
    assert lp.tokens == [e[2] for e in ref["output_token_logprobs"]]
    assert lp.token_logprobs == pytest.approx(
        [e[0] for e in ref["output_token_logprobs"]], abs=1e-3
    )
    assert len(lp.top_logprobs) == 4 and all(len(d) == 2 for d in lp.top_logprobs)
    for d, top in zip(lp.top_logprobs, ref["output_top_logprobs"]):
        assert d == pytest.approx({e[2]: e[0] for e in top}, abs=1e-3)
    assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset)
    # Streamed logprobs add up to the same columns.
    stream = client.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=4, temperature=0, logprobs=2, stream=True
    )
    toks, vals, offs = [], [], []
    for ch in stream:
        for c in ch.choices:
            if c.logprobs is not None:
                toks += c.logprobs.tokens
                vals += c.logprobs.token_logprobs
                offs += c.logprobs.text_offset
    assert (
        toks == lp.tokens
        and vals == pytest.approx(lp.token_logprobs, abs=1e-3)
        and offs == lp.text_offset
    )


def test_completion_echo(client, server_url, tok):
    ref = native(
        server_url,
        PROMPT,
        sampling_params=greedy(3),
        return_logprob=True,
        logprob_start_len=0,
        return_text_in_logprobs=True,
    )
    r = client.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=3, temperature=0, echo=True, logprobs=1
    )
    c = r.choices[0]
    assert c.text == PROMPT + ref["text"]
    n_prompt = len(tok.encode(PROMPT))
    assert len(c.logprobs.tokens) == n_prompt + 3
    assert c.logprobs.token_logprobs[0] is None and c.logprobs.top_logprobs[0] is None
    meta = ref["meta_info"]
    want = [e[0] for e in meta["input_token_logprobs"] + meta["output_token_logprobs"]]
    assert c.logprobs.token_logprobs[1:] == pytest.approx(want[1:], abs=1e-3)
    assert "".join(c.logprobs.tokens) == c.text
    # echo without logprobs, streamed: the prompt comes first, then the same completion.
    texts, finishes, _ = collect_stream(
        client.completions.create(
            model=MODEL, prompt=PROMPT, max_tokens=3, temperature=0, echo=True, stream=True
        )
    )
    assert texts == {0: c.text} and finishes == {0: ["length"]}


def test_stop_strings_and_extra_sampling_fields(client, server_url):
    ref = native(server_url, PROMPT, sampling_params=greedy(stop=["."]))
    r = client.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=N, temperature=0, stop=["."]
    )
    c = r.choices[0]
    assert c.text == ref["text"] and "." not in c.text and c.finish_reason == "stop"
    texts, finishes, _ = collect_stream(
        client.completions.create(
            model=MODEL, prompt=PROMPT, max_tokens=N, temperature=0, stop=".", stream=True
        )
    )
    assert texts == {0: ref["text"]} and finishes == {0: ["stop"]}
    # ignore_eos + min_tokens + runtime-only knobs ride in extra_body.
    r = client.completions.create(
        model=MODEL,
        prompt=PROMPT,
        max_tokens=6,
        temperature=0.7,
        seed=3,
        frequency_penalty=0.5,
        presence_penalty=0.5,
        extra_body={
            "top_k": 5,
            "min_p": 0.05,
            "repetition_penalty": 1.1,
            "ignore_eos": True,
            "min_tokens": 6,
            "no_stop_trim": False,
            "skip_special_tokens": True,
            "stop_token_ids": [2],
        },
    )
    assert r.usage.completion_tokens == 6
    r = client.completions.create(
        model=MODEL,
        prompt="Is the sky blue? Answer:",
        max_tokens=4,
        temperature=0,
        extra_body={"regex": " (yes|no)"},
    )
    assert r.choices[0].text in (" yes", " no") and r.choices[0].finish_reason == "stop"


def test_logit_bias(client, tok):
    target = tok.encode(" banana")[0]
    r = client.completions.create(
        model=MODEL,
        prompt=PROMPT,
        max_tokens=3,
        temperature=0,
        logit_bias={str(target): 100},
        logprobs=0,
    )
    assert r.choices[0].text == tok.decode([target] * 3)


# ---------------------------------------------------------------------------- chat
def test_chat_matches_native_and_usage(client, server_url, tok):
    prompt = chat_prompt(tok)
    ref = native(server_url, prompt, sampling_params=greedy())
    r = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=N, temperature=0)
    assert r.object == "chat.completion"
    c = r.choices[0]
    assert c.message.role == "assistant" and c.message.content == ref["text"]
    assert c.finish_reason == ref["meta_info"]["finish_reason"]["type"]
    assert r.usage.prompt_tokens == len(tok.encode(prompt, add_special_tokens=False))
    assert r.usage.completion_tokens == ref["meta_info"]["completion_tokens"]
    # max_completion_tokens wins over max_tokens.
    r = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=N, max_completion_tokens=3, temperature=0
    )
    assert r.usage.completion_tokens == 3 and ref["text"].startswith(r.choices[0].message.content)


def test_chat_stream_equals_non_stream(client):
    full = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=N, temperature=0
    )
    stream = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        max_tokens=N,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    texts, finishes, chunks = collect_stream(stream)
    assert all(ch.object == "chat.completion.chunk" for ch in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.delta.role is None for ch in chunks[1:] for c in ch.choices)
    assert texts == {0: full.choices[0].message.content}
    assert finishes == {0: [full.choices[0].finish_reason]}
    assert (
        chunks[-1].choices == []
        and chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    )


def test_chat_n2_stream_interleaves_choices(client):
    stream = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=5, temperature=0.8, seed=7, n=2, stream=True
    )
    texts, finishes, chunks = collect_stream(stream)
    assert sorted(texts) == [0, 1] and finishes == {0: ["length"], 1: ["length"]}
    roles = [c.index for ch in chunks for c in ch.choices if c.delta.role == "assistant"]
    assert sorted(roles) == [0, 1]
    r = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=5, temperature=0.8, seed=7, n=2
    )
    assert [c.index for c in r.choices] == [0, 1]
    assert {i: c.message.content for i, c in enumerate(r.choices)} == texts


def test_chat_logprobs_match_native(client, server_url, tok):
    ref = native(
        server_url,
        chat_prompt(tok),
        sampling_params=greedy(4),
        return_logprob=True,
        top_logprobs_num=2,
        return_text_in_logprobs=True,
    )["meta_info"]
    r = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=4, temperature=0, logprobs=True, top_logprobs=2
    )
    content = r.choices[0].logprobs.content
    assert [t.token for t in content] == [e[2] for e in ref["output_token_logprobs"]]
    assert [t.logprob for t in content] == pytest.approx(
        [e[0] for e in ref["output_token_logprobs"]], abs=1e-3
    )
    assert all(len(t.top_logprobs) == 2 and t.bytes == list(t.token.encode()) for t in content)
    assert content[0].top_logprobs[0].logprob == pytest.approx(
        ref["output_top_logprobs"][0][0][0], abs=1e-3
    )
    stream = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        max_tokens=4,
        temperature=0,
        logprobs=True,
        top_logprobs=2,
        stream=True,
    )
    streamed = [
        t.token for ch in stream for c in ch.choices if c.logprobs for t in c.logprobs.content
    ]
    assert streamed == [t.token for t in content]


def test_response_format_json_schema(client):
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    r = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Is Paris in France? Answer in JSON."}],
        max_tokens=16,
        temperature=0,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": schema},
        },
    )
    assert r.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(r.choices[0].message.content), schema)
    r = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        max_tokens=4,
        temperature=0,
        response_format={"type": "json_object"},
    )
    assert r.choices[0].message.content.startswith("{")


# ---------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "route,body,fragment",
    [
        ("completions", {"prompt": ""}, "empty"),
        ("completions", {"prompt": []}, "empty"),
        ("completions", {"prompt": PROMPT, "max_tokens": 100000}, "context length"),
        ("completions", {"prompt": PROMPT, "temperature": "hot"}, "temperature"),
        ("completions", {"prompt": PROMPT, "n": "2"}, "n"),
        ("completions", {"prompt": [1, "a"]}, "prompt"),
        ("completions", {"prompt": PROMPT, "top_k": 0}, "top_k"),
        ("completions", {"prompt": PROMPT, "logit_bias": {"x": 1}}, "logit_bias"),
        (
            "completions",
            {
                "prompt": PROMPT,
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"schema": {"type": "nonsense"}},
                },
            },
            "json",
        ),
        ("chat/completions", {"messages": []}, "messages"),
        (
            "chat/completions",
            {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            "text",
        ),
        ("chat/completions", {"messages": MESSAGES, "top_logprobs": 2}, "logprobs"),
        (
            "chat/completions",
            {"messages": MESSAGES, "max_tokens": 100000, "stream": True},
            "context length",
        ),
        ("chat/completions", {"messages": [{"role": "wizard", "content": "hi"}]}, "role"),
        (
            "chat/completions",
            {"messages": MESSAGES, "tool_choice": "required"},
            "requires `tools`",
        ),
        (
            "chat/completions",
            {
                "messages": MESSAGES,
                "tools": [{"type": "function", "function": {"name": "f"}}],
                "tool_choice": {"type": "function", "function": {"name": "g"}},
            },
            "not among the tools",
        ),
        (
            "chat/completions",
            {"messages": MESSAGES, "functions": [{"name": "f"}]},
            "send `tools`",
        ),
    ],
)
def test_bad_requests_are_400_in_openai_format(server_url, route, body, fragment):
    r = requests.post(f"{server_url}/v1/{route}", json=dict(body, model=MODEL), timeout=60)
    assert r.status_code == 400, r.text
    err = r.json()
    assert err["object"] == "error" and err["code"] == 400 and "type" in err and "param" in err
    assert fragment in err["message"], err


def test_malformed_json_and_stream_errors_before_200(client, server_url):
    r = requests.post(
        server_url + "/v1/completions",
        data=b'{"prompt": "x", "temperature": NaN}',
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 400 and r.json()["object"] == "error"
    # The client raises on create(): the error arrives as a status code, not inside the stream.
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL, prompt="", max_tokens=4, stream=True)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            max_tokens=4,
            stream=True,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"type": "bad"}},
            },
        )


def test_abort_is_an_error_not_a_finish_reason(client, server_url):
    def abort_soon():
        time.sleep(1.0)
        requests.post(server_url + "/abort_request", json={"abort_all": True})

    for stream in (False, True):
        threading.Thread(target=abort_soon).start()
        with pytest.raises(openai.APIError):
            out = client.completions.create(
                model=MODEL,
                prompt="Count to a thousand:",
                max_tokens=2000,
                stream=stream,
                extra_body={"ignore_eos": True},
            )
            if stream:
                list(out)


def _stream_then_disconnect(url, route, body, lines=4):
    with requests.post(
        f"{url}/v1/{route}", json=dict(body, model=MODEL, stream=True), stream=True, timeout=60
    ) as r:
        assert r.status_code == 200
        got = 0
        for line in r.iter_lines():
            if line.startswith(b"data: "):
                got += 1
                if got >= lines:
                    break
    # Leaving the with-block closes the socket mid-stream.


@pytest.mark.parametrize(
    "route,body",
    [
        ("completions", {"prompt": "Count to a thousand:"}),
        ("chat/completions", {"messages": MESSAGES, "n": 2}),
    ],
)
def test_client_disconnect_mid_stream_aborts(server_url, default_server, route, body):
    steps_before = default_server.server_info()["num_decode_steps"]
    _stream_then_disconnect(server_url, route, dict(body, max_tokens=3000, ignore_eos=True))
    default_server.wait_idle(timeout=600)
    # Finishing would take 3000 decode steps; an aborted request stops after the few it streamed
    # plus the scheduler's wait for the disconnect to be noticed.
    assert default_server.server_info()["num_decode_steps"] - steps_before < 1000


# ---------------------------------------------------------------------------- auth
def test_api_key_required_on_v1_routes(guarded_server):

    srv = guarded_server
    good = openai.OpenAI(base_url=srv.url + "/v1", api_key=GUARD_KEY, max_retries=0)
    bad = openai.OpenAI(base_url=srv.url + "/v1", api_key="wrong", max_retries=0)
    assert [m.id for m in good.models.list().data] == [MODEL]
    assert (
        good.completions.create(model=MODEL, prompt=PROMPT, max_tokens=2).usage.completion_tokens
        == 2
    )
    for call in (
        lambda c: c.models.list(),
        lambda c: c.completions.create(model=MODEL, prompt=PROMPT, max_tokens=2),
        lambda c: c.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2),
    ):
        with pytest.raises(openai.AuthenticationError):
            call(bad)
    assert requests.post(srv.url + "/v1/completions", json={"prompt": PROMPT}).status_code == 401
    srv.check_idle_invariant()  # read with the key


# ---------------------------------------------------------------------------- fuzzing
_ODD = st.none() | st.sampled_from(
    [
        0,
        1,
        -1,
        2,
        50,
        10**6,
        0.5,
        -0.5,
        1e30,
        "x",
        "",
        True,
        False,
        [],
        [1],
        ["a"],
        {},
        {"1": 2},
        [[1]],
        49152,
        {"type": "text"},
        {"type": "json_object"},
        MESSAGES,
    ]
)
_COMPLETION_KEYS = [
    "prompt",
    "max_tokens",
    "temperature",
    "top_p",
    "n",
    "stop",
    "logprobs",
    "echo",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "logit_bias",
    "stream",
    "suffix",
    "top_k",
    "min_p",
    "regex",
    "response_format",
    "stream_options",
    "ignore_eos",
]
_CHAT_KEYS = [
    "messages",
    "max_tokens",
    "temperature",
    "top_p",
    "n",
    "stop",
    "logprobs",
    "top_logprobs",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "logit_bias",
    "stream",
    "response_format",
    "tools",
    "tool_choice",
    "stream_options",
    "top_k",
    "regex",
    "json_schema",
]


@settings(max_examples=80, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(chat=st.booleans(), fields=st.data())
def test_fuzzed_openai_bodies_get_200_or_a_400_in_openai_format(server_url, chat, fields):
    keys = _CHAT_KEYS if chat else _COMPLETION_KEYS
    body = {"model": MODEL, **({"messages": MESSAGES} if chat else {"prompt": PROMPT})}
    body.update(fields.draw(st.dictionaries(st.sampled_from(keys), _ODD, max_size=3)))
    mt = body.get("max_tokens")
    if mt is None or (isinstance(mt, int) and not isinstance(mt, bool) and mt > 2):
        body["max_tokens"] = 2  # long valid generations are not what this test is about
    if isinstance(body.get("n"), int) and not isinstance(body["n"], bool) and body["n"] > 2:
        body["n"] = 2
    r = requests.post(
        f"{server_url}/v1/{'chat/completions' if chat else 'completions'}",
        data=json.dumps(body),
        timeout=120,
    )
    assert r.status_code in (200, 400), (r.status_code, r.text[:300], body)
    if r.status_code == 400:
        err = r.json()
        assert err["object"] == "error" and err["code"] == 400 and err["message"], body


def test_every_field_with_each_extreme_value_gets_200_or_400(server_url):
    """One field at a time, each extreme value: the combinations above may miss a single bad pair."""
    for chat in (False, True):
        route = f"{server_url}/v1/{'chat/completions' if chat else 'completions'}"
        for key in _CHAT_KEYS if chat else _COMPLETION_KEYS:
            for value in (None, -1, 0, 10**6, 1e30, "x", [], {}):
                body = {
                    "model": MODEL,
                    **({"messages": MESSAGES} if chat else {"prompt": PROMPT}),
                    "max_tokens": 2,
                    key: value,
                }
                if key == "max_tokens" and value is None:
                    continue  # valid: runs to the end of the context
                r = requests.post(route, data=json.dumps(body), timeout=120)
                assert r.status_code in (200, 400), (r.status_code, r.text[:300], body)
