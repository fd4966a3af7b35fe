"""The calibration bench times a head draft (EAGLE-3) as it times a separate draft model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tracer.pair import load_pair
from tracer.tiny import write_eagle3
from validate.bench import ModelBench
from validate.decode import draft_tree

TEXT = [1] + [int(t) for t in np.random.default_rng(0).integers(3, 200, 120)]


@pytest.fixture(scope="module")
def head_pair(tiny_pair_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("e3")
    write_eagle3(tiny_pair_dir / "target", out, seed=1)
    return load_pair(str(tiny_pair_dir), f"eagle3:{out}")


@pytest.mark.parametrize("which", ["head", "dense"])
def test_bench_rounds_draft_the_tree_the_recorder_would(which, head_pair, pair):
    p = head_pair if which == "head" else pair
    bench = ModelBench(p, depth=3, topk=2, max_nodes=12, budget=4, seed=0, text=TEXT)
    try:
        for ctx, accepted in ((16, 2), (16, 0), (24, 3)):
            bench.set_context(ctx)
            s = p.shape
            bench.prepare_verify(np.random.default_rng(ctx).integers(0, s.num_experts, (5, s.num_moe_layers, s.top_k)))
            bench.run_verify()
            bench.after_verify()
            bench.prepare_draft(accepted)
            bench.run_draft()  # the timed phase runs
            bench.after_draft()
            assert len(bench.target) == ctx and len(bench.draft) == ctx
            bench.prepare_draft(accepted)  # the same draft again, to compare with a fresh pair's
            got = draft_tree(bench.draft, bench.pending, bench.root, 3, 2, 12, p.target.vocab_size)
            bench.after_draft()
            ids = TEXT[bench.offset:bench.offset + ctx]
            p.target.reset()
            p.draft.reset()
            p.target.extend(torch.tensor(ids + bench.pending))  # decoding has verified the accepted tokens
            p.target.keep(ctx + len(bench.pending))
            p.draft.extend(torch.tensor(ids))
            want = draft_tree(p.draft, bench.pending, bench.root, 3, 2, 12, p.target.vocab_size)
            assert got.tokens.tolist() == want.tokens.tolist() and got.parents.tolist() == want.parents.tolist()
            np.testing.assert_allclose(got.draft_logprob, want.draft_logprob, atol=1e-4)
    finally:
        bench.close()
