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

The embedding (and EAGLE-1's LM head) are the target's unless the checkpoint has its own. `step`
runs one request over its contiguous draft-layer KV (the reference); `step_rows` runs a whole batch
of requests over a draft round's padded cache (eagle_kv.py), which eagle_proposer.py drives from
the verify loop. eagle_model.py runs the same layer over a paged KV pool at the target's slot
numbers, as a one-layer model whose decode passes replay CUDA graphs.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from sglang.srt.layers.rotary_embedding import RotaryEmbedding
from sglang.srt.speculative.eagle_kv import EagleKV, RoundKV

# Not cuDNN's fused attention: it builds an execution plan for every new shape (about 12 ms of host
# time each), and a draft round's cache grows with every pass, so shapes never repeat.
SDPA_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]

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
        h = self.layer(tokens, feature, lambda x: self._attention(x, positions, kv, tree_mask))
        return h, self.logits(h)

    def step_rows(
        self,
        tokens: torch.Tensor,
        feature: torch.Tensor,
        positions: torch.Tensor,
        lens: List[int],
        cache: Union[RoundKV, List[EagleKV]],
        tree_masks: Optional[List[Optional[torch.Tensor]]] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """`step` for several requests in one pass: request i owns the next lens[i] rows (0: none)
        of tokens / feature / positions and appends them to its cache (a draft round's RoundKV,
        or the requests' own caches, which keep them); tree_masks[i]: its rows' tree_mask, as
        `step`. The matmuls run once over all rows."""
        if not isinstance(cache, RoundKV):
            kvs, cache = cache, self.new_round(cache, max(lens))
            out = self.step_rows(tokens, feature, positions, lens, cache, tree_masks)
            cache.commit(kvs, lens)
            return out
        h = self.layer(
            tokens, feature, lambda x: self._attention_round(x, positions, lens, cache, tree_masks)
        )
        return h, self.logits(h)

    def new_round(self, kvs: List[EagleKV], room: int) -> RoundKV:
        """The requests' caches padded for a draft round of up to `room` more entries each."""
        c = self.c
        like = self.fc_w.new_empty((0, c.kv_heads, c.head_dim))
        return RoundKV.of(kvs, room, like)

    def layer(self, tokens: torch.Tensor, feature: torch.Tensor, attention) -> torch.Tensor:
        """The head's output feature [T, H] for tokens [T] and input features [T, H]; attention
        maps the attention input [T, H or 2H] to the o_proj output [T, H] (the caller's cache)."""
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
        return h + self._mlp(_rms(h, w["post_attention_layernorm.weight"], c.eps))

    def qkv(self, x: torch.Tensor, positions: torch.Tensor):
        """q [T, heads, d], k and v [T, kv_heads, d] of the attention input, rotary applied."""
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
        with sdpa_kernel(SDPA_BACKENDS):
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
        q, k, v = self.qkv(x, positions)
        keys, vals = kv.append(k, v)
        return self._attend_one(q, keys, vals, tree_mask)

    def _attend_one(self, q, keys, vals, tree_mask: Optional[torch.Tensor]) -> torch.Tensor:
        """One request's new rows q [t, heads, d], the last t of its entries keys / vals [n, ...]."""
        t, n = q.shape[0], keys.shape[0]
        # Causal within the new positions; every cached position is earlier than all of them.
        mask = torch.ones((t, n), dtype=torch.bool, device=q.device).tril(n - t)
        if tree_mask is not None:
            mask[:, n - tree_mask.shape[1] :] = tree_mask.to(q.device)
        out = self._sdpa(q.transpose(0, 1), keys.transpose(0, 1), vals.transpose(0, 1), mask)
        return self.out_proj(out.transpose(0, 1).reshape(t, -1))

    def _attention_round(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        lens: List[int],
        cache: RoundKV,
        tree_masks: Optional[List[Optional[torch.Tensor]]],
    ) -> torch.Tensor:
        """Each request's new rows over its padded cache: causal, or under its tree mask for the
        tree's entries; padding rows see entry 0 only (their output is dropped) so no softmax row
        is empty."""
        dev, b = x.device, len(lens)
        q, k, v = self.qkv(x, positions)
        if cache.own is not None:  # one request: its own contiguous buffer, no padding
            keys, vals = cache.append_own(k, v)
            return self._attend_one(q, keys, vals, tree_masks[0] if tree_masks else None)
        at = cache.append(k, v, lens)
        t_max, n_max = max(lens), cache.k.shape[1]
        widths = [0 if m is None else m.shape[1] for m in tree_masks or [None] * b]
        meta = torch.tensor([cache.ends, lens, widths]).to(dev)
        ends, lens_t, width = meta[0], meta[1], meta[2]
        t = torch.arange(t_max, device=dev)[None]
        limit = torch.where(t < lens_t[:, None], (ends - lens_t)[:, None] + t, 0)  # [B, t_max]
        cols = torch.arange(n_max, device=dev)
        mask = cols[None, None] <= limit[:, :, None]
        if any(widths):
            mask = self._with_trees(mask, tree_masks, lens, widths, ends, width)
        qp = q.new_zeros((b, t_max, *q.shape[1:]))
        qp[at[0], at[2]] = q
        out = self._sdpa(
            qp.transpose(1, 2), cache.k.transpose(1, 2), cache.v.transpose(1, 2), mask[:, None]
        )
        out = out.transpose(1, 2)[at[0], at[2]]
        return self.out_proj(out.reshape(x.shape[0], -1))

    @staticmethod
    def _with_trees(mask, tree_masks, lens, widths, ends, width) -> torch.Tensor:
        """mask [B, t_max, n_max] with each tree's entries (request i's last widths[i]) seen as
        tree_masks[i] says: the masks go to the device as one right-aligned [B, t_max, w_max]."""
        b, t_max, n_max = mask.shape
        w_max = max(widths)
        pad = torch.zeros((b, t_max, w_max), dtype=torch.bool)
        for i, m in enumerate(tree_masks):
            if m is not None:
                pad[i, : lens[i], w_max - widths[i] :] = m
        pad = pad.to(mask.device)
        cols = torch.arange(n_max, device=mask.device)[None]
        in_tree = (cols >= (ends - width)[:, None]) & (cols < ends[:, None])  # [B, n_max]
        rel = (cols - (ends - w_max)[:, None]).clamp(0, w_max - 1)
        seen = pad.gather(2, rel[:, None, :].expand(b, t_max, n_max))
        return torch.where(in_tree[:, None, :], seen, mask)

    def _mlp(self, x: torch.Tensor) -> torch.Tensor:
        w = self.w
        g, u = F.linear(x, w["mlp.gate_proj.weight"]), F.linear(x, w["mlp.up_proj.weight"])
        return F.linear(F.silu(g) * u, w["mlp.down_proj.weight"])

    def out_proj(self, o: torch.Tensor) -> torch.Tensor:
        return F.linear(o, self.w["self_attn.o_proj.weight"])

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """Float logits over the target vocabulary [T, vocab] (-inf outside a draft vocabulary)."""
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
