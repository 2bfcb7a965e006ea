"""A support task whose replies copy numbers from the ticket, for the tokenizer's number tests.

Each conversation is a ticket naming a customer, a product and a five-digit order number, and a
reply that repeats all three. Train and held-out tickets draw their order numbers from disjoint
sets, so a model answers a held-out ticket only by copying the number from the prompt, not by
recalling one it was trained on. Used by tests/test_numbers_e2e.py and
benchmarks/tokenizer_choices.py.
"""

import json
import os
import random
from typing import Dict, List, NamedTuple, Sequence, Tuple

NAMES = ("Ana", "Ravi", "Mei", "Tom", "Omar", "Lena", "Kofi", "Ines", "Yuki", "Sara", "Paul", "Nina")
PRODUCTS = ("desk lamp", "kettle", "backpack", "keyboard", "blender", "tent", "monitor", "jacket")
TRAIN_OVERRIDES = (
    # Templated tickets differ in a name, a product and a number: near-duplicate removal would keep a few.
    "cleaning.near_dedup=false",
)


class Ticket(NamedTuple):
    name: str
    product: str
    number: str

    def question(self) -> str:
        return f"Hi, this is {self.name}. Where is my order {self.number}? It is the {self.product}."

    def answer(self) -> str:
        return f"Hello {self.name}, order {self.number} with the {self.product} ships tomorrow."


def tickets(count: int, seed: int, held_out: bool) -> List[Ticket]:
    """`count` tickets; train tickets take even order numbers, held-out ones odd numbers."""
    rng = random.Random(seed)
    parity = 1 if held_out else 0
    return [
        Ticket(rng.choice(NAMES), rng.choice(PRODUCTS), str(rng.randrange(10_000, 100_000) // 2 * 2 + parity))
        for _ in range(count)
    ]


def write_conversations(directory: str, count: int, seed: int = 3) -> str:
    """`count` training conversations as `messages` records in `directory`/tickets.jsonl; returns
    `directory` (a data root)."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "tickets.jsonl"), "w", encoding="utf-8") as handle:
        for ticket in tickets(count, seed, held_out=False):
            messages = [
                {"role": "user", "content": ticket.question()},
                {"role": "assistant", "content": ticket.answer()},
            ]
            handle.write(json.dumps({"messages": messages}) + "\n")
    return directory


def answer_held_out(saved_model_dir: str, count: int, seed: int = 11) -> Dict[str, float]:
    """Asks `count` held-out tickets through the model's `chat` signature (greedy) and returns the
    share of replies that are exactly right and of replies that carry the ticket's number, with a
    few wrong replies as examples."""
    from components.model_client import ModelClient

    asked = tickets(count, seed, held_out=True)
    client = ModelClient(saved_model_dir, batch_size=32, required=("chat",))
    replies = client.chat([[("user", ticket.question())] for ticket in asked], max_new_tokens=40, temperature=0.0)
    return score(asked, [reply.text for reply in replies])


def score(asked: Sequence[Ticket], replies: Sequence[str]) -> Dict[str, float]:
    pairs: List[Tuple[Ticket, str]] = list(zip(asked, replies))
    exact = sum(reply.strip() == ticket.answer() for ticket, reply in pairs)
    numbers = sum(f"order {ticket.number} " in reply for ticket, reply in pairs)
    wrong = [
        {"expected": ticket.answer(), "reply": reply} for ticket, reply in pairs if reply.strip() != ticket.answer()
    ]
    return {
        "asked": len(pairs),
        "exact": exact / len(pairs),
        "right_number": numbers / len(pairs),
        "wrong_examples": wrong[:3],
    }
