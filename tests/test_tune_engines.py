"""`tune` recommends what the user's engine runs (ecosim/launch.py): its `best` is plain decoding or a
static setting of that engine, in its own flags, never the adaptive policy, which is reported beside it."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import tiny_trace
from ecosim.cli import main
from ecosim.launch import ENGINES, Setting, engine_for, get_engine
from ecosim.errors import EcoSimError
from ecosim.metrics import Row
from ecosim.tune import Candidate, Static, recommend

KINDS = ["eagle3", "mtp", "model", "early-exit"]


def _row(time_s: float) -> Row:
    return Row("t", "real", 1, 100, 50, 100, 0, 0.0, 0.0, time_s)


def test_each_engine_runs_its_own_modes_in_its_own_flags():
    chain, tree = Setting(3, 1, 4), Setting(3, 4, 16)
    eagle, mtp, model = {"kind": "eagle3"}, {"kind": "mtp"}, {"kind": "model", "bytes": 1}
    sg, vl, tr, lc = (ENGINES[n] for n in ("sglang", "vllm", "trtllm", "llama.cpp"))
    assert sg.runs(tree, eagle) and not vl.runs(tree, eagle) and not tr.runs(tree, eagle) and not lc.runs(tree, model)
    assert sg.flags(tree, mtp, None) == ("--speculative-algorithm NEXTN --speculative-num-steps 3 --speculative-eagle-topk 4 "
                                         "--speculative-num-draft-tokens 16")
    assert vl.flags(chain, eagle, "/d") == '--speculative-config \'{"method": "eagle3", "model": "/d", "num_speculative_tokens": 3}\''
    assert vl.flags(chain, mtp, None) == '--speculative-config \'{"method": "mtp", "num_speculative_tokens": 3}\''
    assert "decoding_type: MTP, num_nextn_predict_layers: 3" in tr.flags(chain, mtp, None)
    assert "decoding_type: Eagle3, max_draft_len: 3, speculative_model_dir: DRAFT_PATH" in tr.flags(chain, eagle, None)
    assert lc.flags(chain, model, "d.gguf") == "-md d.gguf --draft-max 3 --draft-min 3 --draft-p-min 0"
    assert lc.flags(chain, eagle, None) is None  # a separate draft model only
    assert sg.flags(chain, {"kind": "early-exit"}, None) is None  # no engine mode for it


def test_the_serving_profile_names_the_default_engine():
    assert engine_for("vllm-v1", host=False).name == "vllm" and engine_for("trtllm", host=False).name == "trtllm"
    assert engine_for("ik_llama.cpp", host=True).name == "llama.cpp" and engine_for("cuda-graphs", host=False).name == "sglang"
    assert engine_for("my-profile.json", host=True).name == "llama.cpp"  # experts in host RAM: llama.cpp's setups
    assert engine_for("my-profile.json", host=False).name == "sglang"
    with pytest.raises(EcoSimError, match="expected one of sglang, vllm, trtllm, llama.cpp"):
        get_engine("tgi")


@given(times=st.dictionaries(st.tuples(st.integers(1, 4), st.sampled_from([1, 2, 4]), st.integers(2, 12)),
                             st.floats(0.1, 10.0), min_size=1, max_size=12),
       ar=st.floats(0.1, 10.0), auto=st.floats(0.05, 10.0), kind=st.sampled_from(KINDS),
       engine=st.sampled_from(list(ENGINES)))
def test_best_is_always_a_setting_the_engine_runs_and_the_fastest_of_those(times, ar, auto, kind, engine):
    e, draft = ENGINES[engine], {"kind": kind, "bytes": 1 if kind == "model" else 0}
    cands = {"ar": Candidate("ar", _row(ar)), "auto S=2": Candidate("ecospec-auto (token) S=2", _row(auto), steps=2)}
    for (s, k, n), t in times.items():
        cands[f"static {s} {k} {n}"] = Candidate("static", _row(t), Static(s, k, n), s)
    doc = recommend(cands, e, draft)
    runnable = [c for c in cands.values() if c.static is not None and e.runs(c.static, draft)]
    assert doc["best"] in ("ar", "static") and doc["engine"] == engine
    assert doc["best_ms_per_token"] == pytest.approx(min([ar, *(c.row.time_s for c in runnable)]) / 100 * 1e3)
    if doc["best"] == "static":
        st_ = doc["setting"]
        assert e.runs(Setting(st_["steps"], st_["topk"], st_["draft_tokens"]), draft) and doc["flags"]
    else:
        assert doc["flags"] is None and not doc["speculation_pays"]
    assert doc["auto"]["gain_over_best"] == pytest.approx(doc["best_ms_per_token"] / doc["auto_ms_per_token"])


def test_tune_gives_each_engines_flags_and_refuses_an_unknown_one(write, capsys):
    path = str(write(tiny_trace(12, requests=3, positions=40)))
    for engine, needle in (("vllm", "num_speculative_tokens"), ("trtllm", "max_draft_len"), ("sglang", "--speculative-num-steps")):
        assert main(["tune", path, "--engine", engine, "--predictor", "oracle", "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["engine"] == engine and doc["best"] in ("ar", "static")
        assert doc["flags"] is None if doc["best"] == "ar" else needle in doc["flags"]
    assert main(["tune", path, "--engine", "vllm", "--predictor", "oracle"]) == 0
    out = capsys.readouterr().out
    assert "recommendation for vllm:" in out and "beside it, adaptive ecospec-auto" in out
    assert main(["tune", path, "--engine", "tgi"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--engine 'tgi'" in err
