"""Lossless in distribution at T > 0: `validate sampling-check`, its chi-square test, and a biased verifier it catches."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from validate.chisquare import chi2_sf, homogeneity
from validate.cli import main
from validate.sampling_check import coarsen, run_check, target_only
from validate.sampling_config import SamplingCheck

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "ecosim-tiny"  # the committed trained pair: its drafts are accepted at T = 0.7
PROMPTS = ROOT / "prompts" / "qa.jsonl"
SMALL = SamplingCheck(samples=150)


# ------------------------------------------------------------------------------------------------ the statistic


@pytest.mark.parametrize("x, dof", [(3.841, 1), (5.991, 2), (7.815, 3), (9.488, 4), (18.307, 10), (124.342, 100)])
def test_the_survival_function_at_the_tables_5_percent_points(x, dof):
    assert chi2_sf(x, dof) == pytest.approx(0.05, abs=2e-4)


def test_the_survival_function_by_hand():
    assert chi2_sf(2.0, 2) == pytest.approx(np.exp(-1.0))  # k = 2: exp(-x/2)
    assert chi2_sf(0.0, 3) == 1.0 and chi2_sf(1e4, 3) == 0.0


def test_a_two_by_two_table_by_hand():
    # every expected count is 10: X^2 = 4 * 10^2 / 10 = 40 on one degree of freedom
    t = homogeneity(Counter(x=20), Counter(y=20))
    assert (t.statistic, t.dof, t.categories) == (pytest.approx(40.0), 1, 2) and t.p_value < 1e-9
    t = homogeneity(Counter(x=10, y=10), Counter(x=5, y=5))
    assert t.statistic == pytest.approx(0.0) and t.p_value == pytest.approx(1.0)


def test_rare_categories_are_pooled_and_rare_sequences_become_their_prefixes():
    t = homogeneity(Counter(x=10, y=10, r=1, s=2), Counter(x=10, y=10, t=1), min_count=5)
    assert (t.categories, t.pooled) == (3, 4)
    a = Counter({(0, (1, 2, 3)): 4, (0, (1, 2, 4)): 1, (0, (1, 5, 6)): 1, (0, (7, 8, 9)): 10})
    b = Counter({(0, (1, 2, 4)): 2, (0, (1, 5, 6)): 1, (0, (7, 8, 9)): 9, (0, (2, 2, 2)): 1})
    ca, cb = coarsen(a, b, 5)
    # (1, 2, 3) and (1, 2, 4) are rare: they count as "1, 2, then a rare token" (7 samples); (1, 5, 6) falls to
    # "1, then ..." (2, still rare, left for the pooled category); (7, 8, 9) is frequent and stays
    assert ca == Counter({(0, (7, 8, 9)): 10, (0, (1, 2, "...")): 5, (0, (1, "...")): 1})
    assert cb == Counter({(0, (7, 8, 9)): 9, (0, (1, 2, "...")): 2, (0, (1, "...")): 1, (0, (2, "...")): 1})


@given(st.dictionaries(st.integers(0, 6), st.integers(1, 40), min_size=2))
def test_the_same_histogram_twice_is_homogeneous(counts):
    t = homogeneity(Counter(counts), Counter(counts), min_count=1)
    assert t.statistic == pytest.approx(0.0, abs=1e-9) and t.p_value == pytest.approx(1.0)


@given(st.floats(0.01, 200.0), st.floats(0.01, 50.0), st.integers(1, 60))
def test_the_survival_function_decreases(x, dx, dof):
    # up to rounding: near 1 the terms of the sum are added in double precision
    assert 0.0 <= chi2_sf(x + dx, dof) <= chi2_sf(x, dof) + 1e-12 and chi2_sf(x, dof) <= 1.0


# ------------------------------------------------------------------------------------------------ on the tiny pair


@pytest.fixture(scope="module")
def trained():
    from tracer.pair import load_pair
    from validate.sampling_check import prompt_ids

    pair = load_pair(str(MODEL))
    return pair, prompt_ids(pair, [PROMPTS], 1)


def eager(tree, logits, sampler, request, root_index):
    """A biased verifier: it accepts a drafted child whenever the draft gives it more probability than the target
    does, and otherwise verifies target-only."""
    p = sampler.probs(logits).cpu().numpy()
    q = np.exp(tree.draft_logprob.astype(np.float64))
    out, v = [], 0
    while True:
        kids = [c for c in range(len(tree)) if tree.parents[c] == v]
        over = [c for c in kids if q[c] > p[v, tree.tokens[c]]]
        if over:
            v = over[0]
            out.append(int(tree.tokens[v]))
            continue
        y = int(sampler.draw(logits[v:v + 1], request, np.array([root_index + 1 + tree.depths[v]]))[0])
        out.append(y)
        nxt = [c for c in kids if tree.tokens[c] == y]
        if not nxt:
            return out
        v = nxt[0]


def test_target_only_verification_samples_the_targets_distribution(trained):
    pair, prompts = trained
    out = run_check(pair, prompts, SMALL, target_only)
    assert out.passed and out.test.p_value >= SMALL.alpha and out.test.dof >= 10
    assert sum(out.plain.values()) == sum(out.speculative.values()) == SMALL.samples


def test_a_verifier_that_trusts_the_draft_is_caught(trained):
    pair, prompts = trained
    out = run_check(pair, prompts, SMALL, eager)
    assert not out.passed and out.test.p_value < 1e-6


def test_the_command_passes_and_says_what_it_tested(capsys):
    code = main(["sampling-check", "--model", str(MODEL), "--prompts", str(PROMPTS), "--samples", "60", "--tokens", "2"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.startswith("sampling-check: 1 prompt(s) x 60 samples per arm of the first 2 tokens at T=0.7")
    assert "PASS, same distribution" in out and "chi-square " in out


@pytest.mark.parametrize("args, message", [
    (["--temperature", "0"], "at 0 there is nothing to sample"),
    (["--alpha", "0"], "--alpha 0.0: must be in (0, 1)"),
    (["--prompts", "nowhere.jsonl"], "no such file or directory"),
])
def test_bad_input_is_one_line_exit_2(args, message, capsys):
    base = {"--model": str(MODEL), "--prompts": str(PROMPTS)}
    for k, v in zip(args[::2], args[1::2]):
        base[k] = v
    assert main(["sampling-check", *[x for kv in base.items() for x in kv]]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("validate: error: ") and message in err and "\n" not in err
