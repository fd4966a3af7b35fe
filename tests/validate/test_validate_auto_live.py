"""The self-tuning policy decoded for real: `ecospec-auto` selects live with the profile's cost model."""

from __future__ import annotations

import json

from validate.cli import main
from vhelpers import TREE

TREE_FLAGS = ["--depth", str(TREE["depth"]), "--topk", str(TREE["topk"]), "--max-nodes", str(TREE["max_nodes"])]


def test_ecospec_auto_runs_live_and_walks_the_replays_steps(tmp_path, tiny_pair_dir, prompts_path, capsys):
    prof = tmp_path / "profile.json"
    assert main(["calibrate", "--model", str(tiny_pair_dir), "--out", str(prof), "--tokens", "1,4,11", "--levels", "2",
                 "--prompts", str(prompts_path), "--contexts", "24", "--repeats", "2", "--quiet", *TREE_FLAGS]) == 0
    doc = json.loads(prof.read_text())
    doc["draft_time_s"] = 1e-6  # a free draft: speculating pays, so the policy grows trees instead of declining
    prof.write_text(json.dumps(doc))
    run = tmp_path / "run"
    cmd = ["run", "--model", str(tiny_pair_dir), "--draft", str(tiny_pair_dir / "target"), "--prompts", str(prompts_path),
           "--max-prompts", "2", "--policy", "ecospec-auto", "--predictor", "oracle", "--value", "raw",
           "--hardware", str(prof), "--no-retime", "--out", str(run), "--max-new-tokens", "10", "--repeats", "1",
           "--quiet", "--no-fail", *TREE_FLAGS]
    assert main(cmd) == 0, capsys.readouterr().err
    assert "lossless: yes" in capsys.readouterr().out
    doc = json.loads((run / "comparison.json").read_text())
    auto = doc["policies"][0]
    assert auto["policy"] == "ecospec-auto" and auto["tokens"] == 20 and auto["measured_time_per_token_s"] > 0
    # the same selections as the simulator's replay of the trace recorded on the spot (the self-drafting pair's
    # live trees are the recorded ones): the same steps and experts, so only the time per step can differ
    assert auto["steps"] == auto["simulated_steps"] and auto["tokens_per_step"] > 1
    assert auto["experts_per_step"] == auto["simulated_experts_per_step"]


def test_ecospec_auto_needs_a_profile_and_what_it_can_run(tmp_path, tiny_pair_dir, prompts_path, capsys):
    base = ["run", "--model", str(tiny_pair_dir), "--prompts", str(prompts_path), "--policy", "ecospec-auto",
            "--out", str(tmp_path / "r")]
    assert main([*base, "--predictor", "oracle", "--value", "raw"]) == 2
    assert "selects by the cost model: give the profile it prices with (--hardware" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
