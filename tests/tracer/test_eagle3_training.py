"""EAGLE-3 head training from a feature cache: the cache gives back what the live target gives."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from tracer import feature_cache
from tracer.drafts.eagle3 import load_head
from tracer.feature_cache import FeatureCache, features
from tracer.train_eagle3 import main


@pytest.fixture(scope="module")
def target(tiny_dirs):
    return AutoModelForCausalLM.from_pretrained(tiny_dirs["qwen3_moe"] / "target", dtype=torch.float32).eval()


@pytest.mark.parametrize("layers", [[0, 1, 2], [0, 0, 1]])  # with and without the last layer among the features
def test_cached_features_and_logits_equal_the_live_forward(target, layers, tmp_path):
    V = target.config.vocab_size
    stream = torch.randint(3, V, (10 * 16 + 5,), generator=torch.Generator().manual_seed(0))
    path = feature_cache.build(target, layers, stream, n=6, seq_len=16, seed=1, path=tmp_path / "c.pt",
                               dtype=torch.float32, batch=4)
    cache = FeatureCache(path, target, layers)
    assert len(cache) == 6 and cache.hidden.shape[2] == (3 if 2 in layers else 4)
    idx = torch.tensor([5, 0, 3])
    x, logits, feats = cache.batch(idx)
    starts = [int(torch.nonzero((stream.unfold(0, 16, 1) == row).all(1))[0]) for row in x]
    assert all(s % 16 == 0 for s in starts)  # disjoint windows on the grid
    live_logits, live_feats = features(target, layers, x)
    torch.testing.assert_close(feats, live_feats, rtol=1e-5, atol=1e-5)  # batch shape changes float rounding only
    torch.testing.assert_close(logits, live_logits, rtol=1e-5, atol=1e-5)


def test_float16_cache_is_close_and_a_foreign_cache_is_refused(target, tmp_path):
    stream = torch.randint(3, target.config.vocab_size, (64,), generator=torch.Generator().manual_seed(2))
    path = feature_cache.build(target, [0, 1, 2], stream, n=4, seq_len=16, seed=0, path=tmp_path / "c.pt")
    x, logits, feats = FeatureCache(path, target, [0, 1, 2]).batch(torch.arange(4))
    live_logits, live_feats = features(target, [0, 1, 2], x)
    torch.testing.assert_close(feats, live_feats, rtol=2e-3, atol=2e-3)
    assert (logits.argmax(-1) == live_logits.argmax(-1)).float().mean() > 0.95
    with pytest.raises(ValueError, match="other layers"):
        FeatureCache(path, target, [0, 1, 1])
    with pytest.raises(ValueError, match="asked for 5 windows"):
        feature_cache.build(target, [0, 1, 2], stream, n=5, seq_len=16, seed=0, path=tmp_path / "d.pt")


def test_training_from_a_cache_writes_a_head_that_loads(tiny_dirs, target, tmp_path, capsys):
    V = target.config.vocab_size
    g = torch.Generator().manual_seed(3)
    train, val = torch.randint(3, V, (40 * 16,), generator=g), torch.randint(3, V, (200,), generator=g)
    cache = feature_cache.build(target, [0, 1, 2], train, n=32, seq_len=16, seed=0, path=tmp_path / "c.pt",
                                extra={"counts": torch.bincount(train, minlength=V), "val": val})
    out = tmp_path / "head"
    assert main(["--target", str(tiny_dirs["qwen3_moe"] / "target"), "--out", str(out), "--cache", str(cache),
                 "--steps", "4", "--warmup", "1", "--batch", "2", "--seq-len", "16", "--draft-vocab", "64",
                 "--intermediate", "32", "--layers", "0,1,2", "--val-tokens", "64", "--eval-every", "2",
                 "--eval-tokens", "32", "--log-every", "2"]) == 0
    printed = capsys.readouterr().out
    assert "[held-out] step 4" in printed and "(512 cached)" in printed
    m = json.loads((out / "train_metrics.json").read_text())
    assert m["feature_cache"] == {"windows": 32, "dtype": "float16"} and len(m["val_top1_agreement_per_step"]) == 3
    head, _ = load_head(out, 3, target.config.hidden_size, V)
    assert head.cfg.draft_vocab_size == 64 and head.t2d.sum() == 64


def test_training_unroll_equals_the_chained_head_at_inference(tiny_dirs, tmp_path):
    """TTT step k at position p (`unroll`) is what the recorder's head computes for the node at depth
    k-1 below a root at p-k+1: context keys on the target's features, then its own outputs."""
    from tracer.pair import load_pair
    from tracer.tiny import write_eagle3
    from tracer.train_eagle3 import unroll

    write_eagle3(tiny_dirs["qwen3_moe"] / "target", tmp_path / "e3", seed=5)
    pair = load_pair(str(tiny_dirs["qwen3_moe"]), f"eagle3:{tmp_path / 'e3'}")
    head, target = pair.draft.head, pair.target.model
    x = torch.randint(3, target.config.vocab_size, (1, 14), generator=torch.Generator().manual_seed(4))
    _, feats = features(target, head.cfg.layer_ids, x)
    with torch.no_grad():
        steps = unroll(head, target.get_input_embeddings()(x), feats, 4)  # [(1, T, V_d)] per step
    for k in (1, 2, 4):
        for p in (k + 2, 13):
            m = p - k + 1  # the root's position
            pair.target.reset()
            pair.draft.reset()
            pair.target.extend(x[0, :m])
            got = pair.draft.extend(x[0, :m + 1])[-1]  # step 1 at the root
            for j in range(1, k):  # a chain below the root: each node sees the root .. itself
                got = pair.draft.forward(x[0, m + j:m + j + 1], torch.tensor([m + j]),
                                         torch.ones(1, j + 1, dtype=torch.bool), m)[-1]
            torch.testing.assert_close(got[head.target_ids()], steps[k - 1][0, p], rtol=1e-4, atol=1e-4)


def test_init_warm_starts_from_a_head_and_refuses_another_shape(tiny_dirs, target, tmp_path):
    """`--init DIR`: at learning rate 0 the written head is the init head bit for bit (so training
    continues from it); a narrower head or a vocabulary without the init's tokens is refused with a
    one-line error; a wider MLP and a larger draft vocabulary grow it, computing what it did."""
    from safetensors.torch import load_file

    from tracer.errors import TracerError

    V = target.config.vocab_size
    g = torch.Generator().manual_seed(6)
    train, val = torch.randint(3, V, (40 * 16,), generator=g), torch.randint(3, V, (200,), generator=g)
    cache = feature_cache.build(target, [0, 1, 2], train, n=32, seq_len=16, seed=0, path=tmp_path / "c.pt",
                                extra={"counts": torch.bincount(train, minlength=V), "val": val})
    common = ["--target", str(tiny_dirs["qwen3_moe"] / "target"), "--cache", str(cache), "--batch", "2",
              "--seq-len", "16", "--draft-vocab", "64", "--layers", "0,1,2", "--val-tokens", "64", "--log-every", "2"]
    first, warm, cold = tmp_path / "first", tmp_path / "warm", tmp_path / "cold"
    assert main(common + ["--out", str(first), "--steps", "4", "--warmup", "1", "--intermediate", "32"]) == 0
    assert main(common + ["--out", str(warm), "--steps", "2", "--lr", "0", "--seed", "1", "--intermediate", "32",
                          "--init", str(first)]) == 0
    assert main(common + ["--out", str(cold), "--steps", "2", "--lr", "0", "--seed", "1", "--intermediate", "32"]) == 0
    a, b, c = (load_file(str(d / "model.safetensors")) for d in (first, warm, cold))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["fc.weight"], c["fc.weight"])  # without --init the seed-1 head is another one
    assert json.loads((warm / "train_metrics.json").read_text())["init"] == str(first)
    with pytest.raises(TracerError, match="another shape"):  # narrower than the init head
        main(common + ["--out", str(tmp_path / "bad"), "--steps", "1", "--intermediate", "16", "--init", str(first)])
    with pytest.raises(TracerError, match="another shape"):  # a draft vocabulary without some of its tokens
        main(common + ["--out", str(tmp_path / "bad"), "--steps", "1", "--intermediate", "32", "--draft-vocab", "32",
                       "--init", str(first)])

    # grown: a wider MLP and the whole target vocabulary compute what the init head did (at lr 0)
    assert main(common + ["--draft-vocab", str(V), "--out", str(tmp_path / "grown"), "--steps", "2", "--lr", "0",
                          "--seed", "1", "--intermediate", "48", "--init", str(first)]) == 0  # the last --draft-vocab wins
    from tracer.train_eagle3 import unroll

    (old, _), (new, _) = (load_head(d, 3, target.config.hidden_size, V) for d in (first, tmp_path / "grown"))
    assert new.cfg.intermediate_size == 48 and new.cfg.draft_vocab_size == V and bool(new.t2d.all())
    x = torch.randint(3, V, (1, 12), generator=torch.Generator().manual_seed(7))
    _, feats = features(target, [0, 1, 2], x)
    emb = target.get_input_embeddings()(x)
    with torch.no_grad():
        lo, ln = unroll(old, emb, feats, 3), unroll(new, emb, feats, 3)
    for a_k, b_k in zip(lo, ln):  # every TTT step, the old draft tokens' logits (the grown head's ids are the target's)
        torch.testing.assert_close(b_k[..., old.target_ids()], a_k, rtol=1e-5, atol=1e-5)
    assert not torch.equal(new.midlayer.mlp.gate_proj.weight[32:], torch.zeros(16, target.config.hidden_size))



def test_ttt_decay_weights_each_step_as_decay_to_the_k_minus_1(tiny_dirs, target, tmp_path):
    """`--ttt-decay d`: the loss is sum_k d^(k-1) CE_k / sum_k d^(k-1), CE_k each unrolled step's
    cross-entropy against the target over the draft vocabulary (hand-worked: d = 0 is step 1 alone,
    d = 1 the plain mean, d = 0.5 weights 1, 0.5, 0.25)."""
    import torch.nn.functional as F

    from tracer.tiny import write_eagle3
    from tracer.train_eagle3 import ttt_loss, unroll

    head = write_eagle3(tiny_dirs["qwen3_moe"] / "target", tmp_path / "e3", seed=2)
    x = torch.randint(3, target.config.vocab_size, (2, 10), generator=torch.Generator().manual_seed(8))
    t_logits, feats = features(target, head.cfg.layer_ids, x)
    emb, ids = target.get_input_embeddings()(x), head.target_ids()
    with torch.no_grad():
        tp = t_logits[..., ids].softmax(-1)
        ce = [float(-(tp[:, k:] * F.log_softmax(lg[:, k:], -1)).sum(-1).mean())
              for k, lg in enumerate(unroll(head, emb, feats, 3), start=1)]
        got = {d: float(ttt_loss(head, emb, feats, t_logits, ids, 3, d)[0]) for d in (0.0, 0.5, 1.0)}
    assert len({round(c, 4) for c in ce}) == 3  # the steps differ, so a wrong weighting shows
    assert got[0.0] == pytest.approx(ce[0], rel=1e-5)
    assert got[1.0] == pytest.approx(sum(ce) / 3, rel=1e-5)
    assert got[0.5] == pytest.approx((ce[0] + 0.5 * ce[1] + 0.25 * ce[2]) / 1.75, rel=1e-5)
