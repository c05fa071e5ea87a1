"""EAGLE and EAGLE-3 draft heads: their published checkpoint layouts and one draft step.

A draft head is one decoder layer that reads the target's hidden states as well as tokens:

- EAGLE (EAGLE-1 / EAGLE-2 checkpoints, `layers.0.*`): the feature is the target's last hidden
  state (after its final norm). `fc` [H, 2H] (+ bias) maps concat(embed(token), feature) to H;
  the layer has no input norm; its output is the next step's feature and goes straight to the
  target's LM head.
- EAGLE-3 (`midlayer.*`): the first feature is `fc` [H, 3H] over three of the target's layer
  outputs (config `eagle_config.eagle_aux_hidden_state_layer_ids`, default low / middle / high).
  The layer's attention reads concat(input_norm(embed(token)), hidden_norm(feature)), so q / k / v
  are [*, 2H]; the residual is the feature. Logits come from the head's own `norm` and `lm_head`
  over a reduced draft vocabulary, mapped to target ids by `d2t` (target = draft + d2t[draft]).

The embedding (and EAGLE-1's LM head) are the target's unless the checkpoint has its own. The step
keeps each request's draft-layer KV contiguous and runs torch ops; `step_rows` runs one step for
a whole batch of requests (eagle_proposer.py drives it from the verify loop). A paged,
graph-captured version for the GPU is still to be built.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from sglang.srt.layers.rotary_embedding import RotaryEmbedding

EAGLE, EAGLE3 = "EAGLE", "EAGLE3"


@dataclass
class EagleHeadConfig:
    variant: str
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    eps: float
    rope_theta: float
    rope_scaling: Optional[dict]
    max_position: int
    vocab: int  # the target's
    draft_vocab: int
    fc_bias: bool
    aux_layers: List[int] = field(default_factory=list)  # EAGLE-3: target layer outputs fed to fc

    @classmethod
    def from_dir(
        cls,
        path: str,
        target_layers: int,
        state: Optional[Dict[str, torch.Tensor]],
        variant: Optional[str] = None,
    ) -> "EagleHeadConfig":
        """The head's config.json; the variant from the tensor names (or `variant`, for a config
        without weights)."""
        with open(os.path.join(path, "config.json")) as f:
            d = json.load(f)
        if variant is None:
            variant = EAGLE3 if any(k.startswith("midlayer.") for k in state) else EAGLE
        hidden, heads = d["hidden_size"], d["num_attention_heads"]
        aux = (d.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
        if variant == EAGLE3 and aux is None:
            # Low, middle, high; clamped into the target for targets of a few layers.
            top = target_layers - 1
            aux = [min(max(i, 0), top) for i in (1, target_layers // 2 - 1, target_layers - 4)]
        return cls(
            variant=variant,
            hidden=hidden,
            heads=heads,
            kv_heads=d.get("num_key_value_heads", heads),
            head_dim=d.get("head_dim") or hidden // heads,
            intermediate=d["intermediate_size"],
            eps=d.get("rms_norm_eps", 1e-6),
            rope_theta=float(d.get("rope_theta", 10000.0)),
            rope_scaling=d.get("rope_scaling"),
            max_position=d.get("max_position_embeddings", 8192),
            vocab=d["vocab_size"],
            draft_vocab=d.get("draft_vocab_size") or d["vocab_size"],
            fc_bias="fc.bias" in state if state is not None else variant == EAGLE,
            aux_layers=list(aux or []),
        )


def read_state(path: str) -> Dict[str, torch.Tensor]:
    """Every tensor of a draft-head folder (safetensors, else pytorch_model.bin)."""
    files = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
    if files:
        from safetensors.torch import load_file

        out: Dict[str, torch.Tensor] = {}
        for f in files:
            out.update(load_file(os.path.join(path, f)))
        return out
    bin_path = os.path.join(path, "pytorch_model.bin")
    if os.path.exists(bin_path):
        return torch.load(bin_path, map_location="cpu", weights_only=True)
    raise FileNotFoundError(f"{path}: no *.safetensors or pytorch_model.bin")


def _expected_shapes(c: EagleHeadConfig) -> Dict[str, Tuple[int, ...]]:
    eagle3 = c.variant == EAGLE3
    p = "midlayer" if eagle3 else "layers.0"
    attn_in = 2 * c.hidden if eagle3 else c.hidden
    q, kv = c.heads * c.head_dim, c.kv_heads * c.head_dim
    shapes = {
        f"{p}.self_attn.q_proj.weight": (q, attn_in),
        f"{p}.self_attn.k_proj.weight": (kv, attn_in),
        f"{p}.self_attn.v_proj.weight": (kv, attn_in),
        f"{p}.self_attn.o_proj.weight": (c.hidden, q),
        f"{p}.mlp.gate_proj.weight": (c.intermediate, c.hidden),
        f"{p}.mlp.up_proj.weight": (c.intermediate, c.hidden),
        f"{p}.mlp.down_proj.weight": (c.hidden, c.intermediate),
        f"{p}.post_attention_layernorm.weight": (c.hidden,),
        "fc.weight": (c.hidden, (3 if eagle3 else 2) * c.hidden),
    }
    if eagle3:
        shapes[f"{p}.input_layernorm.weight"] = (c.hidden,)
        shapes[f"{p}.hidden_norm.weight"] = (c.hidden,)
        shapes["norm.weight"] = (c.hidden,)
        shapes["lm_head.weight"] = (c.draft_vocab, c.hidden)
        if c.draft_vocab != c.vocab:
            shapes["d2t"] = (c.draft_vocab,)
    if c.fc_bias:
        shapes["fc.bias"] = (c.hidden,)
    return shapes


def check_state(c: EagleHeadConfig, state: Dict[str, torch.Tensor]) -> None:
    """Every tensor the layout needs, at its shape; a clear message naming the first that is not."""
    for name, shape in _expected_shapes(c).items():
        if name not in state:
            raise ValueError(f"{c.variant} draft head: missing tensor {name!r}")
        if tuple(state[name].shape) != shape:
            raise ValueError(
                f"{c.variant} draft head: {name} has shape {tuple(state[name].shape)}, "
                f"expected {shape} from its config"
            )


def random_state(c: EagleHeadConfig, seed: int = 0) -> Dict[str, torch.Tensor]:
    """Random tensors in the layout's shapes (`--load-format dummy`): norms of ones, weights of
    scale 0.02, an EAGLE-3 draft vocabulary of random target ids."""
    g = torch.Generator().manual_seed(seed)
    out: Dict[str, torch.Tensor] = {}
    for name, shape in _expected_shapes(c).items():
        if name == "d2t":
            keep = torch.sort(torch.randperm(c.vocab, generator=g)[: c.draft_vocab]).values
            out[name] = keep - torch.arange(c.draft_vocab)
        elif name.endswith("norm.weight"):
            out[name] = torch.ones(shape)
        else:
            out[name] = torch.randn(shape, generator=g) * 0.02
    return out


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


@dataclass
class EagleKV:
    """One request's draft-layer K / V so far ([n, kv_heads, head_dim] each), in buffers that
    grow by doubling so a draft step appends in place instead of copying the whole cache."""

    k_buf: Optional[torch.Tensor] = None
    v_buf: Optional[torch.Tensor] = None
    n: int = 0

    @property
    def k(self) -> Optional[torch.Tensor]:
        return None if self.k_buf is None else self.k_buf[: self.n]

    @property
    def v(self) -> Optional[torch.Tensor]:
        return None if self.v_buf is None else self.v_buf[: self.n]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        end = self.n + k.shape[0]
        if self.k_buf is None or self.k_buf.shape[0] < end:
            cap = max(end, 2 * (0 if self.k_buf is None else self.k_buf.shape[0]), 16)
            self.k_buf, self.v_buf = (
                self._grown(self.k_buf, k, cap),
                self._grown(self.v_buf, v, cap),
            )
        self.k_buf[self.n : end] = k
        self.v_buf[self.n : end] = v
        self.n = end
        return self.k, self.v

    def truncate(self, n: int) -> None:
        self.n = min(self.n, max(n, 0))

    def _grown(self, old: Optional[torch.Tensor], like: torch.Tensor, cap: int) -> torch.Tensor:
        buf = like.new_empty((cap, *like.shape[1:]))
        if old is not None:
            buf[: self.n] = old[: self.n]
        return buf


class EagleHead(nn.Module):
    def __init__(
        self,
        c: EagleHeadConfig,
        state: Dict[str, torch.Tensor],
        target_embed: torch.Tensor,
        target_lm_head: Optional[torch.Tensor] = None,
    ):
        super().__init__()
        check_state(c, state)
        self.c = c
        p = "midlayer." if c.variant == EAGLE3 else "layers.0."
        self.w = {k[len(p) :]: v for k, v in state.items() if k.startswith(p)}
        self.fc_w, self.fc_b = state["fc.weight"], state.get("fc.bias")
        self.embed = state.get("embed_tokens.weight", target_embed)
        if c.variant == EAGLE3:
            self.norm, self.lm_head = state["norm.weight"], state["lm_head.weight"]
            d2t = state.get("d2t")
            self.draft_to_target = (
                torch.arange(c.draft_vocab, dtype=torch.int64) + d2t.to(torch.int64)
                if d2t is not None
                else None
            )
        else:
            self.norm = None
            self.lm_head = state.get("lm_head.weight", target_lm_head)
            self.draft_to_target = None
        if self.lm_head is None:
            raise ValueError(
                "EAGLE draft head: no lm_head in the checkpoint and none from the target"
            )
        self.rope = RotaryEmbedding(c.head_dim, c.max_position, c.rope_theta, c.rope_scaling)

    def to_device(self, device) -> "EagleHead":
        """Move every weight (held as plain tensors, shared with the target where borrowed)."""
        self.w = {k: v.to(device) for k, v in self.w.items()}
        self.fc_w = self.fc_w.to(device)
        self.fc_b = None if self.fc_b is None else self.fc_b.to(device)
        self.embed, self.lm_head = self.embed.to(device), self.lm_head.to(device)
        if self.norm is not None:
            self.norm = self.norm.to(device)
        if self.draft_to_target is not None:
            self.draft_to_target = self.draft_to_target.to(device)
        self.rope = self.rope.to(device)
        return self

    def first_feature(self, target_hidden: torch.Tensor) -> torch.Tensor:
        """The feature of a position from the target: its last hidden state [T, H] (EAGLE), or fc
        over its aux layers' outputs, concatenated in aux_layers order [T, 3H] (EAGLE-3)."""
        if self.c.variant == EAGLE:
            return target_hidden
        return F.linear(target_hidden, self.fc_w, self.fc_b)

    def step(
        self,
        tokens: torch.Tensor,
        feature: torch.Tensor,
        positions: torch.Tensor,
        kv: EagleKV,
        tree_mask: Optional[torch.Tensor] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """One request's next positions: tokens [T], feature [T, H] (each position's token is the
        one that follows its feature's position), positions [T] -> (next features [T, H], logits
        over the target vocabulary [T, vocab]; tokens outside a draft vocabulary get -inf).
        tree_mask [T, M] (M >= T): which of the cache's last M entries (these T included) each
        new position sees, for tree nodes; the entries before them are seen by all (default:
        causal over the new positions)."""
        return self._layer(tokens, feature, lambda x: self._attention(x, positions, kv, tree_mask))

    def step_rows(
        self,
        tokens: torch.Tensor,
        feature: torch.Tensor,
        positions: torch.Tensor,
        lens: List[int],
        kvs: List[EagleKV],
        tree_masks: Optional[List[torch.Tensor]] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """`step` for several requests in one pass: request i owns the next lens[i] rows of tokens /
        feature / positions and extends kvs[i] (tree_masks[i]: its rows' tree_mask, as `step`);
        the matmuls run once over all rows."""
        if len(kvs) == 1:
            mask = None if tree_masks is None else tree_masks[0]
            return self.step(tokens, feature, positions, kvs[0], tree_mask=mask)
        return self._layer(
            tokens, feature, lambda x: self._attention_rows(x, positions, lens, kvs, tree_masks)
        )

    def _layer(self, tokens: torch.Tensor, feature: torch.Tensor, attention):
        c, w = self.c, self.w
        emb = F.embedding(tokens, self.embed)
        if c.variant == EAGLE:
            x = F.linear(torch.cat([emb, feature], dim=-1), self.fc_w, self.fc_b)
            residual, attn_in = x, x
        else:
            residual = feature
            attn_in = torch.cat(
                [
                    _rms(emb, w["input_layernorm.weight"], c.eps),
                    _rms(feature, w["hidden_norm.weight"], c.eps),
                ],
                dim=-1,
            )
        h = residual + attention(attn_in)
        h = h + self._mlp(_rms(h, w["post_attention_layernorm.weight"], c.eps))
        return h, self._logits(h)

    def _qkv(self, x: torch.Tensor, positions: torch.Tensor):
        c, w = self.c, self.w
        t = x.shape[0]
        q = F.linear(x, w["self_attn.q_proj.weight"])
        k = F.linear(x, w["self_attn.k_proj.weight"])
        v = F.linear(x, w["self_attn.v_proj.weight"])
        q, k = self.rope(positions, q, k)
        shape = (t, c.kv_heads, c.head_dim)
        return q.view(t, c.heads, c.head_dim), k.view(shape), v.view(shape)

    def _sdpa(self, q, keys, vals, mask) -> torch.Tensor:
        """q [..., heads, t, d] over keys / vals [..., kv_heads, n, d] under mask [..., t, n]."""
        return F.scaled_dot_product_attention(
            q,
            keys,
            vals,
            attn_mask=mask,
            scale=1.0 / math.sqrt(self.c.head_dim),
            enable_gqa=self.c.heads != self.c.kv_heads,
        )

    def _attention(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        kv: EagleKV,
        tree_mask: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        t = x.shape[0]
        q, k, v = self._qkv(x, positions)
        keys, vals = kv.append(k, v)
        n = keys.shape[0]
        # Causal within the new positions; every cached position is earlier than all of them.
        mask = torch.ones((t, n), dtype=torch.bool, device=x.device).tril(n - t)
        if tree_mask is not None:
            mask[:, n - tree_mask.shape[1] :] = tree_mask.to(x.device)
        out = self._sdpa(q.transpose(0, 1), keys.transpose(0, 1), vals.transpose(0, 1), mask)
        return F.linear(out.transpose(0, 1).reshape(t, -1), self.w["self_attn.o_proj.weight"])

    def _attention_rows(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        lens: List[int],
        kvs: List[EagleKV],
        tree_masks: Optional[List[torch.Tensor]] = None,
    ) -> torch.Tensor:
        """Causal attention of each request's new rows over its own cache, the requests padded to
        one [B, max rows] x [B, max cache] problem."""
        dev, b = x.device, len(lens)
        q, k, v = self._qkv(x, positions)
        starts = [0]
        for n_new in lens:
            starts.append(starts[-1] + n_new)
        ends = []
        for kv, s, e in zip(kvs, starts, starts[1:]):
            kv.append(k[s:e], v[s:e])
            ends.append(kv.n)
        t_max, n_max = max(lens), max(ends)
        keys = k.new_zeros((b, n_max, *k.shape[1:]))
        vals = v.new_zeros((b, n_max, *v.shape[1:]))
        for i, (kv, n) in enumerate(zip(kvs, ends)):
            keys[i, :n], vals[i, :n] = kv.k, kv.v
        row = torch.repeat_interleave(torch.arange(b), torch.tensor(lens))
        col = torch.arange(x.shape[0]) - torch.tensor(starts[:-1])[row]
        row, col = row.to(dev), col.to(dev)
        qp = q.new_zeros((b, t_max, *q.shape[1:]))
        qp[row, col] = q
        # Row t of request i sees cache entries [0, ends[i] - lens[i] + t]; padding rows see
        # entry 0 only (their output is dropped) so no softmax row is empty.
        ends_t = torch.tensor(ends, device=dev)
        lens_t = torch.tensor(lens, device=dev)
        limit = (ends_t - lens_t)[:, None] + torch.arange(t_max, device=dev)[None]
        limit = torch.where(torch.arange(t_max, device=dev)[None] < lens_t[:, None], limit, 0)
        mask = torch.arange(n_max, device=dev)[None, None] <= limit[:, :, None]
        for i, tree in enumerate(tree_masks or ()):
            # The causal limit already covers every entry before the tree's (tree width >= rows).
            mask[i, : lens[i], ends[i] - tree.shape[1] : ends[i]] = tree.to(dev)
        out = self._sdpa(
            qp.transpose(1, 2), keys.transpose(1, 2), vals.transpose(1, 2), mask[:, None]
        )
        out = out.transpose(1, 2)[row, col]
        return F.linear(out.reshape(x.shape[0], -1), self.w["self_attn.o_proj.weight"])

    def _mlp(self, x: torch.Tensor) -> torch.Tensor:
        w = self.w
        g, u = F.linear(x, w["mlp.gate_proj.weight"]), F.linear(x, w["mlp.up_proj.weight"])
        return F.linear(F.silu(g) * u, w["mlp.down_proj.weight"])

    def _logits(self, h: torch.Tensor) -> torch.Tensor:
        if self.norm is None:
            return F.linear(h, self.lm_head).float()
        draft = F.linear(_rms(h, self.norm, self.c.eps), self.lm_head).float()
        if self.draft_to_target is None:
            return draft
        out = torch.full((h.shape[0], self.c.vocab), float("-inf"), device=h.device)
        out[:, self.draft_to_target.to(h.device)] = draft
        return out


def load_eagle_head(
    path: str,
    target_layers: int,
    target_embed: torch.Tensor,
    target_lm_head: Optional[torch.Tensor] = None,
    dtype: Optional[torch.dtype] = None,
    dummy_variant: Optional[str] = None,
) -> EagleHead:
    """A draft-head folder (config.json + weights) -> EagleHead, its layout checked first. With
    dummy_variant, the folder needs only config.json and the weights are random (random_state)."""
    if dummy_variant is not None:
        cfg = EagleHeadConfig.from_dir(path, target_layers, None, dummy_variant)
        state = random_state(cfg)
    else:
        state = read_state(path)
        cfg = EagleHeadConfig.from_dir(path, target_layers, state)
    if dtype is not None:
        state = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in state.items()}
    return EagleHead(cfg, state, target_embed, target_lm_head)
