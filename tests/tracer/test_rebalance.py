"""The sequence-wise balance loss of the default pair's second stage, worked by hand."""

import pytest
import torch

from tracer.train_pair import per_layer_balance_loss, sequence_balance_loss

E = 4


def routed(experts_per_sequence: list[list[int]]) -> tuple[torch.Tensor]:
    """One layer's router logits, (batch * tokens, E), sending each token firmly to one expert."""
    rows = [torch.nn.functional.one_hot(torch.tensor(seq), E).float() * 50.0 for seq in experts_per_sequence]
    return (torch.cat(rows),)


def test_even_within_every_sequence_is_one():
    logits = routed([[0, 1, 2, 3], [3, 2, 1, 0]])
    assert sequence_balance_loss(logits, batch=2, top_k=1).item() == pytest.approx(1.0, abs=1e-6)


def test_one_expert_per_sequence_is_the_maximum():
    logits = routed([[0, 0, 0, 0], [2, 2, 2, 2]])
    # each sequence on its own: E * (1 * 1) / k = 4
    assert sequence_balance_loss(logits, batch=2, top_k=1).item() == pytest.approx(4.0, abs=1e-6)


def test_batch_balance_cannot_see_specialisation_by_sequence():
    """Why the second stage exists: four sequences each collapsed on its own expert look perfectly
    balanced to the batch-level loss, but not to the sequence-wise one."""
    logits = routed([[0] * 4, [1] * 4, [2] * 4, [3] * 4])
    assert per_layer_balance_loss(logits, top_k=1).item() == pytest.approx(1.0, abs=1e-6)
    assert sequence_balance_loss(logits, batch=4, top_k=1).item() == pytest.approx(4.0, abs=1e-6)
