"""Constrained decoding: xgrammar backend, mask protocol, and the GrammarManager.

The sampling tests drive the scheduler's mask protocol with random logits over the embedded
model's real tokenizer (vocab 49152): whatever the "model" prefers, every finished output must
parse and validate. Random logits never choose to stop, so after BIAS_AFTER steps the loop adds a
bias to closing tokens (", }, ] and EOS) — only among tokens the grammar allows, so the bias
shortens outputs without ever forcing an invalid one.
"""

from __future__ import annotations

import json
import pickle
import re
import threading
import time
from dataclasses import dataclass
from typing import Dict, List, Tuple

import jsonschema
import pytest
import torch
import xgrammar as xgr

from sglang.srt.constrained.base_grammar_backend import (
    ANY_JSON,
    ANY_JSON_OBJECT,
    BaseGrammarBackend,
    BaseGrammarObject,
    GrammarCompileError,
)
from sglang.srt.constrained.grammar_manager import ABORTED_MESSAGE, GrammarManager
from sglang.srt.constrained.json_whitespace import count_whitespace_sites, rewrite_json_whitespace
from sglang.srt.constrained.xgrammar_backend import XGrammarBackend
from sglang.srt.core.req import Req
from sglang.srt.core.sampling_params import SamplingParams

VOCAB = 49152
NUM_SAMPLES = 100
MAX_TOKENS = 160
BIAS_AFTER = 16
CLOSE_BIAS = 10.0

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "role": {"enum": ["admin", "user", "guest"]},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    },
    "required": ["name", "age", "role", "tags"],
}
NESTED = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "address": {
            "type": "object",
            "properties": {
                "street": {"type": "string"},
                "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
                "geo": {
                    "type": "object",
                    "properties": {"lat": {"type": "number"}},
                    "required": ["lat"],
                },
            },
            "required": ["street", "zip", "geo"],
        },
        "active": {"type": "boolean"},
    },
    "required": ["id", "address", "active"],
}
ARRAY_OF_OBJECTS = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {"x": {"type": "number"}, "ok": {"type": "boolean"}},
        "required": ["x", "ok"],
    },
    "minItems": 1,
    "maxItems": 3,
}
IP_RE = r"((25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])"
DATE_RE = r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
PHONE_RE = r"\([0-9]{3}\) [0-9]{3}-[0-9]{4}"


# ---------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def backend(tok) -> XGrammarBackend:
    """xgrammar's default JSON whitespace: any run of spaces, tabs and newlines."""
    return XGrammarBackend(tok, VOCAB, compile_threads=2)


@pytest.fixture(scope="module")
def bounded_ws_backend(tok) -> XGrammarBackend:
    """At most two spaces/newlines between JSON tokens. This tokenizer has hundreds of pure
    whitespace tokens, so under random logits xgrammar's default whitespace would swallow most
    steps; a bounded pattern is also what a server should run with against weak models."""
    return XGrammarBackend(tok, VOCAB, whitespace_pattern=r"[ \n]{0,2}", compile_threads=2)


@dataclass
class Bias:
    """What the "model" prefers after BIAS_AFTER steps: tokens made only of closing characters
    and the stop tokens go up; optionally pure-whitespace tokens go down."""

    ids: torch.Tensor
    values: torch.Tensor


def _make_bias(tok, backend: XGrammarBackend, penalize_whitespace: bool) -> Bias:
    ids, values = [], []
    for tid, text in enumerate(tok.batch_decode([[i] for i in range(len(tok))])):
        if text and set(text) <= set('"}]'):
            ids.append(tid)
            values.append(CLOSE_BIAS)
        elif penalize_whitespace and text and text.isspace():
            ids.append(tid)
            values.append(-CLOSE_BIAS)
    for t in backend.stop_token_ids:
        ids.append(t)
        values.append(CLOSE_BIAS)
    return Bias(torch.tensor(ids), torch.tensor(values))


@pytest.fixture(scope="module")
def close_bias(tok, backend) -> Bias:
    return _make_bias(tok, backend, penalize_whitespace=False)


def _req(rid: str, **grammar) -> Req:
    return Req(rid, [1, 2, 3], SamplingParams(**grammar))


# ---------------------------------------------------------------------------- sampling loop
def sample_batch(
    template: BaseGrammarObject,
    n: int,
    bias: Bias,
    seed: int,
    max_tokens: int = MAX_TOKENS,
    bias_after: int = BIAS_AFTER,
) -> Tuple[List[List[int]], List[bool]]:
    """n constrained generations in one shrinking batch, like the scheduler: random logits
    (randn * 3) -> mask -> apply -> softmax -> categorical draw -> accept. Returns token ids (stop
    token excluded) and terminated flags. (The per-step mask cost is measured by
    benchmark/bench_grammar_mask.py, not here.)

    The draw inverts the CDF of the softmax with one uniform per row: the same distribution as
    torch.multinomial(probs, 1), which costs ~3 ms per 49k-wide row on CPU and would dominate.
    Buffers are reused because fresh 20 MB tensors pay page faults every step."""
    gen = torch.Generator().manual_seed(seed)
    grammars = [template.copy() for _ in range(n)]
    outputs: List[List[int]] = [[] for _ in range(n)]
    done = [False] * n
    logits_buf, probs_buf, cdf_buf = (torch.empty(n, VOCAB) for _ in range(3))
    for step in range(max_tokens):
        live = [i for i in range(n) if not done[i]]
        if not live:
            break
        logits = logits_buf[: len(live)].normal_(0.0, 3.0, generator=gen)
        if step >= bias_after:
            logits[:, bias.ids] += bias.values
        mask = template.allocate_vocab_mask(VOCAB, len(live), "cpu")
        for row, i in enumerate(live):
            grammars[i].fill_vocab_mask(mask, row)
        mask = type(template).move_vocab_mask(mask, "cpu")
        type(template).apply_vocab_mask(logits, mask)
        probs = torch.softmax(logits, dim=-1, out=probs_buf[: len(live)])
        cdf = torch.cumsum(probs, dim=-1, out=cdf_buf[: len(live)])
        u = torch.rand(len(live), 1, generator=gen) * cdf[:, -1:]
        tokens = torch.searchsorted(cdf, u, right=True).clamp_(max=VOCAB - 1).squeeze(1).tolist()
        for row, i in enumerate(live):
            # The token was drawn from the grammar's own mask, so the matcher must accept it.
            assert grammars[i].accept_token(tokens[row]), (
                f"gen {i} step {step}: token {tokens[row]} rejected"
            )
            if grammars[i].is_terminated():
                done[i] = True
            else:
                outputs[i].append(tokens[row])
    return outputs, done


def _check_outputs(tok, outputs, done, check) -> None:
    terminated = [o for o, d in zip(outputs, done) if d]
    # Bounded schemas and the closing bias end nearly every run; a rare long string may not.
    assert len(terminated) >= 0.95 * len(outputs), (
        f"only {len(terminated)}/{len(outputs)} terminated"
    )
    for ids in terminated:
        check(tok.decode(ids))


def _validates(schema):
    return lambda text: jsonschema.validate(json.loads(text), schema)


@pytest.mark.parametrize(
    "schema", [PERSON, NESTED, ARRAY_OF_OBJECTS], ids=["person", "nested", "array"]
)
def test_random_sampling_json_schema_validates(tok, bounded_ws_backend, close_bias, schema):
    template = bounded_ws_backend.compile("json", json.dumps(schema))
    outputs, done = sample_batch(template, NUM_SAMPLES, close_bias, seed=1234)
    _check_outputs(tok, outputs, done, _validates(schema))


def test_random_sampling_default_whitespace(tok, backend):
    """xgrammar's unbounded whitespace: the "model" must dislike whitespace from the first step,
    or the tokenizer's hundreds of whitespace tokens win most draws."""
    bias = _make_bias(tok, backend, penalize_whitespace=True)
    outputs, done = sample_batch(
        backend.compile("json", json.dumps(PERSON)), 32, bias, seed=77, bias_after=0
    )
    _check_outputs(tok, outputs, done, _validates(PERSON))


@pytest.mark.parametrize("pattern", [IP_RE, DATE_RE, PHONE_RE], ids=["ip", "date", "phone"])
def test_random_sampling_regex_fullmatches(tok, backend, close_bias, pattern):
    template = backend.compile("regex", pattern)
    outputs, done = sample_batch(template, NUM_SAMPLES, close_bias, seed=99)
    assert all(done), "bounded regexes must always terminate"

    def check(text: str) -> None:
        assert re.fullmatch(pattern, text), text

    _check_outputs(tok, outputs, done, check)


def test_random_sampling_any_json_object(tok, bounded_ws_backend, close_bias):
    template = bounded_ws_backend.compile("json", ANY_JSON_OBJECT)
    outputs, done = sample_batch(template, 32, close_bias, seed=7)

    def check(text: str) -> None:
        assert isinstance(json.loads(text), dict), text

    _check_outputs(tok, outputs, done, check)


def test_whitespace_pattern_compact(tok, close_bias):
    """With pattern "" the JSON has no whitespace at all: it equals its compact re-serialization."""
    compact = XGrammarBackend(tok, VOCAB, whitespace_pattern="", compile_threads=2)
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer"},
            "b": {"type": "boolean"},
            "e": {"enum": ["a b", "c"]},
        },
        "required": ["n", "b", "e"],
    }
    outputs, done = sample_batch(
        compact.compile("json", json.dumps(schema)), 32, close_bias, seed=3
    )
    assert all(done)
    for ids in outputs:
        text = tok.decode(ids)
        jsonschema.validate(json.loads(text), schema)  # the space inside "a b" survived the rewrite
        assert text == json.dumps(json.loads(text), separators=(",", ":")), text


def test_whitespace_rewrite_finds_every_site():
    """Guards the EBNF rewrite against a change in how xgrammar prints JSON whitespace."""
    ebnf = str(xgr.Grammar.from_json_schema(json.dumps(NESTED)))
    assert count_whitespace_sites(ebnf) > 10
    rewritten = rewrite_json_whitespace(ebnf, "[ ]?", lambda p: str(xgr.Grammar.from_regex(p)))
    assert count_whitespace_sites(rewritten) == 0
    xgr.Grammar.from_ebnf(rewritten)  # still a valid grammar


def test_whitespace_pattern_bounded(tok):
    spaced = XGrammarBackend(tok, VOCAB, whitespace_pattern="[ ]?", compile_threads=2)
    schema = json.dumps(
        {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    )

    def accepts(text: str) -> bool:
        g = spaced.compile("json", schema)
        ids = tok.encode(text, add_special_tokens=False) + [spaced.stop_token_ids[0]]
        return all(g.accept_token(t) for t in ids) and g.is_terminated()

    assert accepts('{"a": 1}') and accepts('{"a":1}') and accepts('{ "a" : 1 }')
    assert not accepts('{"a":  1}') and not accepts('{\n"a": 1}')
    with pytest.raises(ValueError):
        XGrammarBackend(tok, VOCAB, whitespace_pattern="(")


# ---------------------------------------------------------------------------- mask semantics
def _allowed(mask: torch.Tensor, row: int, width: int) -> torch.Tensor:
    bits = (mask[row].unsqueeze(-1) >> torch.arange(32, dtype=torch.int32)) & 1
    return bits.flatten()[:width].bool()


@pytest.mark.parametrize(
    "key_type,key,text",
    [
        (
            "json",
            json.dumps(PERSON),
            '{"name": "Ada", "age": 36, "role": "admin", "tags": ["x", "y z"]}',
        ),
        ("regex", DATE_RE, "2024-02-29"),
    ],
)
def test_greedy_constrained_equals_unconstrained_when_argmax_allowed(
    tok, backend, key_type, key, text
):
    """If the unconstrained argmax is always allowed, masking must not change the greedy choice,
    nor any allowed logit."""
    target = tok.encode(text, add_special_tokens=False) + [backend.stop_token_ids[0]]
    g = backend.compile(key_type, key)
    gen = torch.Generator().manual_seed(5)
    constrained, unconstrained = [], []
    for t in target:
        logits = torch.randn(1, VOCAB, generator=gen) * 3.0
        logits[0, t] = logits.max() + 1.0  # the "model" wants the next token of a valid text
        unconstrained.append(int(logits.argmax()))
        mask = g.allocate_vocab_mask(VOCAB, 1, "cpu")
        g.fill_vocab_mask(mask, 0)
        masked = logits.clone()
        type(g).apply_vocab_mask(masked, mask)
        allowed = _allowed(mask, 0, VOCAB)
        assert allowed[t]
        assert torch.equal(masked[0, allowed], logits[0, allowed])
        assert torch.isneginf(masked[0, ~allowed]).all()
        constrained.append(int(masked.argmax()))
        assert g.accept_token(constrained[-1])
    assert constrained == unconstrained == target
    assert g.is_terminated()


def test_padded_vocab_is_masked_and_free_rows_untouched(tok):
    padded = 49152 + 128  # the logits are wider than the tokenizer's vocabulary
    b = XGrammarBackend(tok, padded, compile_threads=2)
    g = b.compile("json", ANY_JSON_OBJECT)
    logits = torch.randn(3, padded)
    before = logits.clone()
    mask = g.allocate_vocab_mask(padded, 3, "cpu")
    g.fill_vocab_mask(mask, 1)  # rows 0 and 2 are unconstrained requests
    type(g).apply_vocab_mask(logits, mask)
    assert torch.equal(logits[0], before[0]) and torch.equal(logits[2], before[2])
    assert torch.isneginf(logits[1, len(tok) :]).all()
    assert torch.isfinite(logits[1]).sum() >= 1
    with pytest.raises(ValueError):
        g.allocate_vocab_mask(VOCAB, 1, "cpu")  # not the width the backend was built for
    with pytest.raises(ValueError):
        type(g).apply_vocab_mask(torch.zeros(1, padded + 64), mask[:1])


def test_accept_reject_terminate_and_copy(tok, backend):
    g = backend.compile("regex", "ab")
    stop = backend.stop_token_ids[0]
    assert not g.accept_token(tok.encode("x", add_special_tokens=False)[0])
    assert not g.accept_token(VOCAB + 5) and not g.accept_token(-1)
    fresh = g.copy()
    for t in tok.encode("ab", add_special_tokens=False):
        assert g.accept_token(t)
    assert not g.is_terminated()
    assert g.accept_token(stop) and g.is_terminated()
    assert not g.accept_token(5)
    # After termination the overlap loop may still ask for a mask: only stop tokens are allowed.
    mask = g.allocate_vocab_mask(VOCAB, 2, "cpu")
    g.fill_vocab_mask(mask, 0)
    assert _allowed(mask, 0, VOCAB).nonzero().flatten().tolist() == sorted(backend.stop_token_ids)
    # A copy starts from the initial state, independent of the original's progress.
    assert not fresh.is_terminated()
    assert all(fresh.accept_token(t) for t in tok.encode("ab", add_special_tokens=False))


def test_structural_tag_and_any_json(tok, backend):
    legacy = {
        "type": "structural_tag",
        "triggers": ["<tool="],
        "structures": [
            {
                "begin": "<tool=get_weather>",
                "end": "</tool>",
                "schema": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            }
        ],
    }
    g = backend.compile("structural_tag", json.dumps(legacy))
    text = 'Let me check. <tool=get_weather>{"city": "Paris"}</tool>'
    assert all(g.accept_token(t) for t in tok.encode(text, add_special_tokens=False))
    g_bad = backend.compile("structural_tag", json.dumps(legacy))
    bad = '<tool=get_weather>{"town": "Paris"}'
    assert not all(g_bad.accept_token(t) for t in tok.encode(bad, add_special_tokens=False))
    any_json = backend.compile("json", ANY_JSON)
    assert all(
        any_json.accept_token(t) for t in tok.encode('[1, {"a": null}]', add_special_tokens=False)
    )


@pytest.mark.parametrize(
    "key_type,key,fragment",
    [
        ("json", '{"type": "objectx"}', 'Unsupported type "objectx"'),
        ("json", "{not json", "Failed to parse JSON"),
        ("regex", "(abc", "parenthesis is not closed"),
        ("ebnf", "root ::= missing", 'Rule "missing" is not defined'),
        ("structural_tag", "{}", "format"),
        ("xml", "<a/>", "unknown grammar type"),
    ],
)
def test_invalid_grammar_raises_with_xgrammar_message(backend, key_type, key, fragment):
    with pytest.raises(GrammarCompileError) as info:
        backend.compile(key_type, key)
    assert fragment in str(info.value)
    assert not re.match(r"^\[\d\d:", info.value.detail), "log prefix must be stripped"
    again = pickle.loads(pickle.dumps(info.value))  # errors may cross process boundaries
    assert str(again) == str(info.value)


# ---------------------------------------------------------------------------- manager
class CountingBackend(BaseGrammarBackend):
    """Wraps a backend; counts compiles and can hold them until released."""

    def __init__(self, inner: BaseGrammarBackend, hold: bool = False):
        self.inner = inner
        self.calls: Dict[Tuple[str, str], int] = {}
        self.release = threading.Event()
        if not hold:
            self.release.set()

    def compile(self, key_type: str, key_string: str) -> BaseGrammarObject:
        self.calls[(key_type, key_string)] = self.calls.get((key_type, key_string), 0) + 1
        assert self.release.wait(300.0)
        return self.inner.compile(key_type, key_string)


def _poll_until(manager: GrammarManager, n: int, timeout: float = 300.0):
    ready, failed = [], []
    deadline = time.monotonic() + timeout
    while len(ready) + len(failed) < n and time.monotonic() < deadline:
        r, f = manager.poll_ready()
        ready += r
        failed += f
        time.sleep(0.002)
    return ready, failed


def test_manager_cache_shares_compiled_grammar(backend):
    counting = CountingBackend(backend)
    m = GrammarManager(counting, num_threads=2)
    schema = json.dumps(PERSON)
    reqs = [_req(f"r{i}", json_schema=schema) for i in range(3)]
    assert all(m.submit(r) for r in reqs)
    assert not m.submit(_req("free"))  # no grammar: not queued
    ready, failed = _poll_until(m, 3)
    assert [r.rid for r in ready] == ["r0", "r1", "r2"] and failed == []
    assert counting.calls == {("json", schema): 1}
    template = m.cached_grammar("json", schema)
    assert template is not None and m.cached_grammar("json", schema) is template
    grammars = [r.grammar for r in ready]
    assert len({id(g) for g in grammars} | {id(template)}) == 4  # every request has its own matcher
    assert all(g.compiled_grammar is template.compiled_grammar for g in grammars)
    # A later request with the same key is a cache hit, and validate() uses the same cache.
    assert m.validate("json", schema) is None
    m.submit(_req("r3", json_schema=schema))
    ready, _ = _poll_until(m, 1)
    assert [r.rid for r in ready] == ["r3"] and counting.calls == {("json", schema): 1}
    m.shutdown()


def test_manager_failed_compile_and_validate(backend):
    counting = CountingBackend(backend)
    m = GrammarManager(counting, num_threads=2)
    msg = m.validate("regex", "(abc")
    assert msg is not None and "parenthesis is not closed" in msg
    assert m.validate("regex", IP_RE) is None
    m.submit(_req("bad", regex="(abc"))
    m.submit(_req("good", regex=IP_RE))
    ready, failed = _poll_until(m, 2)
    assert [r.rid for r in ready] == ["good"] and ready[0].grammar is not None
    assert [(r.rid, text) for r, text in failed] == [("bad", msg)]
    assert counting.calls == {("regex", "(abc"): 1, ("regex", IP_RE): 1}  # failures are cached too
    m.shutdown()


def test_manager_abort_waiting_request_and_poll_never_blocks(backend):
    held = CountingBackend(backend, hold=True)
    m = GrammarManager(held, num_threads=2)
    m.submit(_req("a", regex=PHONE_RE))
    m.submit(_req("b", regex=PHONE_RE))
    # The backend holds every compile until released below, so a poll that waited would never return.
    assert m.poll_ready() == ([], [])
    assert m.abort("a") and not m.abort("nobody")
    ready, failed = m.poll_ready()
    assert ready == [] and [(r.rid, text) for r, text in failed] == [("a", ABORTED_MESSAGE)]
    assert m.num_waiting() == 1
    held.release.set()
    ready, failed = _poll_until(m, 1)
    assert [r.rid for r in ready] == ["b"] and failed == []
    m.shutdown()


def test_manager_tp_agreement_and_timeout(backend):
    held = CountingBackend(backend, hold=True)
    m = GrammarManager(held, num_threads=2)
    m.submit(_req("x", regex=DATE_RE))
    assert m.ready_rids() == set()
    # A peer may claim a rid is ready; this rank still holds it until it is ready here too.
    assert m.pop_ready({"x"}) == ([], [])
    held.release.set()
    m.submit(_req("y", regex=DATE_RE))
    deadline = time.monotonic() + 300
    while m.ready_rids() != {"x", "y"} and time.monotonic() < deadline:
        time.sleep(0.002)
    assert m.ready_rids() == {"x", "y"}
    ready, _ = m.pop_ready({"y"})  # the intersection over ranks decides, not the local view
    assert [r.rid for r in ready] == ["y"] and m.ready_rids() == {"x"}
    m.shutdown()

    slow = CountingBackend(backend, hold=True)
    m = GrammarManager(slow, num_threads=1, timeout_s=0.05)
    m.submit(_req("t", ebnf='root ::= "a"'))
    time.sleep(0.1)
    ready, failed = m.poll_ready()
    assert ready == [] and failed[0][0].rid == "t" and "timed out" in failed[0][1]
    slow.release.set()
    m.shutdown()
