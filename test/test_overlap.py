"""The overlap loop against the plain loop: identical tokens over a mixed workload under pressure."""

from __future__ import annotations

import concurrent.futures
import time

import requests
from server_utils import ServerProcess, generate, stream_chunks

# A low conservativeness admits nearly everything, so decode runs out of KV and must retract on any machine.
COMMON = [
    "--max-total-tokens",
    "300",
    "--chunked-prefill-size",
    "64",
    "--schedule-conservativeness",
    "0.05",
]
ABORT_AT = 80
LONG = " ".join(f"Fact {i}: the number {i} squared is {i * i}." for i in range(14))


def _workload(url: str):
    """Streaming and plain, greedy and seeded sampling, stop strings, penalties, a grammar, a chunked long
    prompt, and one abort."""
    jobs = []
    for i in range(12):
        sp = {"max_new_tokens": 24, "temperature": 0}
        if i % 3 == 1:
            sp = {"max_new_tokens": 24, "temperature": 0.9, "top_p": 0.9, "sampling_seed": 100 + i}
        if i % 4 == 2:
            sp["stop"] = ["zebra", "\n\n\n"]  # checked every step, rarely hit
        if i == 3:
            sp["stop"] = "."
        if i == 7:  # penalties read every accepted token: sampled after the previous results land
            sp.update(frequency_penalty=0.5, presence_penalty=0.3, repetition_penalty=1.2)
        if i == 9:  # so do grammars: the mask is filled while the forward runs
            sp["regex"] = r"( [a-z]+){3,12}\."
        text = LONG if i == 5 else f"Story number {i}: Once upon a time"
        jobs.append(({"text": text, "sampling_params": sp}, i % 2 == 0))

    def run(job):
        body, stream = job
        if stream:
            return stream_chunks(url, body)[-1]
        r = generate(url, **body)
        assert r.status_code == 200, r.text
        return r.json()

    def aborted():
        # Aborted once it holds ABORT_AT generated tokens: a count of steps, not of seconds, so on a
        # slow machine it still holds enough of the pool that the others' decode must retract.
        body = {
            "text": "An endless essay",
            "rid": "overlap-abort",
            "sampling_params": {"max_new_tokens": 300, "ignore_eos": True},
        }
        sent = []

        def abort_at(chunk: dict) -> None:
            if not sent and chunk["meta_info"]["completion_tokens"] >= ABORT_AT:
                sent.append(requests.post(url + "/abort_request", json={"rid": "overlap-abort"}))

        return stream_chunks(url, body, on_chunk=abort_at)[-1]

    # Paused, every request reaches the queue before any runs: both loops see the same arrivals,
    # and admitting them all at once overfills the pool, so decode must retract.
    assert requests.post(url + "/pause_generation", json={"mode": "in_place"}).status_code == 200
    with concurrent.futures.ThreadPoolExecutor(13) as ex:
        ab = ex.submit(aborted)
        outs = ex.map(run, jobs)
        _wait_queued(url, len(jobs) + 1)
        assert requests.post(url + "/continue_generation").status_code == 200
        outs = list(outs)
    assert ab.result()["meta_info"]["finish_reason"]["type"] == "abort"
    return outs


def _wait_queued(url: str, n: int, timeout: float = 120.0) -> None:
    deadline = time.time() + timeout
    while requests.get(url + "/server_info").json()["num_waiting_reqs"] < n:
        assert time.time() < deadline, f"{n} requests never queued"
        time.sleep(0.05)


def test_overlap_and_plain_loops_agree():
    """The plain loop is the reference; the overlap loop with decode rows mixed into prefill chunks (the
    most moving parts at once) must produce the same tokens, texts and finish reasons."""
    plain = ServerProcess(COMMON + ["--disable-overlap-schedule"])
    overlap = None
    # The second server starts while the first serves its workload.
    starting = concurrent.futures.ThreadPoolExecutor(1).submit(
        ServerProcess, COMMON + ["--enable-mixed-chunk"]
    )
    try:
        ref = _workload(plain.url)
        overlap = starting.result()
        out = _workload(overlap.url)
        assert [x["output_ids"] for x in ref] == [y["output_ids"] for y in out]
        assert [x["text"] for x in ref] == [y["text"] for y in out]
        assert [x["meta_info"]["finish_reason"] for x in ref] == [
            y["meta_info"]["finish_reason"] for y in out
        ]
        for srv in (plain, overlap):
            srv.check_idle_invariant()
        for srv, res in ((plain, ref), (overlap, out)):
            assert sum(y["meta_info"]["num_retractions"] for y in res) > 0, srv.log_tail()
    finally:
        plain.stop()
        overlap = overlap or starting.result()
        overlap.stop()
