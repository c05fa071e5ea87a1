"""The new-token ratio: the share of each running request's remaining max_new_tokens that admission
reserves. It starts high, decays each decode step that fits, is reset when the server goes idle, and
is raised after a retraction to what the retracted batch actually needed."""

from __future__ import annotations

INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14
NEW_TOKEN_RATIO_DECAY_STEPS = 600


class NewTokenRatio:
    def __init__(self, schedule_conservativeness: float):
        self.init = min(INIT_NEW_TOKEN_RATIO * schedule_conservativeness, 1.0)
        self.min = min(self.init * MIN_NEW_TOKEN_RATIO_FACTOR, 1.0)
        self.decay_step = (self.init - self.min) / NEW_TOKEN_RATIO_DECAY_STEPS
        self.value = self.init

    def decay(self) -> None:
        self.value = max(self.value - self.decay_step, self.min)

    def reset(self) -> None:
        self.value = self.init

    def raise_to(self, value: float) -> None:
        self.value = value
