"""EAGLE / EAGLE-3 draft heads from random checkpoints in the published layouts.

EAGLE's layer is a Llama decoder layer without its input norm, so HF transformers'
LlamaDecoderLayer is the reference; EAGLE-3's layer (2H-wide attention input, the feature as
residual, its own norm and reduced vocabulary) is checked against a reference written here from
the layout, and both are checked for causal consistency (one position at a time with the cache ==
all positions at once)."""

from __future__ import annotations

import json

import pytest
import torch
from model_fixtures import write_eagle_head
from safetensors.torch import save_file

from sglang.srt.speculative.eagle_head import EAGLE, EAGLE3, load_eagle_head
from sglang.srt.speculative.eagle_kv import EagleKV

H, HEADS, KV, D, INTER, VOCAB, LAYERS = 64, 4, 2, 16, 96, 300, 8
DRAFT_VOCAB = 120


def _config(**extra) -> dict:
    return dict(
        architectures=["LlamaForCausalLM"],
        hidden_size=H,
        num_attention_heads=HEADS,
        num_key_value_heads=KV,
        head_dim=D,
        intermediate_size=INTER,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        max_position_embeddings=512,
        vocab_size=VOCAB,
        **extra,
    )


def _write_eagle(path, g) -> dict:
    return write_eagle_head(str(path), _config(), EAGLE, g)


def _write_eagle3(path, g) -> dict:
    return write_eagle_head(str(path), _config(), EAGLE3, g, DRAFT_VOCAB, [1, 3, 5])


def _hf_layer(state: dict, prefix: str):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    cfg = LlamaConfig(**_config())
    cfg._attn_implementation = "sdpa"
    layer = LlamaDecoderLayer(cfg, layer_idx=0)
    missing, unexpected = layer.load_state_dict(
        {k[len(prefix) + 1 :]: v for k, v in state.items() if k.startswith(prefix)}, strict=False
    )
    assert missing == ["input_layernorm.weight"] and not unexpected
    layer.input_layernorm = torch.nn.Identity()  # EAGLE's first layer has none
    return layer.eval(), LlamaRotaryEmbedding(cfg)


def test_eagle_head_matches_hf_llama_layer(tmp_path) -> None:
    g = torch.Generator().manual_seed(0)
    state = _write_eagle(tmp_path, g)
    embed, lm_head = torch.randn(VOCAB, H, generator=g), torch.randn(VOCAB, H, generator=g)
    head = load_eagle_head(str(tmp_path), LAYERS, embed, lm_head)
    assert head.c.variant == EAGLE and head.c.fc_bias
    t = 7
    tokens = torch.randint(0, VOCAB, (t,), generator=g)
    feature = torch.randn(t, H, generator=g)
    pos = torch.arange(t)
    with torch.no_grad():
        hidden, logits = head.step(tokens, feature, pos, EagleKV())
        layer, rope = _hf_layer(state, "layers.0")
        x = torch.cat([embed[tokens], feature], -1) @ state["fc.weight"].T + state["fc.bias"]
        ref = layer(x[None], position_embeddings=rope(x[None], pos[None]), position_ids=pos[None])
        ref = ref[0] if isinstance(ref, tuple) else ref
    assert torch.allclose(hidden, ref[0], atol=1e-5, rtol=1e-4)
    assert torch.allclose(logits, hidden @ lm_head.T, atol=1e-5)


def _eagle3_reference(state: dict, embed, tokens, feature, pos, eps=1e-5):
    """EAGLE-3's layer written out from the layout, full causal attention, fp32."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    m = {k[len("midlayer.") :]: v for k, v in state.items() if k.startswith("midlayer.")}
    t = tokens.shape[0]
    x = torch.cat(
        [rms(embed[tokens], m["input_layernorm.weight"]), rms(feature, m["hidden_norm.weight"])], -1
    )
    q = (x @ m["self_attn.q_proj.weight"].T).view(t, HEADS, D).transpose(0, 1)
    k = (x @ m["self_attn.k_proj.weight"].T).view(t, KV, D).transpose(0, 1)
    v = (x @ m["self_attn.v_proj.weight"].T).view(t, KV, D).transpose(0, 1)
    cos, sin = LlamaRotaryEmbedding(LlamaConfig(**_config()))(x[None], pos[None])
    q, k = apply_rotary_pos_emb(q[None], k[None], cos, sin)
    k, v = k[0].repeat_interleave(HEADS // KV, 0), v.repeat_interleave(HEADS // KV, 0)
    s = (q[0] @ k.transpose(1, 2)) / D**0.5
    s = s.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf"))
    o = (s.softmax(-1) @ v).transpose(0, 1).reshape(t, -1) @ m["self_attn.o_proj.weight"].T
    h = feature + o
    y = rms(h, m["post_attention_layernorm.weight"])
    mlp = torch.nn.functional.silu(y @ m["mlp.gate_proj.weight"].T) * (
        y @ m["mlp.up_proj.weight"].T
    )
    h = h + mlp @ m["mlp.down_proj.weight"].T
    return h, rms(h, state["norm.weight"]) @ state["lm_head.weight"].T


def test_eagle3_head_matches_reference_and_maps_its_vocabulary(tmp_path) -> None:
    g = torch.Generator().manual_seed(1)
    state = _write_eagle3(tmp_path, g)
    embed = torch.randn(VOCAB, H, generator=g)
    head = load_eagle_head(str(tmp_path), LAYERS, embed)
    assert head.c.variant == EAGLE3 and head.c.aux_layers == [1, 3, 5]
    t = 6
    aux = [torch.randn(t, H, generator=g) for _ in range(3)]
    feature = head.first_feature(torch.cat(aux, -1))
    assert torch.allclose(feature, torch.cat(aux, -1) @ state["fc.weight"].T, atol=1e-6)
    tokens = torch.randint(0, VOCAB, (t,), generator=g)
    pos = torch.arange(10, 10 + t)
    with torch.no_grad():
        hidden, logits = head.step(tokens, feature, pos, EagleKV())
    ref_h, ref_draft_logits = _eagle3_reference(state, embed, tokens, feature, pos)
    assert torch.allclose(hidden, ref_h, atol=1e-5, rtol=1e-4)
    # Draft-vocabulary logits land on their target ids; every other target id is -inf.
    target_ids = torch.arange(DRAFT_VOCAB) + state["d2t"]
    assert torch.allclose(logits[:, target_ids], ref_draft_logits, atol=1e-5, rtol=1e-4)
    assert int(torch.isfinite(logits).sum()) == t * DRAFT_VOCAB
    assert torch.equal(torch.isfinite(logits[0]), state["t2d"])
    # The default aux layers (config without eagle_config): low, middle, high.
    cfg = json.loads((tmp_path / "config.json").read_text())
    del cfg["eagle_config"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert load_eagle_head(str(tmp_path), 32, embed).c.aux_layers == [1, 15, 28]


@pytest.mark.parametrize("variant", [EAGLE, EAGLE3])
def test_eagle_head_step_by_step_equals_all_at_once(tmp_path, variant) -> None:
    """Drafting one position at a time with the KV cache gives what the whole sequence gives."""
    g = torch.Generator().manual_seed(2)
    (_write_eagle if variant == EAGLE else _write_eagle3)(tmp_path, g)
    embed, lm_head = torch.randn(VOCAB, H, generator=g), torch.randn(VOCAB, H, generator=g)
    head = load_eagle_head(str(tmp_path), LAYERS, embed, lm_head)
    t = 5
    tokens = torch.randint(0, VOCAB, (t,), generator=g)
    feature = torch.randn(t, H, generator=g)
    with torch.no_grad():
        full_h, full_l = head.step(tokens, feature, torch.arange(t), EagleKV())
        kv = EagleKV()
        head.step(tokens[:2], feature[:2], torch.arange(2), kv)  # a prefix first, then one by one
        parts = [
            head.step(tokens[i : i + 1], feature[i : i + 1], torch.tensor([i]), kv)
            for i in range(2, t)
        ]
    assert torch.allclose(torch.cat([h for h, _ in parts]), full_h[2:], atol=1e-5, rtol=1e-4)
    step_logits = torch.cat([lg for _, lg in parts])
    finite = full_l[2:].isfinite()
    assert torch.equal(step_logits.isfinite(), finite)
    assert torch.allclose(step_logits[finite], full_l[2:][finite], atol=1e-4, rtol=1e-4)
    assert kv.k.shape == (t, KV, D)


@pytest.mark.parametrize("variant", [EAGLE, EAGLE3])
def test_step_rows_equals_each_request_stepped_alone(tmp_path, variant) -> None:
    """One batched step over requests with different cache lengths and new-row counts (a chunk of
    3, a single draft, a first step on an empty cache) gives each request what its own step gives,
    and leaves each cache as its own step does."""
    g = torch.Generator().manual_seed(4)
    (_write_eagle if variant == EAGLE else _write_eagle3)(tmp_path, g)
    embed, lm_head = torch.randn(VOCAB, H, generator=g), torch.randn(VOCAB, H, generator=g)
    head = load_eagle_head(str(tmp_path), LAYERS, embed, lm_head)
    cached, new = [7, 2, 0], [3, 1, 2]
    seqs = [torch.randint(0, VOCAB, (c + n,), generator=g) for c, n in zip(cached, new)]
    feats = [torch.randn(c + n, H, generator=g) for c, n in zip(cached, new)]
    alone, batched = [EagleKV() for _ in seqs], [EagleKV() for _ in seqs]
    refs = []
    with torch.no_grad():
        for kvs in (alone, batched):
            for kv, s, f, c in zip(kvs, seqs, feats, cached):
                if c:
                    head.step(s[:c], f[:c], torch.arange(c), kv)
        for kv, s, f, c in zip(alone, seqs, feats, cached):
            refs.append(head.step(s[c:], f[c:], torch.arange(c, len(s)), kv))
        h, logits = head.step_rows(
            torch.cat([s[c:] for s, c in zip(seqs, cached)]),
            torch.cat([f[c:] for f, c in zip(feats, cached)]),
            torch.cat([torch.arange(c, len(s)) for s, c in zip(seqs, cached)]),
            new,
            batched,
        )
    ref_h = torch.cat([r[0] for r in refs])
    ref_l = torch.cat([r[1] for r in refs])
    assert torch.allclose(h, ref_h, atol=1e-5, rtol=1e-4)
    finite = ref_l.isfinite()
    assert torch.equal(logits.isfinite(), finite)
    assert torch.allclose(logits[finite], ref_l[finite], atol=1e-4, rtol=1e-4)
    for a, b in zip(alone, batched):
        assert a.n == b.n
        assert torch.allclose(a.k, b.k, atol=1e-5) and torch.allclose(a.v, b.v, atol=1e-5)


def test_step_rows_with_tree_masks_equals_each_request_stepped_alone(tmp_path) -> None:
    """Tree frontiers of several requests in one batched step: each request's rows see its cache
    and only the tree entries its mask names, as its own masked step does (a request without a
    tree node among them is causal)."""
    g = torch.Generator().manual_seed(5)
    _write_eagle3(tmp_path, g)
    embed, lm_head = torch.randn(VOCAB, H, generator=g), torch.randn(VOCAB, H, generator=g)
    head = load_eagle_head(str(tmp_path), LAYERS, embed, lm_head)
    cached, new = [6, 3, 4], [3, 2, 1]
    # Request 0: three frontier nodes over two earlier tree entries; request 1: two nodes, one
    # earlier entry; request 2: a chain row (its mask is the causal one).
    masks = [
        torch.tensor([[1, 0, 1, 0, 0], [1, 0, 0, 1, 0], [0, 1, 0, 0, 1]], dtype=torch.bool),
        torch.tensor([[1, 1, 0], [1, 0, 1]], dtype=torch.bool),
        torch.tensor([[1]], dtype=torch.bool),
    ]
    seqs = [torch.randint(0, VOCAB, (c + n,), generator=g) for c, n in zip(cached, new)]
    feats = [torch.randn(c + n, H, generator=g) for c, n in zip(cached, new)]
    alone, batched = [EagleKV() for _ in seqs], [EagleKV() for _ in seqs]
    with torch.no_grad():
        for kvs in (alone, batched):
            for kv, s, f, c in zip(kvs, seqs, feats, cached):
                head.step(s[:c], f[:c], torch.arange(c), kv)
        refs = [
            head.step(s[c:], f[c:], torch.full((len(s) - c,), c), kv, tree_mask=m)
            for kv, s, f, c, m in zip(alone, seqs, feats, cached, masks)
        ]
        h, logits = head.step_rows(
            torch.cat([s[c:] for s, c in zip(seqs, cached)]),
            torch.cat([f[c:] for f, c in zip(feats, cached)]),
            torch.cat([torch.full((len(s) - c,), c) for s, c in zip(seqs, cached)]),
            new,
            batched,
            tree_masks=masks,
        )
    assert torch.allclose(h, torch.cat([r[0] for r in refs]), atol=1e-5, rtol=1e-4)
    ref_l = torch.cat([r[1] for r in refs])
    finite = ref_l.isfinite()
    assert torch.equal(logits.isfinite(), finite)
    assert torch.allclose(logits[finite], ref_l[finite], atol=1e-4, rtol=1e-4)
    # The masks change the answer: the same rows stepped causally differ.
    causal = EagleKV()
    head.step(seqs[0][: cached[0]], feats[0][: cached[0]], torch.arange(cached[0]), causal)
    plain, _ = head.step(seqs[0][cached[0] :], feats[0][cached[0] :], torch.full((3,), 6), causal)
    assert not torch.allclose(plain, refs[0][0], atol=1e-3)


@pytest.mark.parametrize(
    "cached,steps", [([5, 2, 8], ([1, 1, 1], [1, 0, 1])), ([5], ([1], [1]))], ids=["3", "1"]
)
def test_round_cache_draft_steps_equal_each_request_stepped_alone(tmp_path, cached, steps) -> None:
    """A draft round over the padded cache: two feedback steps (with 3 requests the second has
    request 1 no longer drafting: 0 rows) give each live request what its own steps give; the
    requests' own caches keep none of the round's entries (they are dropped after verify). One
    request's round works in its own buffer."""
    g = torch.Generator().manual_seed(6)
    _write_eagle(tmp_path, g)
    embed, lm_head = torch.randn(VOCAB, H, generator=g), torch.randn(VOCAB, H, generator=g)
    head = load_eagle_head(str(tmp_path), LAYERS, embed, lm_head)
    toks = torch.randint(0, VOCAB, (len(cached), 10), generator=g)
    feats = torch.randn(len(cached), 10, H, generator=g)
    own, alone = [EagleKV() for _ in cached], [EagleKV() for _ in cached]
    with torch.no_grad():
        for kvs in (own, alone):
            for i, (kv, c) in enumerate(zip(kvs, cached)):
                head.step(toks[i, :c], feats[i, :c], torch.arange(c), kv)
        cache = head.new_round(own, room=2)
        got, want = [], []
        for lens in steps:
            rows = [i for i, n in enumerate(lens) if n]
            at = [cache.ends[i] for i in rows]
            h, lg = head.step_rows(
                torch.stack([toks[i, a] for i, a in zip(rows, at)]),
                torch.stack([feats[i, a] for i, a in zip(rows, at)]),
                torch.tensor(at),
                lens,
                cache,
            )
            got.append(h)
            want.append(
                torch.cat(
                    [
                        head.step(
                            toks[i, a : a + 1], feats[i, a : a + 1], torch.tensor([a]), alone[i]
                        )[0]
                        for i, a in zip(rows, at)
                    ]
                )
            )
    for g_h, w_h in zip(got, want):
        assert torch.allclose(g_h, w_h, atol=1e-5, rtol=1e-4)
    assert cache.ends == [c + sum(step[i] for step in steps) for i, c in enumerate(cached)]
    assert [kv.n for kv in own] == cached
    assert (cache.own is own[0]) == (len(cached) == 1)


def test_kv_cache_grows_in_place_and_truncates() -> None:
    """Appends past the buffer keep every earlier entry; a truncation is only a length, and the
    next append overwrites the dropped entries."""
    kv = EagleKV()
    rows = [torch.full((n, KV, D), float(i)) for i, n in enumerate([10, 9, 1, 20])]
    for r in rows:
        kv.append(r, -r)
    assert kv.n == 40 and torch.equal(kv.k, torch.cat(rows)) and torch.equal(kv.v, -kv.k)
    kv.truncate(12)
    kv.append(torch.full((2, KV, D), 7.0), torch.zeros(2, KV, D))
    assert kv.n == 14 and torch.equal(kv.k[12:], torch.full((2, KV, D), 7.0))
    assert torch.equal(kv.k[:12], torch.cat(rows)[:12])


def test_eagle_head_layout_errors_name_the_tensor(tmp_path) -> None:
    g = torch.Generator().manual_seed(3)
    state = _write_eagle3(tmp_path, g)
    embed = torch.randn(VOCAB, H)
    bad = dict(state)
    del bad["midlayer.hidden_norm.weight"]
    save_file(bad, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match="midlayer.hidden_norm.weight"):
        load_eagle_head(str(tmp_path), LAYERS, embed)
    bad = dict(state, **{"fc.weight": torch.zeros(H, 2 * H)})
    save_file(bad, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match=r"fc.weight has shape \(64, 128\), expected \(64, 192\)"):
        load_eagle_head(str(tmp_path), LAYERS, embed)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError):
        load_eagle_head(str(tmp_path), LAYERS, embed)
