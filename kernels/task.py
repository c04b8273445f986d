"""The verifiable toy task of the embedded RL loop: tokenizer and reward (the algorithms' math
is in kernels/algorithms.py)."""

from __future__ import annotations

import random
from dataclasses import dataclass

DIGITS = 10
BOS, SEP, EOS = 10, 11, 12  # token ids after the ten digits


class DigitTokenizer:
    """Ten digits plus BOS, '=' and EOS."""

    vocab = [str(d) for d in range(DIGITS)] + ["<s>", "=", "</s>"]

    def encode(self, text: str) -> list[int]:
        return [BOS] + [int(c) for c in text] + [SEP]

    def decode(self, ids: list[int]) -> str:
        return "".join(self.vocab[i] if i < len(self.vocab) else f"<{i}>" for i in ids)


@dataclass
class ReverseTask:
    """Prompt: `<s>d1..dk=`; answer: dk..d1 then `</s>`. Reward: fraction of answer positions right."""

    min_digits: int = 2
    max_digits: int = 4

    def prompts(self, n: int, rnd: random.Random) -> list[str]:
        return [
            "".join(
                str(rnd.randrange(DIGITS))
                for _ in range(rnd.randint(self.min_digits, self.max_digits))
            )
            for _ in range(n)
        ]

    @staticmethod
    def reward(digits: str, response: list[int]) -> float:
        target = [int(c) for c in reversed(digits)] + [EOS]
        hits = sum(1 for i, t in enumerate(target) if i < len(response) and response[i] == t)
        return hits / len(target)
