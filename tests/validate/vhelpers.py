"""Constants shared by the validate tests and their conftest (a unique module name: tests/ has no packages)."""

PROMPTS = [
    {"task": "coding", "text": "def add(a, b):\n    return"},
    {"task": "qa", "text": "What does the with statement do?"},
    {"task": "dialogue", "input_ids": [1, 40, 41, 42, 43, 44, 45, 46, 47, 48]},
]
TREE = dict(depth=3, topk=3, max_nodes=10)  # small trees keep the tests quick
NEW_TOKENS = 16
