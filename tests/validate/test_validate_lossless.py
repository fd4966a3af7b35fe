"""Real speculative decoding equals plain greedy decoding for every policy, and walks the replay's steps."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ecosim import bitsets
from ecosim.policies import PolicySpec
from ecosim.replay import TraceReplay
from tracer.tree import Tree
from validate.clock import WallClock
from validate.decode import SpecDecoder, accept_path, greedy, subtree
from validate.live import Selector
from validate.measure import first_divergence, trace_tokens
from vhelpers import NEW_TOKENS, TREE

POLICIES = [
    PolicySpec("ar"),
    PolicySpec("confidence", 0),
    PolicySpec("confidence", 1),
    PolicySpec("confidence", 1000),  # larger than any tree: the whole tree is verified
    PolicySpec("ecospec", 1, 0.5, "oracle"),
    PolicySpec("ecospec", 1000, 0.5, "oracle"),
    PolicySpec("ecospec", 1000, 0.0, "none"),
    PolicySpec("ecospec", 4, 2.0, "oracle", "ratio"),
    PolicySpec("ecospec", 5, 1.0, "token"),  # fitted leave-requests-out on the recorded trace
]


def _prompts(trace):
    return {int(r["request_id"]): list(r["prompt_ids"]) for r in trace.manifest["requests"]}


def _decoder(pair):
    return SpecDecoder(pair, WallClock(), TREE["depth"], TREE["topk"], TREE["max_nodes"], NEW_TOKENS)


@pytest.fixture(scope="module")
def references(self_pair, self_trace):
    return {rid: greedy(self_pair.target.model, p, NEW_TOKENS, self_pair.eos_ids) for rid, p in _prompts(self_trace).items()}


def test_recorded_trace_is_greedy(self_trace, references):
    assert trace_tokens(self_trace) == references


@pytest.mark.parametrize("spec", POLICIES, ids=lambda s: s.label())
def test_self_draft_lossless_and_on_the_replayed_path(self_pair, self_trace, references, spec):
    """Mostly accepted drafts (the target drafts for itself): the tokens are greedy's, and the real
    steps are the replay's: same positions, same verified nodes, same expert unions."""
    dec = _decoder(self_pair)
    sel = Selector(spec, self_pair.shape, self_trace)
    replay = TraceReplay(self_trace)
    steps = replay.steps(spec)
    unions = bitsets.count(steps.bits)
    pos_of = self_trace.positions["pos"]
    n_steps = 0
    for rid, prompt in _prompts(self_trace).items():
        out = dec.decode(sel, rid, prompt)
        assert first_divergence(references[rid], out.tokens) is None, spec.label()
        assert sum(s.tokens for s in out.steps) == len(out.tokens)
        mine = steps.request == rid
        assert [s.pos for s in out.steps] == pos_of[steps.tree[mine]].tolist()
        assert [s.verified for s in out.steps] == steps.verified[mine].tolist()
        assert [s.union for s in out.steps] == unions[mine].tolist()
        for s in out.steps:
            assert s.verified <= max(1, min(spec.budget, s.tree_nodes - 1) + 1) if spec.speculative else s.verified == 1
            assert 1 <= s.tokens <= s.accepted + 1
            assert min(s.draft_s, s.select_s, s.verify_s) >= 0
            if spec.name == "ecospec" and spec.predictor == "oracle":
                assert s.tree_in_trace and not s.peeked
        n_steps += len(out.steps)
    if spec.speculative and spec.budget >= 1:
        assert n_steps < sum(len(r) for r in references.values()), "the self-draft should accept tokens"


@pytest.mark.parametrize("spec", [PolicySpec("confidence", 1000), PolicySpec("ecospec", 1, 0.5, "none")], ids=lambda s: s.label())
def test_random_draft_lossless(pair, spec):
    """A random draft (rarely accepted): still exactly greedy."""
    dec = _decoder(pair)
    sel = Selector(spec, pair.shape)
    for prompt in ([1, 50, 60, 70, 80], [1, 33, 34]):
        assert dec.decode(sel, 0, prompt).tokens == greedy(pair.target.model, prompt, NEW_TOKENS, pair.eos_ids)


def test_kept_cache_equals_a_fresh_prefill(self_pair, self_trace):
    """After decoding, the target's cache (compacted path by path) equals a prefill of the same tokens."""
    dec = _decoder(self_pair)
    rid, prompt = next(iter(_prompts(self_trace).items()))
    out = dec.decode(Selector(PolicySpec("confidence", 1000), self_pair.shape), rid, prompt)
    assert any(s.accepted >= 2 for s in out.steps)
    tgt = self_pair.target
    n = len(prompt) + len(out.tokens)  # the last step's path may run past the token budget: compare these
    assert len(tgt) >= n
    assert torch.equal(tgt.key_pos, torch.arange(len(tgt)))
    kept = [(layer.keys[..., :n, :].clone(), layer.values[..., :n, :].clone()) for layer in tgt.cache.layers]
    tgt.reset()
    tgt.extend(torch.tensor(prompt + out.tokens))
    for (k, v), layer in zip(kept, tgt.cache.layers):
        assert torch.allclose(k, layer.keys, atol=1e-4) and torch.allclose(v, layer.values, atol=1e-4)


def test_oracle_lookup_failure_peeks(self_pair, self_trace, references, monkeypatch):
    """When the recorded tree lacks a live node, the true experts come from an untimed forward."""
    sel = Selector(PolicySpec("ecospec", 4, 0.5, "oracle"), self_pair.shape, self_trace)
    monkeypatch.setattr(sel, "true_experts", lambda *a: None)
    rid, prompt = next(iter(_prompts(self_trace).items()))
    out = _decoder(self_pair).decode(sel, rid, prompt)
    assert out.tokens == references[rid]
    assert all(s.peeked and s.tree_in_trace is False for s in out.steps)


def test_subtree_and_acceptance():
    # root 10; children 11 (node 1), 13 (node 2); 12 under 11 (node 3); 14 under 13 (node 4)
    t = Tree(np.array([10, 11, 13, 12, 14]), np.array([-1, 0, 0, 1, 2]), np.array([0, 1, 1, 2, 2]), np.zeros(5, np.float32))
    sub, idx = subtree(t, np.array([True, True, False, True, False]))
    assert idx.tolist() == [0, 1, 3] and sub.parents.tolist() == [-1, 0, 1] and sub.tokens.tolist() == [10, 11, 12]
    assert accept_path(t, np.array([11, 12, 0, 7, 0])) == [0, 1, 3]
    assert accept_path(t, np.array([13, 12, 14, 7, 0])) == [0, 2, 4]
    assert accept_path(t, np.array([99, 0, 0, 0, 0])) == [0]
    with pytest.raises(ValueError):
        subtree(t, np.array([True, False, False, True, False]))  # not closed under ancestors
    with pytest.raises(ValueError):
        subtree(t, np.array([False, True, False, False, False]))  # no root


def test_fed_draft_equals_extend_then_expand(pair):
    """draft_tree feeds the accepted tokens in the expansion's first forward: the same tree (and the
    same cache) as feeding them first with their own forward."""
    from tracer.tree import expand_tree
    from validate.decode import draft_tree

    dr = pair.draft
    ctx, pending, root = torch.tensor([1, 60, 61, 62, 63, 64]), [70, 71, 72], 73
    dr.reset()
    dr.extend(ctx)
    a = draft_tree(dr, pending, root, 3, 3, 10, pair.target.vocab_size)
    keys_a = [layer.keys.clone() for layer in dr.cache.layers]
    dr.reset()
    dr.extend(ctx)
    dr.extend(torch.tensor(pending))
    b = expand_tree(dr, root, 3, 3, 10, pair.target.vocab_size)
    assert len(dr) == len(ctx) + len(pending) + 1
    assert np.array_equal(a.tokens, b.tokens) and np.array_equal(a.parents, b.parents)
    assert np.allclose(a.draft_logprob, b.draft_logprob, atol=1e-5)
    for k, layer in zip(keys_a, dr.cache.layers):
        assert torch.allclose(k, layer.keys, atol=1e-5)



def test_checkpoint_saved_with_router_logits_on(tmp_path, tiny_pair_dir, prompts_path):
    """The trained default's config says output_router_logits: true (its training setting), which
    breaks forwards under the tracer's 4D masks; tracer's loader switches it off, so validate's
    recorder and decoder still run."""
    import json
    import shutil

    from ecosim.policies import PolicySpec
    from validate.choice import Choice
    from tracer.pair import load_pair
    from validate.measure import RunConfig
    from validate.recorded import record

    d = tmp_path / "pair"
    shutil.copytree(tiny_pair_dir, d)
    cfg_file = d / "target" / "config.json"
    cfg = json.loads(cfg_file.read_text())
    cfg["output_router_logits"] = True
    cfg_file.write_text(json.dumps(cfg))
    p = load_pair(str(d), str(d / "target"))
    prompt = [1, 50, 51, 52, 53]
    out = _decoder(p).decode(Selector(PolicySpec("confidence", 4), p.shape), 0, prompt)
    assert out.tokens == greedy(p.target.model, prompt, NEW_TOKENS, p.eos_ids)
    run = RunConfig(model=str(d), out=tmp_path / "run", choice=Choice(PolicySpec("ar"), "test"), prompts=[prompts_path],
                    max_new_tokens=3, max_prompts=1, depth=2, topk=2, max_nodes=3, progress=False)
    run.out.mkdir()
    assert (record(run) / "manifest.json").is_file()
