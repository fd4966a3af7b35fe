"""CostConfig's fields are the cost options of every command that prices steps: one declaration
(flag, help with units, parser), one default, one precedence rule, and unchanged sweep ids."""

from __future__ import annotations

import dataclasses
import json

import pytest
import typer.main

from ecosim.catalog.devices import get_device
from ecosim.catalog.models import get_model
from ecosim.catalog.serving import ServingProfile
from conftest import tiny_trace
from ecosim.cli import app, main
from ecosim.cli.options import cost_config
from ecosim.cost import CostConfig, CostModel, Terms
from ecosim.errors import EcoSimError
from ecosim.options import field_options
from ecosim.sweep import grid as g

COMMANDS = (("replay",), ("sweep",), ("tune",), ("predictor", "compare"))


def _params(*path: str) -> dict[str, object]:
    import ecosim.cli.predictor, ecosim.cli.replay, ecosim.cli.sweep, ecosim.cli.tune  # noqa: F401

    cmd = typer.main.get_command(app)
    for name in path:
        cmd = cmd.commands[name]  # type: ignore[attr-defined]
    return {o: p for p in cmd.params for o in p.opts}


@pytest.mark.parametrize("path", COMMANDS)
def test_every_field_is_an_option_of_every_pricing_command_with_no_default_of_its_own(path):
    params = _params(*path)
    opts = field_options(CostConfig)
    assert {o.name for o in opts} == {f.name for f in dataclasses.fields(CostConfig)}
    for o in opts:
        p = params[o.flag]
        assert p.default is None and p.help == o.help  # not given: the dataclass (or profile) decides
        assert o.help.endswith(".") and "default" in o.help.lower()


def test_an_explicit_zero_is_given_and_beats_the_profile():
    prof = ServingProfile(name="hand", step_fixed_s=1.0, collective_latency_s=0.5, bw_efficiency=0.5)
    cfg = dataclasses.replace(cost_config({"step_overhead_s": "0us", "link_latency_s": "0s", "draft_time_s": "0ms"}),
                              serving=prof)
    assert (cfg.step_overhead_s, cfg.link_latency_s, cfg.draft_time_s) == (0.0, 0.0, 0.0)
    t = Terms.resolve(cfg, get_device("h200"))
    assert (t.step_fixed_s, t.collective_latency_s, t.draft_time_s, t.bw_efficiency) == (0.0, 0.0, 0.0, 0.5)
    assert cost_config({}) == CostConfig() and cost_config(None) == CostConfig()


# CostConfig field -> (Terms field, the hardware profile's field or None, the serving profile's field)
LAYERS = {
    "bw_efficiency": ("bw_efficiency", "bw_efficiency", "bw_efficiency", "0.3", 0.3, 0.6, 0.9),
    "compute_efficiency": ("compute_efficiency", "compute_efficiency", "compute_efficiency", "0.3", 0.3, 0.6, 0.9),
    "step_overhead_s": ("step_fixed_s", "step_overhead_s", "step_fixed_s", "3us", 3e-6, 6e-6, 9e-6),
    "link_latency_s": ("collective_latency_s", None, "collective_latency_s", "3us", 3e-6, None, 9e-6),
    "overlap": ("overlap", "overlap", "overlap", "sum", "sum", "max", "sum"),
    "draft_time_s": ("draft_time_s", "draft_time_s", None, "3ms", 3e-3, 6e-3, None),
}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_one_rule_for_every_field_cli_beats_hardware_profile_beats_serving_profile(name):
    term, hw_field, serving_field, text, cli, hw, serving = LAYERS[name]
    prof = ServingProfile(name="p", **({serving_field: serving} if serving_field else {}))
    base = get_device("h200")
    measured = base.replace(**{hw_field: hw}) if hw_field else base
    assert getattr(Terms.resolve(cost_config({name: text, "serving": None}), measured), term) == cli
    cfg = CostConfig(serving=prof)
    if hw_field:
        assert getattr(Terms.resolve(cfg, measured), term) == hw
    if serving_field:
        assert getattr(Terms.resolve(cfg, base), term) == serving
    given = dataclasses.replace(cost_config({name: text}), serving=prof)
    assert getattr(Terms.resolve(given, measured), term) == cli


def test_a_value_that_does_not_parse_names_its_flag():
    for texts, flag in (({"bw_efficiency": "2"}, "--bw-efficiency"), ({"mode": "cheap"}, "--cost"),
                        ({"step_overhead_s": "30"}, "--step-overhead"), ({"overlap": "both"}, "--overlap"),
                        ({"serving": "nope"}, "--profile")):
        with pytest.raises(EcoSimError, match=flag):
            cost_config(texts)


def test_a_time_option_is_the_exact_float():
    assert cost_config({"step_overhead_s": "30us"}).step_overhead_s == 30e-6
    c = CostModel(get_model("qwen3-30b-a3b"), get_device("h200"), config=cost_config({"step_overhead_s": "30us"}))
    assert c.terms.step_fixed_s == 30e-6


# Sweep configuration ids, pinned so that a refactor cannot silently change them (a sweep resumes into
# the same rows). They change on purpose when the cost model's resolved terms change: an id covers
# every term (grid.canonical_json), so the refit of the shipped serving profiles (speculative step
# priced from physics) gave new values, the serving profile's extra_layer_kernels (kernels an older
# engine release adds per layer) joining the terms gave others, the refit after fidelity's speculative rows took
# their shape's routing preset gave these, and a time that decimal parsing makes exact (30us was
# 2.9999999999999997e-05) is another value.
SELECTIONS = {"budget": [8], "lam": [0.5], "predictor": ["oracle"], "score": ["difference"], "value": ["calibrated"]}
PINNED = {
    "default": (g.Settings(), None, "hbm",
                ["03d25dce3ee65b711ae32d3ce07cc7b7", "e6dbcd057210b41ca773c0167a523f99",
                 "bf1e27b1e1fe1fe1c79a9118d91dc5d5", "1e3c5d9ab1e72d8594756fcee57934a7"]),
    "eager": (g.Settings(cost_config({"mode": "full", "bw_efficiency": "0.7", "draft_time_s": "1.5ms", "serving": "eager"}),
                         "989TFLOP/s"), 3.3e12, "ep:8",
              ["1896055be92e8d0a9b086005e4030406", "83fed54fae21915bf10c05e6ee50c6e6",
               "d6e86f945a46b3cbeeffe85d59cc29a2", "4c4625117c8136d2c96052d7a8810e04"]),
    "experts-only": (g.Settings(cost_config({"mode": "experts-only"})), None, "offload:4:lru",
                     ["07f8253026b617fa6111113522051443", "5cf809ac503f93e53f1d0b7e4976d98a",
                      "8b9e0529e3ec70904a9e8bba37662470", "7a72aa7fa3fc4b136c34697d567c2a82"]),
    "zero": (g.Settings(cost_config({"compute_efficiency": "0.5", "step_overhead_s": "0us", "draft_time_s": "0s"})),
             4.8e12, "hbm",
             ["566f480b1c8c1d87b9e36c4e20f5a85e", "90cc6f34a478da482d1d277dc9c7fe42",
              "6d1a7c5421403a6c86eae8e531d26f47", "cebe709d128e05257311dfe0c6adc63f"]),
    "30us, now exact": (g.Settings(cost_config({"step_overhead_s": "30us"})), None, "hbm",
                        ["b21dacd0932c7931ca15fd3c6e22aa5d", "8287d7f0174ddd76984fd70bfef3de84",
                         "9d344d78e3dd0ba8bd0532856063ff71", "2993033eb77ead413fe2c37969831094"]),
}


@pytest.mark.parametrize("case", sorted(PINNED))
def test_sweep_config_ids_are_pinned(case):
    settings, bw, placement, want = PINNED[case]
    grid = g.Grid(["ar", "confidence", "ecospec"], SELECTIONS, ["h200"], [bw], [placement], settings)
    assert [c.id for c in grid.configs([g.TraceRef("/traces/qa", "f" * 16)])] == want


def test_sweep_tune_and_replay_print_the_values_they_used(write, tmp_path, capsys):
    t = str(write(tiny_trace(11)))
    flags = ["--step-overhead", "0s", "--link-latency", "2us", "--bw-efficiency", "0.5", "--overlap", "sum"]
    assert main(["sweep", t, "--out", str(tmp_path / "s"), "--policy", "ar", "--jobs", "1", "--json", *flags]) == 0
    used = json.loads(capsys.readouterr().out)["used"]["h200"]
    assert (used["step_fixed_s"], used["collective_latency_s"], used["bw_efficiency"], used["overlap"]) == (0.0, 2e-6, 0.5, "sum")
    assert main(["sweep", t, "--out", str(tmp_path / "s"), "--policy", "ar", "--jobs", "1", *flags]) == 0
    assert "used on h200: profile cuda-graphs: step fixed 0 us" in capsys.readouterr().out
    assert main(["tune", t, "--predictor", "oracle", "--json", *flags]) == 0
    used = json.loads(capsys.readouterr().out)["used"]
    assert (used["step_fixed_s"], used["collective_latency_s"], used["bw_efficiency"], used["overlap"]) == (0.0, 2e-6, 0.5, "sum")
    assert main(["tune", t, "--predictor", "oracle", *flags]) == 0
    out = capsys.readouterr().out
    assert "used: profile cuda-graphs: step fixed 0 us" in out and "bw eff 0.5" in out and "overlap sum" in out


def test_a_refit_profile_gives_new_ids():
    """A sweep resumed after the serving profile changes recomputes instead of mixing two cost models."""
    from ecosim.cost.terms import _default_serving
    def ids(settings):
        grid = g.Grid(["ar"], SELECTIONS, ["h200"], [None], ["hbm"], settings)
        return [c.id for c in grid.configs([g.TraceRef("/traces/qa", "f" * 16)])]
    refit = dataclasses.replace(_default_serving(), kernel_latency_s=_default_serving().kernel_latency_s * 1.01)
    assert ids(g.Settings(CostConfig(serving=refit))) != ids(g.Settings())
    assert ids(g.Settings(CostConfig(serving=_default_serving()))) != ids(g.Settings(CostConfig(serving=refit)))
