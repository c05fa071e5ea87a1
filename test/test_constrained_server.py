"""Constrained decoding through the real server and model: sampled outputs always validate, greedy
constrained output follows the unconstrained one where the grammar allows it, mixed batches."""

from __future__ import annotations

import concurrent.futures
import json
import re

import jsonschema
import pytest
from server_utils import generate

SCHEMAS = {
    "person": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "role": {"type": "string", "enum": ["admin", "user", "guest"]},
        },
        "required": ["name", "age", "role"],
        "additionalProperties": False,
    },
    "order": {
        "type": "object",
        "properties": {
            "id": {"type": "integer", "minimum": 1, "maximum": 9999},
            "items": {
                "type": "array",
                "items": {"type": "string", "enum": ["apple", "pear", "fig"]},
                "minItems": 1,
                "maxItems": 3,
            },
            "paid": {"type": "boolean"},
        },
        "required": ["id", "items", "paid"],
        "additionalProperties": False,
    },
    "point": {
        "type": "object",
        "properties": {
            "x": {"type": "integer", "minimum": -99, "maximum": 99},
            "y": {"type": "integer", "minimum": -99, "maximum": 99},
            "label": {
                "type": "object",
                "properties": {"color": {"type": "string", "enum": ["red", "blue"]}},
                "required": ["color"],
                "additionalProperties": False,
            },
        },
        "required": ["x", "y", "label"],
        "additionalProperties": False,
    },
}
REGEXES = {
    "ip": r"((25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(25[0-5]|2[0-4]\d|1?\d?\d)",
    "date": r"20[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])",
}
N = 32


def _sampled(url, prompt, key, value):
    sp = {"max_new_tokens": 80, "temperature": 1.0, key: value}
    r = generate(url, text=[prompt] * N, sampling_params=sp, timeout=600)
    assert r.status_code == 200, r.text
    outs = r.json()
    assert all(o["meta_info"]["finish_reason"]["type"] == "stop" for o in outs)
    return [o["text"] for o in outs]


# "order" (nested arrays, enums, required fields) holds the others' features; they run with -m slow.
@pytest.mark.parametrize(
    "name", [n if n == "order" else pytest.param(n, marks=pytest.mark.slow) for n in SCHEMAS]
)
def test_sampled_json_always_validates(server_url, name):
    schema = SCHEMAS[name]
    texts = _sampled(
        server_url, f"Write a {name} record as JSON:\n", "json_schema", json.dumps(schema)
    )
    assert len(set(texts)) > 10  # really sampled
    for t in texts:
        jsonschema.validate(json.loads(t), schema)


@pytest.mark.parametrize("name", list(REGEXES))
def test_sampled_regex_always_matches(server_url, name):
    texts = _sampled(server_url, f"Give an example {name}: ", "regex", REGEXES[name])
    assert len(set(texts)) > 10
    for t in texts:
        assert re.fullmatch(REGEXES[name], t), t


def test_greedy_constrained_equals_unconstrained_where_allowed(server_url):
    prompt = "The capital of France is"
    free = generate(
        server_url, text=prompt, sampling_params={"max_new_tokens": 16, "temperature": 0}
    ).json()
    assert free["text"].startswith(" Paris.\n\nThe answer is: 20")
    pattern = r" Paris\.\n\nThe answer is: [0-9]{4}-[0-9]{2}"
    con = generate(
        server_url,
        text=prompt,
        sampling_params={"max_new_tokens": 32, "temperature": 0, "regex": pattern},
    ).json()
    assert re.fullmatch(pattern, con["text"])
    assert free["text"].startswith(con["text"])
    ids = con["output_ids"]
    assert con["meta_info"]["finish_reason"] == {
        "type": "stop",
        "matched": ids[-1],
    }  # EOS once the regex ends
    assert ids[:-1] == free["output_ids"][: len(ids) - 1]


def test_mixed_batch_of_constrained_and_free_requests(server_url):
    free_prompts = [f"Tell me about the number {i}." for i in range(6)]
    sp = {"max_new_tokens": 12, "temperature": 0}
    solo = [
        generate(server_url, text=p, sampling_params=sp).json()["output_ids"] for p in free_prompts
    ]
    schema = json.dumps(SCHEMAS["person"])

    def job(i):
        if i % 2:
            return generate(server_url, text=free_prompts[i // 2], sampling_params=sp).json()
        return generate(
            server_url,
            text="A user as JSON:\n",
            sampling_params={"max_new_tokens": 80, "temperature": 0.7, "json_schema": schema},
        ).json()

    with concurrent.futures.ThreadPoolExecutor(12) as ex:
        outs = list(ex.map(job, range(12)))
    assert [o["output_ids"] for o in outs[1::2]] == solo
    for o in outs[0::2]:
        jsonschema.validate(json.loads(o["text"]), SCHEMAS["person"])
