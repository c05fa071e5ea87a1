"""How `select` picks one choice from the prompt logprobs of `prefix + choice` for every choice.

Every method receives, per choice, only the logprob entries of the choice's own tokens
(`[logprob, token_id, text]`; the backend has already cut off the shared prefix).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

LogprobEntry = Sequence[Any]  # [logprob | None, token_id, text | None]


@dataclass
class ChoicesDecision:
    decision: str
    meta_info: Dict[str, Any] = field(default_factory=dict)


def mean_logprob(entries: Sequence[LogprobEntry]) -> float:
    """Average token logprob; a None logprob (first token of a sequence) carries no information."""
    values = [e[0] for e in entries if e[0] is not None]
    return sum(values) / len(values) if values else float("-inf")


def _argmax(values: Sequence[float]) -> int:
    # First index wins ties, so the result does not depend on float noise order.
    return max(range(len(values)), key=lambda i: values[i])


def _meta(
    normalized: Sequence[float],
    input_lps: Sequence[Sequence[LogprobEntry]],
    output_lps: Sequence[Sequence[LogprobEntry]],
) -> Dict[str, Any]:
    """What every method reports in the select's meta_info."""
    return {
        "normalized_prompt_logprobs": list(normalized),
        "input_token_logprobs": [list(x) for x in input_lps],
        "output_token_logprobs": [list(x) for x in output_lps],
    }


class ChoicesSamplingMethod:
    """Base class; `requires_unconditional_logprobs` asks the backend for a third request."""

    requires_unconditional_logprobs: bool = False

    def __call__(
        self,
        *,
        choices: Sequence[str],
        normalized_prompt_logprobs: Sequence[float],
        input_token_logprobs: Sequence[Sequence[LogprobEntry]],
        output_token_logprobs: Sequence[Sequence[LogprobEntry]],
        unconditional_token_logprobs: Optional[Sequence[Sequence[LogprobEntry]]] = None,
    ) -> ChoicesDecision:
        raise NotImplementedError


class TokenLengthNormalized(ChoicesSamplingMethod):
    """The choice with the highest mean token logprob (long choices are not penalised)."""

    def __call__(
        self,
        *,
        choices,
        normalized_prompt_logprobs,
        input_token_logprobs,
        output_token_logprobs,
        unconditional_token_logprobs=None,
    ) -> ChoicesDecision:
        best = _argmax(normalized_prompt_logprobs)
        return ChoicesDecision(
            choices[best],
            _meta(normalized_prompt_logprobs, input_token_logprobs, output_token_logprobs),
        )


class GreedyTokenSelection(ChoicesSamplingMethod):
    """Decode greedily over the choices: at each token position keep only the choices whose token
    scores best; a choice that has run out of tokens keeps competing with its own mean.

    This mimics what greedy decoding restricted to the choices would produce, so a short choice
    that is a prefix of a longer one ("organ" / "organism") wins only if its mean holds up.
    """

    tolerance = 1e-6  # rows of one batch can differ in the last bits for identical prefixes

    def __call__(
        self,
        *,
        choices,
        normalized_prompt_logprobs,
        input_token_logprobs,
        output_token_logprobs,
        unconditional_token_logprobs=None,
    ) -> ChoicesDecision:
        rows: List[List[float]] = [
            [e[0] if e[0] is not None else 0.0 for e in entries] for entries in input_token_logprobs
        ]
        width = max((len(r) for r in rows), default=0)
        matrix = [
            r + [mean if math.isfinite(mean) else 0.0] * (width - len(r))
            for r, mean in zip(rows, normalized_prompt_logprobs)
        ]
        alive = list(range(len(choices)))
        for col in range(width):
            top = max(matrix[i][col] for i in alive)
            alive = [i for i in alive if matrix[i][col] >= top - self.tolerance]
            if len(alive) == 1:
                break
        best = alive[0] if alive else 0
        return ChoicesDecision(
            choices[best],
            {
                **_meta(normalized_prompt_logprobs, input_token_logprobs, output_token_logprobs),
                "greedy_logprob_matrix": matrix,
            },
        )


class UnconditionalLikelihoodNormalized(ChoicesSamplingMethod):
    """The choice whose tokens gain the most from the prompt: mean(logp(tok | prompt) - logp(tok)).

    Corrects for choices that are likely regardless of the question (frequent words).
    """

    requires_unconditional_logprobs = True

    def __call__(
        self,
        *,
        choices,
        normalized_prompt_logprobs,
        input_token_logprobs,
        output_token_logprobs,
        unconditional_token_logprobs=None,
    ) -> ChoicesDecision:
        if unconditional_token_logprobs is None:
            raise ValueError("unconditional_likelihood_normalized needs unconditional logprobs")
        scores = []
        for cond, uncond in zip(input_token_logprobs, unconditional_token_logprobs):
            # The first token of an unconditional sequence has no logprob: count it as 0.
            diffs = [
                c[0] - (u[0] if u[0] is not None else 0.0)
                for c, u in zip(cond, uncond)
                if c[0] is not None
            ]
            scores.append(sum(diffs) / len(diffs) if diffs else float("-inf"))
        best = _argmax(scores)
        return ChoicesDecision(
            choices[best],
            {
                **_meta(normalized_prompt_logprobs, input_token_logprobs, output_token_logprobs),
                "unconditional_token_logprobs": [list(x) for x in unconditional_token_logprobs],
                "normalized_unconditional_prompt_logprobs": scores,
            },
        )


token_length_normalized = TokenLengthNormalized()
greedy_token_selection = GreedyTokenSelection()
unconditional_likelihood_normalized = UnconditionalLikelihoodNormalized()
