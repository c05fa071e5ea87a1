"""/openapi.json describes every route's body, and bodies generated from it never get a 5xx."""

from __future__ import annotations

import tempfile
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.config import SchemathesisConfig

from sglang.srt.core.generate_input import GenerateReqInput
from sglang.srt.core.sampling_params import SamplingParams
from sglang.srt.entrypoints.openapi_docs import GenerateBody, SamplingParamsBody


def test_the_documented_bodies_are_the_validated_ones():
    assert set(GenerateBody.model_fields) == set(GenerateReqInput._FIELDS)
    assert set(SamplingParamsBody.model_fields) == set(SamplingParams.field_names())


def test_every_post_route_documents_its_body(server_url):
    spec = requests.get(server_url + "/openapi.json", timeout=30).json()
    posts = {path: ops["post"] for path, ops in spec["paths"].items() if "post" in ops}
    assert {
        "/generate",
        "/v1/completions",
        "/v1/chat/completions",
        "/tokenize",
        "/abort_request",
    } <= set(posts)
    for path, op in posts.items():
        if path in ("/flush_cache", "/continue_generation", "/stop_profile"):
            continue  # takes no body
        schema = op["requestBody"]["content"]["application/json"]["schema"]
        name = schema["$ref"].rsplit("/", 1)[-1]
        assert spec["components"]["schemas"][name]["properties"], path
        assert op["responses"]["400"]["content"]["application/json"]["schema"]["$ref"].endswith(
            "/ErrorBody"
        )


# ---------------------------------------------------------------------------- fuzzing from the spec
# PUT routes are the same handlers as their POST twins: fuzzing them again only costs time.
# /init_weights_update_group with a valid body waits (minutes) for a trainer that never comes, and
# /release_memory_occupation takes the shared server's weights away (they come back zeroed for a
# trainer to send); test_weight_sync drives both with a trainer.
schema = (
    schemathesis.pytest.from_fixture("openapi_schema")
    .exclude(method="PUT")
    .exclude(path="/init_weights_update_group")
    .exclude(path="/release_memory_occupation")
)


# Only the fuzzing phase, bounded by max_examples below: the coverage phase alone sends hundreds of
# boundary cases per route, which is minutes on a 2-core machine.
CONFIG = SchemathesisConfig.from_dict(
    {
        "phases": {
            "coverage": {"enabled": False},
            "examples": {"enabled": False},
            "stateful": {"enabled": False},
        }
    }
)


@pytest.fixture
def openapi_schema(default_server):
    return schemathesis.openapi.from_url(default_server.url + "/openapi.json", config=CONFIG)


def _keep_it_short(path: str, body: Any) -> None:
    """Valid bodies may ask for thousands of tokens or n=128; that is work, not what this test is about."""
    if not isinstance(body, dict):
        return
    if path == "/start_profile" and "output_dir" in body:
        body["output_dir"] = tempfile.gettempdir()  # traces go nowhere else
    if path == "/generate":
        sps = body.get("sampling_params")
        if sps is None:
            body["sampling_params"] = {"max_new_tokens": 2}
        elif isinstance(sps, list):
            body["sampling_params"] = sps = [sp if isinstance(sp, dict) else {} for sp in sps]
        for sp in sps if isinstance(sps, list) else [sps]:
            if isinstance(sp, dict):
                sp["max_new_tokens"] = 2
                sp.pop("n", None)
    elif path.startswith("/v1/"):
        if isinstance(
            body.get("messages"), list
        ):  # long conversations are prefill work, not new cases
            body["messages"] = body["messages"][:2]
            for m in body["messages"]:
                if isinstance(m, dict) and isinstance(m.get("content"), str):
                    m["content"] = m["content"][:64]
        if isinstance(body.get("prompt"), str):
            body["prompt"] = body["prompt"][:256]
        body["max_tokens"] = 2
        body.pop("max_completion_tokens", None)
        body.pop("n", None)


@schema.parametrize()
@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_bodies_generated_from_the_spec_never_get_a_5xx(case, default_server):
    _keep_it_short(case.path, case.body)
    r = case.call(timeout=300)
    if case.path == "/pause_generation":  # the shared server must go on serving
        requests.post(default_server.url + "/continue_generation", timeout=60).raise_for_status()
    if case.path == "/start_profile":  # a profile left running would grow without end
        requests.post(default_server.url + "/stop_profile", timeout=60)
    if case.path == "/update_weight_version":  # later tests read the default label
        requests.post(
            default_server.url + "/update_weight_version", json={"new_version": "default"}
        )
    assert r.status_code < 500, (case.method, case.path, case.body, r.status_code, r.text[:500])
    assert default_server.alive()
