"""SGLang's own clients against this server: the bodies they send, the finish reasons and stream
chunks they read, and the one error shape every route answers with."""

from __future__ import annotations

import json
import socket

import pytest
import requests
from server_utils import assert_error_shape, generate, stream_chunks

# Captured from SGLang 0.5.23: bench_serving --backend sglang (its sglang_generate payload) ...
BENCH_SERVING_BODY = {
    "text": "The capital of France is",
    "sampling_params": {"temperature": 0.0, "max_new_tokens": 4, "ignore_eos": True},
    "stream": True,
    "lora_path": None,
    "return_logprob": False,
    "return_routed_experts": False,
    "logprob_start_len": -1,
}
# ... and what sglang-router adds when it forwards /generate.
ROUTER_FIELDS = {
    "model": None,
    "return_hidden_states": False,
    "background": False,
    "no_logs": False,
    "return_bytes": False,
    "return_entropy": False,
}


def test_bench_serving_and_router_bodies_get_200(server_url):
    for body in (BENCH_SERVING_BODY, {**BENCH_SERVING_BODY, **ROUTER_FIELDS}):
        chunks = stream_chunks(server_url, body)
        assert chunks[-1]["meta_info"]["completion_tokens"] == 4
        r = requests.post(server_url + "/generate", json=dict(body, stream=False), timeout=120)
        assert r.status_code == 200, r.text
        assert (
            r.json()["text"] == chunks[-1]["text"]
        )  # cumulative stream: the last chunk holds everything
    # The router forwards a batch as one body with a text list.
    batch = {
        **ROUTER_FIELDS,
        "text": ["Hello", "The sky is"],
        "sampling_params": {"max_new_tokens": 3},
    }
    r = requests.post(server_url + "/generate", json=batch, timeout=120)
    assert r.status_code == 200, r.text
    assert [o["meta_info"]["completion_tokens"] for o in r.json()] == [3, 3]


@pytest.mark.parametrize(
    "field,value,feature",
    [
        ("lora_path", "my-adapter", "LoRA adapters"),
        ("image_data", ["https://example.com/cat.png"], "multimodal input"),
        ("return_hidden_states", True, "hidden-state output"),
        ("session_params", {"id": "s1"}, "sessions"),
        ("routed_dp_rank", 1, "data-parallel rank"),
        ("return_routed_experts", True, "routed-expert output"),
    ],
)
def test_a_feature_not_built_is_refused_by_name(server_url, field, value, feature):
    r = requests.post(server_url + "/generate", json={"text": "hi", field: value}, timeout=60)
    assert (
        r.status_code == 400 and feature in r.json()["message"] and field in r.json()["message"]
    ), r.text


def test_unknown_top_level_fields_are_ignored_but_not_inside_sampling_params(server_url):
    r = generate(
        server_url, text="hi", sampling_params={"max_new_tokens": 1}, some_router_extension={"x": 1}
    )
    assert r.status_code == 200, r.text
    r = generate(server_url, text="hi", sampling_params={"max_new_tokens": 1, "temprature": 0})
    assert r.status_code == 400 and "temprature" in r.json()["message"]


# ---------------------------------------------------------------------------- finish reasons
def _greedy(server_url, **kw):
    r = generate(server_url, **kw)
    assert r.status_code == 200, r.text
    return r.json()


def test_a_stop_on_the_last_allowed_token_is_a_stop_not_length(server_url, tok):
    prompt = "1, 2, 3, 4, 5,"
    ref = _greedy(server_url, text=prompt, sampling_params={"max_new_tokens": 5, "temperature": 0})
    last = ref["output_ids"][-1]
    last_text = tok.decode([last])
    assert last_text.strip() and ref["text"].endswith(last_text)
    # A stop string that completes on the 5th (last allowed) token: stop, and trimmed from the text.
    for body in (
        {
            "prompt": prompt,
            "max_tokens": 5,
            "stop": [last_text],
            "temperature": 0,
            "model": "default",
        },
    ):
        c = requests.post(server_url + "/v1/completions", json=body, timeout=60).json()["choices"][
            0
        ]
        assert (c["finish_reason"], c["text"]) == ("stop", ref["text"][: -len(last_text)]), c
    sp = {"max_new_tokens": 5, "temperature": 0, "stop": last_text}
    out = _greedy(server_url, text=prompt, sampling_params=sp)
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": last_text}
    # A stop token id on the last allowed token.
    sp = {"max_new_tokens": 5, "temperature": 0, "stop_token_ids": [last]}
    out = _greedy(server_url, text=prompt, sampling_params=sp)
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": last}


def test_eos_on_the_last_allowed_token_is_a_stop(server_url, tok):
    chat = tok.apply_chat_template(
        [{"role": "user", "content": "What is 2+2? Answer with one number."}],
        tokenize=False,
        add_generation_prompt=True,
    )
    ref = _greedy(server_url, text=chat, sampling_params={"max_new_tokens": 64, "temperature": 0})
    fr = ref["meta_info"]["finish_reason"]
    assert fr["type"] == "stop" and fr["matched"] == tok.eos_token_id, (
        fr
    )  # the model ends by itself
    n = ref["meta_info"]["completion_tokens"]
    out = _greedy(server_url, text=chat, sampling_params={"max_new_tokens": n, "temperature": 0})
    assert out["meta_info"]["finish_reason"] == fr and out["text"] == ref["text"]
    out = _greedy(
        server_url, text=chat, sampling_params={"max_new_tokens": n - 1, "temperature": 0}
    )
    assert out["meta_info"]["finish_reason"] == {"type": "length", "length": n - 1}


# ---------------------------------------------------------------------------- grammars
@pytest.mark.parametrize(
    "key,grammar", [("regex", "[^\\x00-\\U0010FFFF]"), ("ebnf", "root ::= root")]
)
def test_a_grammar_that_matches_nothing_is_a_400_before_any_forward(
    server_url, default_server, key, grammar
):
    steps = default_server.server_info()["num_decode_steps"]
    for stream in (False, True):
        r = generate(
            server_url,
            text="hi",
            stream=stream,
            sampling_params={key: grammar, "max_new_tokens": 4},
        )
        assert r.status_code == 400 and "matches no text" in r.json()["message"], r.text
    body = {
        "model": "default",
        "messages": [{"role": "user", "content": "hi"}],
        key: grammar,
        "max_tokens": 4,
    }
    r = requests.post(server_url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 400 and "matches no text" in r.json()["error"]["message"], r.text
    assert (
        default_server.server_info()["num_decode_steps"] == steps
    )  # refused before any forward pass


# ---------------------------------------------------------------------------- one error shape
def _raw_post(url: str, path: str, headers: str, body: bytes) -> requests.Response:
    """Send a request whose Content-Length may lie; parse the answer with requests' own machinery."""
    host, port = url.split("//")[1].split(":")
    with socket.create_connection((host, int(port)), timeout=60) as s:
        s.sendall(
            f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{headers}\r\n".encode()
            + body
        )
        data = b""
        while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < _content_length(data):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    head, payload = data.split(b"\r\n\r\n", 1)
    r = requests.Response()
    r.status_code = int(head.split()[1])
    r._content = payload
    return r


def _content_length(data: bytes) -> int:
    for line in data.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":")[1])
    return 0


def test_every_route_answers_errors_in_one_shape(server_url):
    post = lambda path, body: requests.post(server_url + path, json=body, timeout=60)
    assert_error_shape(post("/generate", {"text": ""}), 400, "BadRequestError")
    assert_error_shape(
        post("/generate", {"text": "hi", "stream": True, "sampling_params": {"top_p": 0}}),
        400,
        "BadRequestError",
    )
    assert_error_shape(
        post("/v1/completions", {"prompt": "hi", "top_p": 7}), 400, "BadRequestError"
    )
    assert_error_shape(post("/v1/chat/completions", {"messages": []}), 400, "BadRequestError")
    body = assert_error_shape(
        post(
            "/v1/chat/completions",
            {"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]},
        ),
        404,
        "NotFoundError",
    )
    assert body["error"]["code"] == "model_not_found" and body["param"] == "model"
    assert_error_shape(post("/tokenize", {"prompt": 5}), 400, "BadRequestError")
    assert_error_shape(post("/detokenize", {"tokens": ["a"]}), 400, "BadRequestError")
    assert_error_shape(post("/abort_request", {"rid": ""}), 400, "BadRequestError")
    assert_error_shape(
        requests.get(server_url + "/no/such/route", timeout=10), 404, "NotFoundError"
    )
    assert_error_shape(
        requests.get(server_url + "/generate", timeout=10), 405, "MethodNotAllowedError"
    )
    r = _raw_post(server_url, "/generate", f"Content-Length: {1 << 40}\r\n", b'{"text": "hi"}')
    assert_error_shape(r, 413, "RequestTooLargeError")


# ---------------------------------------------------------------------------- incremental streams
def test_incremental_stream_sends_logprob_deltas_like_its_text(incremental_server):
    url = incremental_server.url
    body = {
        "text": "The capital of France is",
        "sampling_params": {"max_new_tokens": 8, "temperature": 0},
        "return_logprob": True,
        "top_logprobs_num": 2,
        "logprob_start_len": 2,
    }
    full = requests.post(url + "/generate", json=body, timeout=120).json()
    chunks = stream_chunks(url, body)
    assert "".join(c["text"] for c in chunks) == full["text"]
    assert [t for c in chunks for t in c["output_ids"]] == full["output_ids"]
    for key in ("output_token_logprobs", "output_top_logprobs"):
        assert all(len(c["meta_info"][key]) == len(c["output_ids"]) for c in chunks), key
    # Two requests, two forward passes (the second reuses cached prefix KV): values agree to rounding.
    joined = [e for c in chunks for e in c["meta_info"]["output_token_logprobs"]]
    assert [e[1] for e in joined] == full["output_ids"]
    assert [e[0] for e in joined] == pytest.approx(
        [e[0] for e in full["meta_info"]["output_token_logprobs"]], abs=1e-3
    )
    tops = [
        sorted(x[0] for x in pos) for c in chunks for pos in c["meta_info"]["output_top_logprobs"]
    ]
    ref = [sorted(x[0] for x in pos) for pos in full["meta_info"]["output_top_logprobs"]]
    assert len(tops) == len(ref) and all(a == pytest.approx(b, abs=1e-3) for a, b in zip(tops, ref))
    first, ref_in = (
        chunks[0]["meta_info"]["input_token_logprobs"],
        full["meta_info"]["input_token_logprobs"],
    )
    assert [e[1] for e in first] == [e[1] for e in ref_in] and len(first) == len(ref_in) > 0
    assert [e[0] or 0 for e in first] == pytest.approx([e[0] or 0 for e in ref_in], abs=1e-3)
    assert all(c["meta_info"]["input_token_logprobs"] == [] for c in chunks[1:])
    incremental_server.check_idle_invariant()
    # The OpenAI stream over incremental chunks: one logprob entry per generated token, the same tokens.
    chat = {
        "model": "default",
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 6,
        "temperature": 0,
    }
    ref = requests.post(
        url + "/v1/chat/completions", json=dict(chat, logprobs=True), timeout=120
    ).json()
    entries = []
    with requests.post(
        url + "/v1/chat/completions",
        json=dict(chat, logprobs=True, top_logprobs=2, stream=True),
        stream=True,
        timeout=120,
    ) as r:
        for line in r.iter_lines():
            if line.startswith(b"data: {"):
                for c in json.loads(line[6:])["choices"]:
                    entries += (c.get("logprobs") or {}).get("content") or []
    assert [e["token"] for e in entries] == [
        e["token"] for e in ref["choices"][0]["logprobs"]["content"]
    ]
    assert len(entries) == ref["usage"]["completion_tokens"] and all(
        len(e["top_logprobs"]) == 2 for e in entries
    )
