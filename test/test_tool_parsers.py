"""Tool-call and reasoning parsers on their own: every format whole and streamed at every split,
the template detection, the constraint schema, and the chat template rendering of tools."""

from __future__ import annotations

import json
from typing import Dict, List, Tuple

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang.srt.entrypoints.openai.chat_output import ChatOutputPlan, ChoiceShaper
from sglang.srt.entrypoints.openai.chat_template import render_chat_prompt
from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest
from sglang.srt.parsers.reasoning_parser import STYLES, ReasoningStream, separate_reasoning
from sglang.srt.parsers.tool_call_parser import ToolCallStream, parse_tool_calls
from sglang.srt.parsers.tool_constraint import tool_call_schema
from sglang.srt.parsers.tool_formats import FORMATS, format_for_template, resolve_format
from sglang.srt.server_args import REASONING_PARSERS, TOOL_CALL_PARSERS

WEATHER = {"city": "Paris", "days": [1, 2], "note": 'say "hi" {not a brace}'}

# (format, model output, expected content, expected calls)
SAMPLES = [
    (
        "qwen",
        "Let me check.\n<tool_call>\n"
        + json.dumps({"name": "get_weather", "arguments": WEATHER})
        + '\n</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>',
        "Let me check.",
        [("get_weather", WEATHER), ("get_time", {})],
    ),
    (
        "llama3",
        json.dumps({"name": "get_weather", "parameters": WEATHER})
        + '; {"name": "get_time", "parameters": {}}',
        "",
        [("get_weather", WEATHER), ("get_time", {})],
    ),
    (
        "llama3",
        'Sure.<|python_tag|>{"name": "get_time", "parameters": {"tz": "UTC"}}',
        "Sure.",
        [("get_time", {"tz": "UTC"})],
    ),
    (
        "mistral",
        "[TOOL_CALLS] ["
        + json.dumps({"name": "get_weather", "arguments": WEATHER})
        + ', {"name": "get_time", "arguments": {}}]',
        "",
        [("get_weather", WEATHER), ("get_time", {})],
    ),
    (
        "json_array",
        '[{"name": "get_time", "parameters": {"tz": "UTC"}}]',
        "",
        [("get_time", {"tz": "UTC"})],
    ),
]


def _whole(fmt: str, text: str, **kw) -> Tuple[str, List[Tuple[str, Dict]]]:
    content, calls = parse_tool_calls(text, FORMATS[fmt], **kw)
    return content, [(c.name, json.loads(c.arguments)) for c in calls]


def _streamed(fmt: str, pieces: List[str], **kw) -> Tuple[str, List[Tuple[str, Dict]]]:
    stream = ToolCallStream(FORMATS[fmt], **kw)
    content, calls = "", {}
    for k, piece in enumerate(pieces):
        update = stream.feed(piece, final=k == len(pieces) - 1)
        content += update.content
        for d in update.calls:
            if d.name is not None:
                assert d.index not in calls, "a call is announced once"
                assert d.id and d.id.startswith("call_")
                calls[d.index] = [d.name, ""]
            else:
                assert d.index in calls, "arguments only after the call's name"
            calls[d.index][1] += d.arguments
    return content, [(n, json.loads(a)) for n, a in calls.values()]


def _split(text: str, cuts: List[int]) -> List[str]:
    points = sorted({min(c, len(text)) for c in cuts})
    pieces, last = [], 0
    for p in points:
        pieces.append(text[last:p])
        last = p
    return pieces + [text[last:]]


@pytest.mark.parametrize("fmt,text,content,calls", SAMPLES)
def test_whole_output_is_parsed_into_calls(fmt, text, content, calls):
    assert _whole(fmt, text) == (content, calls)


@pytest.mark.parametrize("fmt,text,content,calls", SAMPLES)
@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12))
def test_streaming_at_any_split_gives_the_whole_parse(fmt, text, content, calls, cuts):
    assert _streamed(fmt, _split(text, cuts)) == (content, calls)


def test_streaming_one_character_at_a_time():
    for fmt, text, content, calls in SAMPLES:
        assert _streamed(fmt, list(text) + [""]) == (content, calls), fmt


@pytest.mark.parametrize(
    "fmt,text",
    [
        ("llama3", '{"answer": 3, "name": "x"}'),  # JSON that is not a call
        ("mistral", "[1, 2, 3]"),
        ("qwen", "Use <tool_call> tags, like this: <tool_call> nothing"),
        ("llama3", "The answer is 4."),
    ],
)
def test_text_that_is_not_a_call_is_content_unchanged(fmt, text):
    assert _whole(fmt, text) == (text, [])
    assert _streamed(fmt, list(text) + [""]) == (text, [])


def test_a_call_cut_off_by_the_token_limit_is_not_a_call():
    text = 'Cut off: <tool_call>\n{"name": "get_time", "argu'
    assert _whole("qwen", text) == (text, [])
    # A stream cannot take back what it sent: the name went out, the finish reason says "length".
    stream = ToolCallStream(FORMATS["qwen"])
    update = stream.feed(text, final=True)
    assert update.content == "Cut off:" and [d.name for d in update.calls] == ["get_time"]
    assert stream.finished_calls() == []


def test_calls_to_unoffered_functions_are_dropped_and_max_calls_holds():
    text = SAMPLES[0][1]
    assert _whole("qwen", text, allowed_names=["get_time"])[1] == [("get_time", {})]
    assert _whole("qwen", text, max_calls=1)[1] == [("get_weather", WEATHER)]
    assert _streamed("qwen", list(text) + [""], max_calls=1)[1] == [("get_weather", WEATHER)]


def test_arguments_written_as_a_json_string_are_unwrapped():
    text = '<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>'
    assert _whole("qwen", text) == ("", [("f", {"a": 1})])
    assert _streamed("qwen", list(text) + [""]) == ("", [("f", {"a": 1})])


def test_template_detection_and_every_parser_name_resolves():
    assert format_for_template("{{ '<tool_call>' }}").name == "qwen"
    assert format_for_template("{{ '<|python_tag|>' }} ipython").name == "llama3"
    assert format_for_template("[TOOL_CALLS] {{ tools }}").name == "mistral"
    assert format_for_template("{{ messages }}").name == "qwen"  # the server's own tool prompt
    for name in TOOL_CALL_PARSERS:
        assert resolve_format(name, "").name in FORMATS
    assert set(REASONING_PARSERS) == set(STYLES)


# ---------------------------------------------------------------------------- reasoning
THOUGHT = "<think>\nThe user wants 2+2. That is 4.\n</think>\n\nThe answer is 4."


@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=len(THOUGHT)), max_size=8))
def test_reasoning_split_at_any_point_matches_the_whole(cuts):
    style = STYLES["qwen3"]
    whole = separate_reasoning(THOUGHT, style)
    assert whole == ("\nThe user wants 2+2. That is 4.\n", "The answer is 4.")
    stream, r, c = ReasoningStream(style), "", ""
    pieces = _split(THOUGHT, cuts)
    for k, piece in enumerate(pieces):
        u = stream.feed(piece, final=k == len(pieces) - 1)
        r, c = r + u.reasoning, c + u.content
    assert (r, c) == whole


def test_reasoning_styles():
    r1 = STYLES["deepseek-r1"]
    # The R1 template opened the block in the prompt: the output starts inside it.
    assert separate_reasoning("thinking</think>answer", r1, True) == ("thinking", "answer")
    assert separate_reasoning("still thinking", r1, True) == ("still thinking", "")
    assert separate_reasoning("plain answer", STYLES["qwen3"]) == ("", "plain answer")


def test_reasoning_then_tool_call_in_one_choice():
    plan = ChatOutputPlan(
        tool_format=FORMATS["qwen"], tool_names=["get_time"], reasoning=STYLES["qwen3"]
    )
    text = (
        '<think>need the time</think>\n<tool_call>{"name": "get_time", "arguments": {}}</tool_call>'
    )
    msg = ChoiceShaper(plan).message(text)
    assert msg.reasoning == "need the time" and msg.content is None
    assert [(c.name, c.arguments) for c in msg.tool_calls] == [("get_time", "{}")]
    shaper, deltas = ChoiceShaper(plan), []
    for k, ch in enumerate(text):
        deltas.append(shaper.feed(ch, final=k == len(text) - 1).delta_dict())
    assert "".join(d.get("reasoning_content", "") for d in deltas) == "need the time"
    assert not any("content" in d for d in deltas) and shaper.called()


# ---------------------------------------------------------------------------- constraint schema
TOOLS = [
    ("get_weather", {"type": "object", "properties": {"city": {"type": "string"}}}),
    ("get_time", None),
]


def test_tool_call_schema_accepts_calls_and_refuses_others():
    schema = tool_call_schema(TOOLS)
    jsonschema.validate([{"name": "get_weather", "parameters": {"city": "Oslo"}}], schema)
    jsonschema.validate([{"name": "get_time", "parameters": {}}] * 2, schema)
    bad_calls = (
        [],
        [{"name": "nope", "parameters": {}}],
        [{"name": "get_time"}],
        [{"name": "get_time", "parameters": {"x": 1}}],  # no parameters schema: no arguments
    )
    for bad in bad_calls:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)
    one = tool_call_schema(TOOLS, only="get_time")
    jsonschema.validate([{"name": "get_time", "parameters": {}}], one)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate([{"name": "get_weather", "parameters": {}}], one)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(
            [{"name": "get_time", "parameters": {}}] * 2, tool_call_schema(TOOLS, parallel=False)
        )


# ---------------------------------------------------------------------------- templates
TOOL_BODY = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
CONVERSATION = [
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees and sunny"},
]

# A template that reads tools, tool_calls and tool results (shaped like Qwen 2.5's).
TOOL_TEMPLATE = (
    "{% if tools %}<tools>{% for t in tools %}{{ t.function.name }};{% endfor %}</tools>\n{% endif %}"
    "{% for m in messages %}<{{ m.role }}>"
    "{% if m.tool_calls %}{% for c in m.tool_calls %}CALL {{ c.function.name }} "
    "{{ c.function.arguments | tojson }}{% endfor %}{% else %}{{ m.content }}{% endif %}"
    "</{{ m.role }}>\n{% endfor %}<assistant>"
)


def _req(tools=True):
    return ChatCompletionRequest.model_validate(
        {"messages": CONVERSATION, **({"tools": [TOOL_BODY]} if tools else {})}
    )


def test_template_without_tool_support_gets_the_servers_tool_prompt(tok):
    req = _req()
    text = render_chat_prompt(tok, req.messages, tools=req.tools).text
    # SmolLM2's template reads neither `tools` nor `tool_calls`: both arrive as text.
    assert text.startswith("<|im_start|>system\nYou can call functions")
    assert '"name": "get_weather"' in text.split("</tools>")[0]
    assert (
        '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}'
        "\n</tool_call><|im_end|>"
    ) in text
    assert "<|im_start|>tool\n18 degrees and sunny<|im_end|>\n<|im_start|>assistant\n" in text


def test_template_with_tool_support_receives_tools_and_calls(tok, monkeypatch):
    monkeypatch.setattr(tok, "chat_template", TOOL_TEMPLATE)
    req = _req()
    text = render_chat_prompt(tok, req.messages, tools=req.tools).text
    assert text == (
        "<tools>get_weather;</tools>\n<user>Weather in Paris?</user>\n"
        '<assistant>CALL get_weather {"city": "Paris"}</assistant>\n'
        "<tool>18 degrees and sunny</tool>\n<assistant>"
    )
