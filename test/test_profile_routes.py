"""/start_profile and /stop_profile on the real server: the trace file each names, with the
scheduler's operations in it; a profile of num_steps passes ends by itself; misuse is a 400."""

from __future__ import annotations

import gzip
import json
import os
import time

import pytest
import requests
from server_utils import assert_error_shape, generate


def _trace_names(path: str) -> set:
    with gzip.open(path, "rt") as f:
        return {e.get("name", "") for e in json.load(f)["traceEvents"]}


def test_profile_until_stop_writes_the_trace(server_url, tmp_path):
    r = requests.post(
        server_url + "/start_profile",
        json={"output_dir": str(tmp_path), "profile_id": "run1", "record_shapes": True},
    )
    assert r.status_code == 200, r.text
    again = requests.post(server_url + "/start_profile", json={"output_dir": str(tmp_path)})
    assert "already in progress" in assert_error_shape(again, 400, "BadRequestError")["message"]
    assert generate(server_url, text="Hello", sampling_params={"max_new_tokens": 4}).ok
    r = requests.get(server_url + "/stop_profile")
    assert r.status_code == 200, r.text
    path = tmp_path / "run1-TP-0.trace.json.gz"
    assert str(path) in r.text
    assert "aten::mm" in _trace_names(str(path)) or "aten::addmm" in _trace_names(str(path))
    late = requests.post(server_url + "/stop_profile")
    assert "not in progress" in assert_error_shape(late, 400, "BadRequestError")["message"]


def test_num_steps_ends_the_profile_by_itself(server_url, tmp_path):
    r = requests.post(
        server_url + "/start_profile",
        json={"output_dir": str(tmp_path), "profile_id": "steps", "num_steps": 3},
    )
    assert r.status_code == 200, r.text
    assert generate(server_url, text="Hi", sampling_params={"max_new_tokens": 8}).ok
    path = tmp_path / "steps-TP-0.trace.json.gz"
    deadline = time.time() + 60
    while not path.exists():
        assert time.time() < deadline, "the profile never ended"
        time.sleep(0.05)
    # Ended by itself after 3 passes: nothing is left to stop.
    r = requests.post(server_url + "/stop_profile")
    assert r.status_code == 400
    assert os.path.getsize(path) > 0


@pytest.mark.parametrize(
    "body,field",
    [
        ({"activities": ["TPU"]}, "activities"),
        ({"activities": []}, "activities"),
        ({"num_steps": 0}, "num_steps"),
        ({"num_steps": "3"}, "num_steps"),
        ({"with_stack": 1}, "with_stack"),
        ({"trace_level": 2}, "trace_level"),
        ({"profile_id": "../escape"}, "profile_id"),
        ({"profile_id": "a/b"}, "profile_id"),
        ([], "JSON object"),
    ],
)
def test_bad_profile_bodies_are_400(server_url, body, field):
    r = requests.post(server_url + "/start_profile", json=body)
    assert field in assert_error_shape(r, 400, "BadRequestError")["message"]
    assert requests.post(server_url + "/stop_profile").status_code == 400  # nothing started


def test_an_unwritable_trace_is_a_400_and_the_server_lives(server_url, tmp_path):
    """output_dir exists at start and is gone at stop: the export fails, the scheduler does not."""
    gone = tmp_path / "gone"
    r = requests.post(server_url + "/start_profile", json={"output_dir": str(gone)})
    assert r.status_code == 200, r.text
    gone.rmdir()
    r = requests.post(server_url + "/stop_profile")
    assert "failed" in assert_error_shape(r, 400, "BadRequestError")["message"]
    assert generate(server_url, text="Hi", sampling_params={"max_new_tokens": 2}).ok
    nul = requests.post(server_url + "/start_profile", json={"output_dir": "/tmp/a\u0000b"})
    assert nul.status_code == 400
