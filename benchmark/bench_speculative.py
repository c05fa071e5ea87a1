"""Time per output token against accept length: speculative verify passes vs plain decode steps.

The target runs in-process (the real scheduler, CUDA graphs, dummy weights of a real shape). The
draft is an oracle: it proposes the target's own greedy continuation (from a plain run of the same
prompts), each draft token kept with probability --accept (a wrong token otherwise, which ends the
accepted run), so the accept length is set by the benchmark and drafting costs nothing. The table
is the verify side of the trade: what a step with k drafts costs against a plain step, and the time
per output token that results at each acceptance.

--acceptance forced (default): the verify pass runs in full (forward, acceptance ops and their
host copy), then its verdict is replaced by the oracle's: the kept drafts are accepted and the
reference token after them is the bonus. With dummy weights the logits nearly tie, and the plain
step's one-row GEMV rounds differently from the verify pass's multi-row product, so judged by the
target the greedy paths part at the first near-tie and the oracle's continuation is then for the
wrong path (scaling the logits does not help: it scales the gaps and the rounding alike). Forced,
the accept length is the oracle's at every batch size and the tokens equal the plain run's.
--acceptance target: the target's own verdict (tokens identical where both paths round alike).

--draft-model-config: a real draft model (dummy weights) drafts every verify, chains or, with
--topk > 1, trees (STANDALONE), so each step pays the drafting it would pay in service; the drafts it
proposes are then swapped for the oracle's (the verify pass costs the same for any tokens) and the
verdicts forced, so the accept length is still --accept's. A tree's oracle is a chain as deep as
the draft's tree (--num-steps) plus wrong siblings of its first draft up to the node count.

    python benchmark/bench_speculative.py --model-config llama3-8b --batch-size 1 8 32 64 \
        --accept 0 0.6 0.9 1.0 --num-draft-tokens 4
    python benchmark/bench_speculative.py --model-config llama3-8b --draft-model-config llama3.2-1b \
        --num-draft-tokens 4 --topk 1
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from typing import Dict, List

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from inproc_scheduler import dummy_scheduler, submit_greedy
from model_configs import MODEL_CONFIGS, write_model_config

from sglang.srt.speculative.draft_tree import DraftTree


class OracleProposer:
    """Drafts = the reference continuation, each token kept with probability `accept`."""

    capture = None  # no target hidden states needed

    def __init__(
        self,
        reference: Dict[str, List[int]],
        accept: float,
        vocab: int,
        seed: int,
        breadth: int = 1,
    ):
        self.reference = reference
        self.accept = accept
        self.vocab = vocab
        self.rng = random.Random(seed)
        self.breadth = breadth

    def plan(self, reqs, budgets):
        for r, b in zip(reqs, budgets):
            ref = self.reference[r.rid.split("@")[0]]
            n = len(r.output_ids)
            drafts = list(ref[n : n + b])
            for j in range(len(drafts)):
                if self.rng.random() >= self.accept:
                    drafts[j] = (drafts[j] + 1 + self.rng.randrange(self.vocab - 1)) % self.vocab
            r.spec_drafts, r.spec_tree = drafts, None
            r.oracle_rows = list(range(1, len(drafts) + 1))
            if self.breadth > 1 and drafts:
                # The oracle's chain first, then breadth - 1 one-token siblings of its first
                # draft (never the target's token): a tree of b nodes whose verify pass costs what
                # a real tree's does.
                wrong = [[(drafts[0] + 1 + j) % self.vocab] for j in range(self.breadth - 1)]
                tree = DraftTree.from_paths([drafts] + wrong, b)
                r.spec_drafts, r.spec_tree = tree.tokens, tree
                r.oracle_rows = _first_path_rows(tree)
        return [len(r.spec_drafts) for r in reqs]

    def draft(self, reqs, num_drafts, prefix_lens):
        ids = []
        self.verdicts = []  # per request of this pass: the oracle's accepted tokens + bonus
        self.paths = []  # per request: the rows of the accepted drafts
        for r, k in zip(reqs, num_drafts):
            ids.append(r.output_ids[-1])
            ids.extend(r.spec_drafts[:k])
            ref = self.reference[r.rid.split("@")[0]]
            n = len(r.output_ids)
            rows = [j for j in r.oracle_rows if j <= k]
            a = 0
            while a < len(rows) and r.spec_drafts[rows[a] - 1] == ref[n + a]:
                a += 1
            self.verdicts.append(list(ref[n : n + a + 1]))
            self.paths.append(rows[:a])
        return ids, None

    def on_verified(self, req, accepted, num_drafts, prefix_len, path=None):
        req.spec_drafts, req.spec_tree = [], None


class RealDraftCost:
    """A real proposer drafts (and pays for it); the oracle's drafts and verdicts are what verify."""

    def __init__(self, real, oracle: OracleProposer):
        self.real, self.oracle = real, oracle
        self.capture = real.capture  # an EAGLE head's: the target keeps its hidden states

    def on_target_extend(self, *a):
        self.real.on_target_extend(*a)

    def on_verify_pass(self, *a):
        self.real.on_verify_pass(*a)

    def plan(self, reqs, budgets):
        got = self.real.plan(reqs, budgets)
        return self.oracle.plan(reqs, got)

    def draft(self, reqs, num_drafts, prefix_lens):
        mine = [(r.spec_drafts, r.spec_tree) for r in reqs]
        self.real.draft(reqs, num_drafts, prefix_lens)
        for r, (d, t) in zip(reqs, mine):
            r.spec_drafts, r.spec_tree = d, t
        ids, _ = self.oracle.draft(reqs, num_drafts, prefix_lens)
        self.verdicts, self.paths = self.oracle.verdicts, self.oracle.paths
        return ids, None

    def on_verified(self, req, accepted, num_drafts, prefix_len, path=None):
        self.real.on_verified(req, accepted, num_drafts, prefix_len, path)
        self.oracle.on_verified(req, accepted, num_drafts, prefix_len, path)


def _first_path_rows(tree: "DraftTree") -> List[int]:
    """The rows of the first path of a tree built by from_paths (each first child, in turn)."""
    rows, at = [], 0
    for j, p in enumerate(tree.parents, start=1):
        if p == at:
            rows.append(j)
            at = j
    return rows


def force_oracle_verdicts(sched) -> None:
    """Run every verify in full, then replace its verdict with the proposer's (see --acceptance)."""

    def forced(real):
        def launch(*a, **kw):
            pending = real(*a, **kw)
            prop = sched.spec.proposer
            toks = [list(t) for t in prop.verdicts]  # this pass's, taken at launch
            paths = [list(p) for p in prop.paths]
            device_verdict = pending.result

            def result():
                out = device_verdict()
                out.tokens = [list(t) for t in toks]
                out.accept_lens = [len(t) - 1 for t in toks]
                out.invalid = [False] * len(toks)
                if out.paths is not None:  # a tree: the accepted rows, for the KV move
                    out.paths = paths
                return out

            pending.result = result
            return pending

        return launch

    # This scheduler only.
    sched.spec.launch_verify = forced(sched.spec.launch_verify)
    sched.spec.launch_tree_verify = forced(sched.spec.launch_tree_verify)


def make_scheduler(args, model_path: str, spec: bool):
    kw = dict(
        max_total_tokens=args.max_total_tokens,
        max_running_requests=max(args.batch_size),
        cuda_graph_max_bs=max(args.batch_size) * args.num_draft_tokens,
    )
    if spec and args.eagle:
        kw.update(
            speculative_algorithm=args.eagle,
            speculative_draft_model_path=write_head_config(model_path, args.eagle),
            speculative_num_draft_tokens=args.num_draft_tokens,
            speculative_num_steps=args.num_steps or args.num_draft_tokens - 1,
            speculative_eagle_topk=args.topk,
        )
    elif spec and args.draft_model_config:
        kw.update(
            speculative_algorithm="STANDALONE",
            speculative_draft_model_path=write_model_config(args.draft_model_config),
            speculative_num_draft_tokens=args.num_draft_tokens,
            speculative_num_steps=args.num_steps or args.num_draft_tokens - 1,
            speculative_eagle_topk=args.topk,
        )
    elif spec:
        kw.update(
            speculative_algorithm="NGRAM",
            speculative_num_draft_tokens=args.num_draft_tokens,
            speculative_ngram_max_bfs_breadth=args.tree_breadth,
        )
    return dummy_scheduler(model_path, **kw)


def write_head_config(model_path: str, variant: str) -> str:
    """A config-only EAGLE / EAGLE-3 head folder for the target (one decoder layer of its shape;
    EAGLE-3 with the 32k draft vocabulary its published Llama-3 heads use); the dummy load format
    fills it with random weights."""
    cfg = json.load(open(os.path.join(model_path, "config.json")))
    if variant == "EAGLE3":
        cfg["draft_vocab_size"] = min(32000, cfg["vocab_size"])
    path = os.path.join(model_path, f"head-{variant.lower()}")
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)
    return path


def run(sched, prompts: List[List[int]], max_new: int, tag: str, ignore_eos: bool = True) -> dict:
    """All prompts at once; times every pass, splits prefill passes from decode / verify steps."""
    reqs = [
        submit_greedy(sched, f"p{i}@{tag}", ids, max_new, ignore_eos)
        for i, ids in enumerate(prompts)
    ]
    decode_s, steps, prefill_s = 0.0, 0, 0.0
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    while not sched._is_fully_idle():
        sync()
        t0 = time.perf_counter()
        sched.step()
        sync()
        dt = time.perf_counter() - t0
        last = sched.state.last_batch
        if last is not None and (
            last.forward_mode.is_decode() or last.forward_mode.is_target_verify()
        ):
            decode_s += dt
            steps += 1
        else:
            prefill_s += dt
    sched.step()
    decode_tokens = sum(len(r.output_ids) - 1 for r in reqs)  # the first comes from the prefill
    verify = sum(r.spec_verify_ct for r in reqs)
    return dict(
        outputs={r.rid.split("@")[0]: list(r.output_ids) for r in reqs},
        decode_s=decode_s,
        decode_tokens=decode_tokens,
        steps=steps,
        step_ms=decode_s / max(steps, 1) * 1e3,
        tpot_ms=decode_s / max(decode_tokens, 1) * len(reqs) * 1e3,
        accept_length=(decode_tokens / verify) if verify else 1.0,
        prefill_s=prefill_s,
    )


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model-config", choices=sorted(MODEL_CONFIGS), required=True)
    p.add_argument("--batch-size", type=int, nargs="+", default=[1, 8, 32, 64])
    p.add_argument("--accept", type=float, nargs="+", default=[0.0, 0.6, 0.9, 1.0])
    p.add_argument("--num-draft-tokens", type=int, default=4)
    p.add_argument("--input-len", type=int, default=512)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--max-total-tokens", type=int, default=65536)
    p.add_argument("--acceptance", choices=["forced", "target"], default="forced")
    p.add_argument(
        "--tree-breadth",
        type=int,
        default=1,
        help="1: chains; more: trees of num_draft_tokens - 1 nodes (the oracle's chain plus "
        "breadth - 1 wrong siblings of its first draft), verified by the tree pass",
    )
    p.add_argument(
        "--draft-model-config",
        choices=sorted(MODEL_CONFIGS),
        default=None,
        help="a real draft model drafts every verify (its cost paid; see above)",
    )
    p.add_argument(
        "--eagle",
        choices=["EAGLE", "EAGLE3"],
        default=None,
        help="a random EAGLE / EAGLE-3 head of the target's shape drafts every verify",
    )
    p.add_argument("--topk", type=int, default=1, help="with a draft model: >1 drafts trees")
    p.add_argument(
        "--num-steps", type=int, default=None, help="draft steps (default num_draft_tokens - 1)"
    )
    p.add_argument(
        "--draft-eager",
        action="store_true",
        help="the draft model's decode passes run eagerly (no draft CUDA graphs); an EAGLE head "
        "keeps per-request caches (SGLANG_EAGLE_EAGER=1) instead of its paged pool; for comparison",
    )
    p.add_argument("--result-file", default=None)
    args = p.parse_args(argv)
    real_draft = bool(args.draft_model_config or args.eagle)
    if real_draft and args.topk > 1:
        # The oracle's tree as deep as the draft's (num_steps): its chain, then wrong siblings.
        steps = args.num_steps or args.num_draft_tokens - 1
        args.tree_breadth = max(2, args.num_draft_tokens - steps)
    model_path = write_model_config(args.model_config)
    vocab = json.load(open(os.path.join(model_path, "config.json")))["vocab_size"]
    rng = random.Random(0)
    rows = []
    plain = make_scheduler(args, model_path, spec=False)
    refs: Dict[int, dict] = {}
    for bs in args.batch_size:
        prompts = [
            [rng.randrange(100, vocab - 100) for _ in range(args.input_len)] for _ in range(bs)
        ]
        run(plain, prompts, 8, f"warm{bs}")  # the batch's shapes compile before the timed run
        refs[bs] = dict(prompts=prompts, res=run(plain, prompts, args.output_len, f"plain{bs}"))
    del plain
    torch.cuda.empty_cache() if torch.cuda.is_available() else None
    if args.eagle and args.draft_eager:
        os.environ["SGLANG_EAGLE_EAGER"] = "1"
    spec = make_scheduler(args, model_path, spec=True)
    real_proposer = spec.spec.proposer if real_draft else None
    if args.draft_model_config and args.draft_eager:
        real_proposer.runner.graph_runner = None
    if args.acceptance == "forced":
        force_oracle_verdicts(spec)
    for bs in args.batch_size:
        base = refs[bs]["res"]
        rows.append(
            dict(
                batch_size=bs,
                accept=None,
                **{k: base[k] for k in ("step_ms", "tpot_ms", "accept_length")},
            )
        )
        for a in args.accept:
            oracle = OracleProposer(base["outputs"], a, vocab, seed=bs, breadth=args.tree_breadth)
            spec.spec.proposer = RealDraftCost(real_proposer, oracle) if real_proposer else oracle
            run(spec, refs[bs]["prompts"], 8, f"warm{bs}-{a}")
            res = run(spec, refs[bs]["prompts"], args.output_len, f"spec{bs}-{a}")
            same = res["outputs"] == base["outputs"]
            rows.append(
                dict(
                    batch_size=bs,
                    accept=a,
                    step_ms=res["step_ms"],
                    tpot_ms=res["tpot_ms"],
                    accept_length=res["accept_length"],
                    same_tokens=same,
                    speedup=base["tpot_ms"] / res["tpot_ms"],
                )
            )
    drafter = (
        f"{args.eagle or args.draft_model_config} drafting (topk {args.topk}, "
        f"{'eager' if args.draft_eager else 'graphs'}), oracle tokens"
        if real_draft
        else "oracle drafts"
    )
    print(
        f"{args.model_config}, input {args.input_len}, output {args.output_len}, "
        f"{args.num_draft_tokens} tokens per verify ({drafter}, {args.acceptance} acceptance, "
        f"{'chains' if args.tree_breadth == 1 else f'trees of breadth {args.tree_breadth}'})"
    )
    print(
        f"{'bs':>4} {'draft keep':>10} {'step ms':>8} {'tokens/step':>11} {'TPOT ms':>8} {'vs plain':>8} {'same':>5}"
    )
    for r in rows:
        keep = "plain" if r["accept"] is None else f"{r['accept']:.2f}"
        print(
            f"{r['batch_size']:>4} {keep:>10} {r['step_ms']:>8.2f} {r['accept_length']:>11.2f} "
            f"{r['tpot_ms']:>8.2f} {r.get('speedup', 1.0):>7.2f}x {str(r.get('same_tokens', '')):>5}"
        )
    out = dict(
        model=args.model_config,
        num_draft_tokens=args.num_draft_tokens,
        acceptance=args.acceptance,
        tree_breadth=args.tree_breadth,
        draft_model=args.eagle or args.draft_model_config,
        topk=args.topk,
        draft_eager=args.draft_eager,
        rows=rows,
    )
    if args.result_file:
        with open(args.result_file, "a") as f:
            f.write(json.dumps(out) + "\n")
    return out


if __name__ == "__main__":
    main()
