"""What agents need, over the real server and the real `openai` client: tool calls (enforced,
parsed, streamed, and fed back), reasoning split from the answer, and the prompt-break report."""

from __future__ import annotations

import json
import re

import jsonschema
import openai
import pytest
import requests

from sglang.srt.entrypoints.openai.chat_template import render_chat_prompt
from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest

WEATHER_PARAMS = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 40},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": WEATHER_PARAMS,
        },
    },
    {
        "type": "function",
        "function": {"name": "get_time", "description": "The time now", "parameters": {}},
    },
]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture
def client(server_url):
    return openai.OpenAI(base_url=server_url + "/v1", api_key="unused")


def _stream_calls(stream):
    """(content, {index: [name, arguments]}, finish_reason) of a streamed chat completion."""
    content, calls, finish = "", {}, None
    for chunk in stream:
        if not chunk.choices:
            continue
        ch = chunk.choices[0]
        content += ch.delta.content or ""
        for tc in ch.delta.tool_calls or []:
            if tc.function.name:
                assert tc.index not in calls and tc.id.startswith("call_")
                calls[tc.index] = [tc.function.name, tc.function.arguments or ""]
            else:
                calls[tc.index][1] += tc.function.arguments or ""
        finish = ch.finish_reason or finish
    return content, calls, finish


# ---------------------------------------------------------------------------- enforced calls
@pytest.mark.parametrize(
    "choice", ["required", {"type": "function", "function": {"name": "get_weather"}}]
)
def test_enforced_tool_choice_gives_a_call_that_validates(client, choice):
    r = client.chat.completions.create(
        model="default", messages=ASK, tools=TOOLS, tool_choice=choice, max_tokens=60, temperature=0
    )
    c = r.choices[0]
    assert c.finish_reason == "tool_calls" and c.message.content is None
    assert len(c.message.tool_calls) >= 1
    for call in c.message.tool_calls:
        assert call.id.startswith("call_") and call.type == "function"
        schema = next(
            t["function"]["parameters"]
            for t in TOOLS
            if t["function"]["name"] == call.function.name
        )
        jsonschema.validate(json.loads(call.function.arguments), schema or {"type": "object"})
    if isinstance(choice, dict):
        assert [t.function.name for t in c.message.tool_calls] == ["get_weather"]


def test_enforced_call_streams_name_first_then_argument_deltas(client):
    kw = dict(
        model="default",
        messages=ASK,
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=60,
        temperature=0,
    )
    whole = client.chat.completions.create(**kw).choices[0].message.tool_calls[0]
    content, calls, finish = _stream_calls(client.chat.completions.create(stream=True, **kw))
    assert content == "" and finish == "tool_calls"
    assert list(calls) == [0] and calls[0][0] == "get_weather"
    assert json.loads(calls[0][1]) == json.loads(whole.function.arguments)


def test_parallel_tool_calls_false_allows_one_call(client):
    r = client.chat.completions.create(
        model="default",
        messages=ASK,
        tools=TOOLS,
        tool_choice="required",
        parallel_tool_calls=False,
        max_tokens=60,
        temperature=0,
    )
    assert len(r.choices[0].message.tool_calls) == 1


# ---------------------------------------------------------------------------- auto: parsed calls
# The default model's template shows no tool syntax, so `auto` reads the Hermes format that the
# server's tool prompt asks for. The output is forced with a regex so the test does not depend on
# what a 135M model chooses to say.
FORCED = 'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def test_auto_parses_a_call_out_of_the_answer(client):
    kw = dict(model="default", messages=ASK, tools=TOOLS, max_tokens=80)
    extra = {"regex": re.escape(FORCED)}
    r = client.chat.completions.create(extra_body=extra, **kw)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls" and c.message.content == "Sure."
    [call] = c.message.tool_calls
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    content, calls, finish = _stream_calls(
        client.chat.completions.create(stream=True, extra_body=extra, **kw)
    )
    assert content == "Sure." and finish == "tool_calls"
    assert [(n, json.loads(a)) for n, a in calls.values()] == [("get_weather", {"city": "Paris"})]


def test_tool_choice_none_leaves_the_text_alone(client):
    r = client.chat.completions.create(
        model="default",
        messages=ASK,
        tools=TOOLS,
        tool_choice="none",
        max_tokens=80,
        extra_body={"regex": re.escape(FORCED)},
    )
    assert r.choices[0].message.content == FORCED and not r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "stop"


def test_tool_result_is_rendered_on_the_next_turn(client, server_url, tok):
    first = client.chat.completions.create(
        model="default",
        messages=ASK,
        tools=TOOLS,
        max_tokens=80,
        extra_body={"regex": re.escape(FORCED)},
    )
    msg = first.choices[0].message
    history = ASK + [
        msg.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": "18 degrees and sunny"},
    ]
    second = client.chat.completions.create(
        model="default", messages=history, tools=TOOLS, max_tokens=4
    )
    # The server rendered exactly the conversation the template renders here, result included.
    req = ChatCompletionRequest.model_validate({"messages": history, "tools": TOOLS})
    prompt = render_chat_prompt(tok, req.messages, tools=req.tools)
    assert "<|im_start|>tool\n18 degrees and sunny<|im_end|>" in prompt.text
    assert '"arguments": {"city": "Paris"}' in prompt.text
    assert second.usage.prompt_tokens == len(prompt.input_ids)


@pytest.mark.parametrize(
    "parser,text",
    [
        (
            "qwen",
            'Sure.\n<tool_call>\n{"name": "get_time", "arguments": {"tz": "UTC"}}\n</tool_call>',
        ),
        ("llama3", '{"name": "get_time", "parameters": {"tz": "UTC"}}'),
        ("mistral", '[TOOL_CALLS] [{"name": "get_time", "arguments": {"tz": "UTC"}}]'),
    ],
)
def test_parse_function_call_route_reads_each_format(server_url, parser, text):
    r = requests.post(
        server_url + "/parse_function_call",
        json={"text": text, "tool_call_parser": parser, "tools": TOOLS},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["normal_text"] == ("Sure." if parser == "qwen" else "")
    assert [(c["tool_index"], c["name"], json.loads(c["parameters"])) for c in out["calls"]] == [
        (1, "get_time", {"tz": "UTC"})
    ]


# ---------------------------------------------------------------------------- reasoning
THOUGHT = "<think>\n2+2 is 4.\n</think>\n\nIt is 4."


def test_think_block_goes_to_reasoning_content(client):
    kw = dict(model="default", messages=[{"role": "user", "content": "2+2?"}], max_tokens=80)
    extra = {"regex": re.escape(THOUGHT)}
    r = client.chat.completions.create(extra_body=extra, logprobs=True, **kw)
    m = r.choices[0].message
    assert m.reasoning_content == "\n2+2 is 4.\n"
    assert m.content == "It is 4."
    # Thinking ran up to the output token that completes </think>.
    pieces = [t.token for t in r.choices[0].logprobs.content]
    end = next(k for k in range(1, len(pieces) + 1) if "</think>" in "".join(pieces[:k]))
    assert r.usage.completion_tokens_details.reasoning_tokens == end < len(pieces)
    reasoning, content = "", ""
    for chunk in client.chat.completions.create(stream=True, extra_body=extra, **kw):
        if chunk.choices:
            reasoning += getattr(chunk.choices[0].delta, "reasoning_content", None) or ""
            content += chunk.choices[0].delta.content or ""
    assert (reasoning, content) == (m.reasoning_content, m.content)
    kept = client.chat.completions.create(extra_body=dict(extra, separate_reasoning=False), **kw)
    assert kept.choices[0].message.content == THOUGHT


# ---------------------------------------------------------------------------- prompt break
def _system(rid: str) -> str:
    return f"Request id: {rid}. You are the support agent of Acme. Answer briefly and politely."


def test_prompt_break_points_at_the_changing_id(client, server_url, tok):
    requests.post(server_url + "/flush_cache", timeout=30)
    usages = []
    for rid in ("4821", "7710"):
        r = client.chat.completions.create(
            model="default",
            messages=[
                {"role": "system", "content": _system(rid)},
                {"role": "user", "content": "Where is my order?"},
            ],
            max_tokens=2,
        )
        usages.append(r.usage.prompt_tokens_details)
    a, b = (
        tok.encode(
            tok.apply_chat_template([{"role": "system", "content": _system(rid)}], tokenize=False),
            add_special_tokens=False,
        )
        for rid in ("4821", "7710")
    )
    first_diff = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    pb = usages[1].prompt_break
    assert usages[1].cached_tokens == pb["position"] == first_diff
    assert pb["cause"] == "diverged"
    assert pb["before"].endswith("Request id: ") and pb["after"].startswith("7710")
    assert pb["cached_next"].startswith("4821")
    assert usages[0].prompt_break["position"] == 0  # the flushed cache held nothing
    metrics = requests.get(server_url + "/metrics", timeout=30).text
    count = re.search(r"sglang:prompt_break_fraction_count\{[^}]*\} ([0-9.]+)", metrics)
    assert count is not None and float(count.group(1)) >= 2


def test_prompt_break_on_the_native_route(server_url):
    requests.post(server_url + "/flush_cache", timeout=30)
    body = {
        "text": "The quick brown fox jumps over the lazy dog",
        "sampling_params": {"max_new_tokens": 1},
    }
    requests.post(server_url + "/generate", json=body, timeout=60)
    meta = requests.post(server_url + "/generate", json=body, timeout=60).json()["meta_info"]
    pb = meta["prompt_break"]
    # The whole prompt was cached; only its last token is computed again.
    assert pb["position"] == meta["cached_tokens"] == meta["prompt_tokens"] - 1
    assert pb["cause"] == "recompute"
