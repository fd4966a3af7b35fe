"""One tree forward equals running each root-to-node path sequentially with a KV cache."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import DynamicCache

from tracer.masks import additive_mask, attention_windows
from tracer.tiny import FAMILIES
from tracer.tree import expand_tree
from tracer.verify import verify_tree

CONTEXT = 20  # longer than the GPT-OSS (8) and Mixtral (12) tiny windows: sliding layers matter


def sequential(model, cap, context: torch.Tensor, path: list[int]) -> tuple[torch.Tensor, np.ndarray]:
    """Logits and routing of the path's last token, decoding one token at a time with the model's
    own cache and masks (a config-built DynamicCache: sliding layers keep only their window)."""
    cache = DynamicCache(config=model.config)
    with torch.inference_mode():
        model(context[None], cache=cache, use_cache=True)
        for t in path:
            with cap.capture():
                out = model(torch.tensor([[t]]), cache=cache, use_cache=True)
            experts, _ = cap.collect()
    return out.logits[0, -1], experts[0]


@pytest.mark.parametrize("family", FAMILIES)
def test_tree_forward_equals_sequential_decoding(family, pairs):
    pair = pairs[family]
    target, draft, cap = pair.target, pair.draft, pair.capture
    context = torch.randint(3, 259, (CONTEXT,), generator=torch.Generator().manual_seed(11))
    for lm in (target, draft):
        lm.reset()
    root = int(target.extend(context)[-1].argmax())
    draft.extend(context)
    tree = expand_tree(draft, root, depth=3, topk=3, max_nodes=14, vocab=target.vocab_size)
    assert len(tree) == 15 and tree.depths.max() >= 2
    ver = verify_tree(target, cap, tree, keep_logits=True)
    assert len(target) == CONTEXT + 1, "the cache keeps the context plus the root"
    worst = 0.0
    for node in range(len(tree)):
        logits, experts = sequential(target.model, cap, context, tree.path(node))
        worst = max(worst, float((logits - ver.logits[node]).abs().max()))
        np.testing.assert_array_equal(ver.experts[node], experts, err_msg=f"{family} node {node}")
        assert ver.target_next[node] == int(logits.argmax())
        if node:
            lp = torch.log_softmax(sequential(target.model, cap, context, tree.path(int(tree.parents[node])))[0].float(), -1)
            assert ver.target_logprob[node] == pytest.approx(float(lp[tree.tokens[node]]), abs=1e-4)
    assert worst < 1e-4, f"{family}: max |tree - sequential| logit difference {worst}"
    assert np.isnan(ver.target_logprob[0])


def test_mask_is_float_additive_with_ancestors_and_windows():
    anc = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool)  # root, two children
    key_pos = torch.cat([torch.arange(5), torch.tensor([5, 6, 6])])
    m = additive_mask(anc, 5, torch.tensor([5, 6, 6]), key_pos, None, torch.float32)
    assert m.shape == (1, 1, 3, 8) and m.dtype == torch.float32
    low = torch.finfo(torch.float32).min
    assert torch.all(m[0, 0, :, :5] == 0)
    assert m[0, 0, 1, 7] == low and m[0, 0, 2, 6] == low and m[0, 0, 2, 7] == 0 and m[0, 0, 2, 5] == 0
    w = additive_mask(anc, 5, torch.tensor([5, 6, 6]), key_pos, 3, torch.bfloat16)
    assert w.dtype == torch.bfloat16
    # query at position 6 with window 3 sees keys at positions 4, 5, 6 only
    assert torch.equal(w[0, 0, 1] == 0, torch.tensor([0, 0, 0, 0, 1, 1, 1, 0], dtype=torch.bool))


def test_attention_windows_per_family(pairs):
    assert attention_windows(pairs["gpt_oss"].target.model.config) == {"full_attention": None, "sliding_attention": 8}
    assert attention_windows(pairs["mixtral"].target.model.config) == 12
    assert attention_windows(pairs["qwen3_moe"].target.model.config) is None
    assert attention_windows(pairs["deepseek_v3"].target.model.config) is None
