"""Published acceptance lengths (ecosim/catalog/accept_table.py) and `synth` using them, as a spec.

The table is read from the published measurements (one home per figure); `synth --draft D` without
`--accept-len` matches the figure of D on the same model (else its family) measured at the trace's temperature, on
the tree it was measured with, and prints where it comes from; without `--draft` it only points at it; where none
exists it says so.
"""

from __future__ import annotations

import json

import numpy as np

from ecosim.catalog.accept_table import choose, lookup, table
from ecosim.catalog.models import get_model
from ecosim.cli import main
from ecosim.trace.io import read_trace


def test_the_table_is_the_published_rows_that_carry_an_acceptance_length():
    entries = table()
    gpt = [e for e in entries if e.model == "gpt-oss-120b" and e.draft == "eagle3"]
    assert [(e.steps, e.topk, e.draft_tokens, e.accept_len, e.temperature) for e in gpt] == [(3, 1, 4, 2.41, 0.7)]
    mtp = sorted((e.steps, e.accept_len) for e in entries if e.draft == "mtp" and "trtllm" in e.row)
    assert mtp == [(1, 1.92), (2, 2.58), (3, 2.82), (4, 2.99), (5, 3.01)]  # one figure per setting, not per metric
    assert all(e.url.startswith("http") for e in entries)


def test_lookup_prefers_the_model_then_its_family_and_choose_the_users_setting():
    same, whence = lookup(get_model("gpt-oss-120b"), "eagle3", 0.7)
    assert {e.model for e in same} == {"gpt-oss-120b"} and whence == "measured on gpt-oss-120b"
    greedy, whence = lookup(get_model("gpt-oss-120b"), "eagle3")  # none greedy: the sampled one, as a lower bound
    assert greedy == same and whence.endswith("measured while sampling at T=0.7: a lower bound for greedy decoding")
    assert lookup(get_model("gpt-oss-120b"), "eagle3", 1.0) == ([], "")  # sampled at T: only a figure measured at T
    fam, whence = lookup(get_model("qwen3-235b-a22b"), "eagle3")
    assert {e.model for e in fam} == {"qwen3-30b-a3b"} and "qwen3_moe family" in whence
    assert choose(fam, 3, 1).accept_len == 1.86  # SpecForge's 3/1/4 chain
    largest = choose(fam, None, None)
    assert largest.draft_tokens == max(e.draft_tokens for e in fam)
    assert lookup(get_model("mixtral-8x7b"), "eagle3") == ([], "")


def test_synth_with_a_named_draft_matches_the_published_figure_and_says_where_from(tmp_path, capsys):
    out = tmp_path / "t"
    assert main(["synth", str(out), "--model", "qwen3-30b-a3b", "--draft", "eagle3", "--depth", "3", "--topk", "1",
                 "--requests", "2", "--positions", "40"]) == 0
    said = capsys.readouterr().out
    assert "acceptance: 1.86 tokens/step, published for qwen3-30b-a3b" in said and "specforge339-30ba3b-eagle3-s3k1n4" in said
    m = read_trace(out, validate=False).manifest
    assert m["draft"]["accept_len"] == 1.86
    assert (m["tree"]["depth"], m["tree"]["topk"], m["tree"]["max_nodes"]) == (3, 1, 4)


def test_a_figure_measured_while_sampling_serves_only_a_trace_at_that_temperature(tmp_path, capsys):
    """SpecDrift's gpt-oss-120b EAGLE-3 figure (2.41) was measured at T=0.7: a greedy trace, with no greedy figure
    published, takes it as what it is, a lower bound (sampling lowers acceptance), and says so; a trace sampled at 0.7
    takes it as measured (and then needs no --accept-len); at T=1 nothing is published."""
    assert main(["synth", str(tmp_path / "g"), "--model", "gpt-oss-120b", "--draft", "eagle3", "--requests", "1",
                 "--positions", "20"]) == 0
    said = capsys.readouterr().out
    assert "acceptance: 2.41 tokens/step at T=0.7, published for gpt-oss-120b" in said
    assert "measured while sampling at T=0.7: a lower bound for greedy decoding" in said
    assert read_trace(tmp_path / "g").manifest["decoding"]["mode"] == "greedy"
    out = tmp_path / "s"
    assert main(["synth", str(out), "--model", "gpt-oss-120b", "--draft", "eagle3", "--temperature", "0.7",
                 "--requests", "2", "--positions", "40"]) == 0
    said = capsys.readouterr().out
    assert "acceptance: 2.41 tokens/step at T=0.7, published for gpt-oss-120b" in said
    m = read_trace(out).manifest
    assert m["draft"]["accept_len"] == 2.41 and m["decoding"]["temperature"] == 0.7
    assert (m["tree"]["depth"], m["tree"]["topk"], m["tree"]["max_nodes"]) == (3, 1, 4)
    assert main(["synth", str(tmp_path / "h"), "--model", "gpt-oss-120b", "--draft", "eagle3", "--temperature", "1.0",
                 "--requests", "1", "--positions", "20"]) == 2  # nothing published at T=1 for a batch-1 setting
    assert "--accept-len measured at that temperature" in capsys.readouterr().err and not (tmp_path / "h").exists()


def test_synth_without_a_draft_keeps_accept_per_node_and_points_at_the_figure(tmp_path, capsys):
    out = tmp_path / "t"
    assert main(["synth", str(out), "--model", "qwen3-30b-a3b", "--requests", "1", "--positions", "20"]) == 0
    said = capsys.readouterr().out
    assert "add --draft eagle3 to match it" in said
    m = json.loads((out / "manifest.json").read_text())
    assert m["draft"]["accept_len"] is None and m["draft"]["accept"] == 0.8


def test_no_published_figure_is_said_and_untuned_routing_warned(tmp_path, capsys):
    out = tmp_path / "t"
    assert main(["synth", str(out), "--model", "olmoe-1b-7b", "--draft", "eagle3", "--preset", "none",
                 "--requests", "1", "--positions", "20"]) == 0
    captured = capsys.readouterr()
    assert "no published figure for eagle3 on olmoe-1b-7b" in captured.out
    assert "untuned default knobs" in captured.err and len(captured.err.strip().splitlines()) == 1


def test_a_separate_draft_model_is_priced_from_its_own_config(tmp_path, capsys):
    """Qwen3-0.6B's sizes: 28 layers of GQA 16/8 heads of 128 and a 3,072-wide MLP at hidden 1,024, vocabulary
    151,936: 28 x (1024*16*128*2 + 1024*8*128*2 + 3*1024*3072) + 151936*1024 = 595,984,384 parameters, BF16."""
    cfg = {"model_type": "qwen3", "num_hidden_layers": 28, "hidden_size": 1024, "intermediate_size": 3072,
           "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
           "tie_word_embeddings": True, "dtype": "bfloat16"}
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "t"
    assert main(["synth", str(out), "--model", "qwen3-30b-a3b", "--draft-model", str(tmp_path / "d"),
                 "--accept-len", "2.5", "--requests", "1", "--positions", "20"]) == 0
    d = json.loads((out / "manifest.json").read_text())["draft"]
    assert (d["kind"], d["params"], d["bytes"], d["layers"]) == ("model", 595_984_384, 2 * 595_984_384, 28)
    capsys.readouterr()
    assert main(["synth", str(tmp_path / "u"), "--model", "qwen3-30b-a3b", "--draft", "model"]) == 2
    assert "--draft-model PATH" in capsys.readouterr().err and not (tmp_path / "u").exists()
    assert main(["synth", str(tmp_path / "v"), "--model", "qwen3-30b-a3b", "--draft-model",
                 str(tmp_path / "nothing")]) == 2


def test_synth_at_a_temperature_is_labelled_sampled_and_needs_its_acceptance(tmp_path, capsys):
    out = tmp_path / "t"
    assert main(["synth", str(out), "--model", "olmoe-1b-7b", "--temperature", "0.7", "--requests", "1",
                 "--positions", "20"]) == 2
    assert "--accept-len measured at that temperature" in capsys.readouterr().err and not out.exists()
    assert main(["synth", str(out), "--model", "olmoe-1b-7b", "--temperature", "0.7", "--accept-len", "2.3",
                 "--requests", "1", "--positions", "20"]) == 0
    m = read_trace(out).manifest  # validated: a version-3 sampled trace
    assert m["version"] == 3 and m["decoding"]["mode"] == "sample" and m["decoding"]["temperature"] == 0.7


def test_a_chain_s_length_over_its_steps_by_hand():
    from ecosim.catalog.accept_table import chain_length

    assert chain_length(0.5, 1.0, 2) == 1 + 0.5 + 0.25  # every level alike: a geometric sum
    assert abs(chain_length(0.8, 0.5, 3) - (1 + 0.8 + 0.64 * 0.5 + 0.512 * 0.125)) < 1e-12  # level d: 0.8 x 0.5^(d-1)


def test_the_falloff_is_fitted_on_one_source_s_curve_of_step_counts():
    from ecosim.catalog.accept_table import chain_length, falloff

    fall = falloff(lookup(get_model("deepseek-v3.1"), "mtp")[0])
    assert [e.steps for e in fall.points] == [1, 2, 3, 4, 5] and len({e.url for e in fall.points}) == 1
    assert 0.6 < fall.decay < 0.85 and 0.85 < fall.first <= 1.0  # saturating: 1.92 ... 3.01
    assert fall.error <= 0.05 and all(abs(chain_length(fall.first, fall.decay, e.steps) - e.accept_len) <= fall.error + 1e-12
                                      for e in fall.points)
    assert falloff(lookup(get_model("gpt-oss-120b"), "eagle3")[0]) is None  # one figure: no curve to fit


def test_synth_matches_a_figure_at_its_own_depth_and_grows_deeper_levels_with_the_falloff(tmp_path, capsys):
    """MTP's own figure (1.875 tokens/step, one MTP module) is matched on a chain of one; a deeper chain's
    levels then fall off as the published curve of step counts does, so cutting the trace to S steps
    gives the saturating lengths of that curve's shape."""
    from ecosim.simulate import at_steps
    from ecosim.tree import Trees

    out = tmp_path / "t"
    assert main(["synth", str(out), "--model", "deepseek-v3.1", "--draft", "mtp", "--depth", "5", "--topk", "1",
                 "--max-nodes", "5", "--requests", "4", "--positions", "150"]) == 0
    assert "acceptance falls with depth: each draft level accepted" in capsys.readouterr().out
    trace = read_trace(out)
    assert 0.6 < trace.manifest["draft"]["accept_decay"] < 0.85
    lengths = [1 + float(Trees(at_steps(trace, s)).accept_len.mean()) for s in range(1, 6)]
    assert abs(lengths[0] - 1.875) < 0.06  # the figure, at the depth it was measured at
    gains = np.diff(lengths)
    assert np.all(gains > 0) and np.all(np.diff(gains) < 0.02)  # saturating: each step adds less
    assert main(["synth", str(tmp_path / "flat"), "--model", "deepseek-v3.1", "--draft", "mtp", "--depth", "5", "--topk", "1",
                 "--max-nodes", "5", "--requests", "4", "--positions", "150", "--accept-decay", "1"]) == 0
    flat = read_trace(tmp_path / "flat")
    assert "accept_decay" not in flat.manifest["draft"]  # every level alike, as given
    assert abs(1 + float(Trees(at_steps(flat, 1)).accept_len.mean()) - 1.875) < 0.06
