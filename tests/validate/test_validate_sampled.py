"""`validate run` at temperature > 0: the trace, the reference and every policy sampled with one sampler and seed."""

from __future__ import annotations

import json

import pytest

from tracer.sampler import Sampler
from validate.cli import main
from validate.clock import WallClock
from validate.decode import SpecDecoder, plain
from validate.live import Selector
from ecosim.policies import PolicySpec
from vhelpers import TREE

TREE_FLAGS = ["--depth", str(TREE["depth"]), "--topk", str(TREE["topk"]), "--max-nodes", str(TREE["max_nodes"])]
HOT = Sampler(temperature=0.2, seed=3)  # the random tiny target: its draws differ from its argmax, its drafts are accepted


def test_plain_sampling_follows_the_seed_and_differs_from_greedy(self_pair):
    prompt = [1, 40, 41, 42, 43]
    a = plain(self_pair.target.model, prompt, 12, self_pair.eos_ids, sampler=HOT, request=0)
    assert a == plain(self_pair.target.model, prompt, 12, self_pair.eos_ids, sampler=HOT, request=0)
    assert a != plain(self_pair.target.model, prompt, 12, self_pair.eos_ids)  # greedy
    assert a != plain(self_pair.target.model, prompt, 12, self_pair.eos_ids, sampler=HOT, request=1)


@pytest.mark.parametrize("spec", [PolicySpec("ar"), PolicySpec("confidence", 4), PolicySpec("confidence", 1000)],
                         ids=lambda s: s.label())
def test_speculative_sampling_draws_the_plain_samples(self_pair, self_trace, spec):
    """Target-only verification with common random numbers: the tokens equal plain sampling's, index for index,
    while whole drafted paths are accepted (the target drafts for itself)."""
    dec = SpecDecoder(self_pair, WallClock(), TREE["depth"], TREE["topk"], TREE["max_nodes"], 12, sampler=HOT)
    sel = Selector(spec, self_pair.shape, self_trace)
    prompt = [1, 40, 41, 42, 43]
    got = dec.decode(sel, 0, prompt)
    assert got.tokens == plain(self_pair.target.model, prompt, 12, self_pair.eos_ids, sampler=HOT, request=0)
    if spec.speculative:
        assert max(s.accepted for s in got.steps) >= 1


def test_run_at_temperature_is_lossless_and_predicts_the_accepted_length(tmp_path, tiny_pair_dir, prompts_path, capsys):
    run = tmp_path / "run"
    args = ["run", "--model", str(tiny_pair_dir), "--draft", str(tiny_pair_dir / "target"), "--prompts", str(prompts_path),
            "--max-prompts", "2", "--policy", "confidence", "--budget", "4", "--out", str(run), "--max-new-tokens", "10",
            "--repeats", "1", "--calib-tokens", "1,4", "--calib-repeats", "1", "--quiet", "--no-fail",
            "--temperature", "0.2", "--seed", "3", *TREE_FLAGS]
    code = main(args)
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "lossless: yes (every policy's tokens equal plain sampled (T=0.2, seed 3, target-only) decoding's)" in out.out
    assert "accepted length (tokens per step, measured vs simulated): confidence b=4 " in out.out
    manifest = json.loads((run / "trace" / "manifest.json").read_text())
    assert manifest["decoding"] == HOT.decoding()
    doc = json.loads((run / "comparison.json").read_text())
    assert doc["decoding"] == HOT.decoding() and doc["lossless"] and doc["trace_matches_greedy"]
    conf = doc["policies"][0]
    assert conf["tokens_per_step"] > 1.0  # drafts were accepted at T > 0
    assert conf["simulated_tokens_per_step"] == pytest.approx(conf["tokens_per_step"], rel=0.05)
    assert doc["targets"]["accepted_length_pct"]["met"]

    # the trace is the run's: a rerun on it with another temperature is refused in one line, before any work
    code = main(["run", "--model", str(tiny_pair_dir), "--draft", str(tiny_pair_dir / "target"), "--trace",
                 str(run / "trace"), "--policy", "ar", "--out", str(tmp_path / "r2"), "--temperature", "0.7"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "was recorded with decoding" in err and "\n" not in err
    assert not (tmp_path / "r2").exists()


def test_sampling_options_need_a_temperature(tmp_path, capsys):
    code = main(["run", "--model", "x", "--out", str(tmp_path / "r"), "--policy", "ar", "--prompts", str(tmp_path),
                 "--top-p", "0.9"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "--top-p and --sample-top-k apply to sampling" in err
