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
# engine release adds per layer) joining the terms gave these, and a time that decimal parsing makes exact (30us was
# 2.9999999999999997e-05) is another value.
SELECTIONS = {"budget": [8], "lam": [0.5], "predictor": ["oracle"], "score": ["difference"], "value": ["calibrated"]}
PINNED = {
    "default": (g.Settings(), None, "hbm",
                ["2fe26189b4266d3e9b7008710651607a", "e01d13bd8f9e97e813e8497696247a32",
                 "d170c6f82455db037c0c6290d2e608d5", "1b3ef7cfdc41052ac347404ff541f639"]),
    "eager": (g.Settings(cost_config({"mode": "full", "bw_efficiency": "0.7", "draft_time_s": "1.5ms", "serving": "eager"}),
                         "989TFLOP/s"), 3.3e12, "ep:8",
              ["c996e16cad1376d103abf74284dc7649", "1d4ff6b20d408fab18a2f398f494ee58",
               "56b14870a2b24e0a44d1f78c6044645a", "81de3e4c574885c50ee56c1e381abaf6"]),
    "experts-only": (g.Settings(cost_config({"mode": "experts-only"})), None, "offload:4:lru",
                     ["57f88fc03ac004f5179b16ef8b262e90", "261bd99bbe2b875c4d519d236f0201d1",
                      "63961cd1a9f7068c231399f696f4c2bb", "07d6e1dbe0ca2c168e9d89918e5e86e0"]),
    "zero": (g.Settings(cost_config({"compute_efficiency": "0.5", "step_overhead_s": "0us", "draft_time_s": "0s"})),
             4.8e12, "hbm",
             ["258cb539626b7c497aaadd90982c3975", "7322c023bd3aceeb72b26bf11962cf3b",
              "076ac963cd812ed208f44c4924712609", "f66e06f95a145a3802c001ba4c6a1e1b"]),
    "30us, now exact": (g.Settings(cost_config({"step_overhead_s": "30us"})), None, "hbm",
                        ["1dd56a5b65898cc294b594364322c4b3", "9baac7b6feec519c9aea5e4175f8fc5f",
                         "0a31894680a6876919248568b66820d6", "b68d189260212bcbfa868f448ba05322"]),
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
    from ecosim.cost import _default_serving
    def ids(settings):
        grid = g.Grid(["ar"], SELECTIONS, ["h200"], [None], ["hbm"], settings)
        return [c.id for c in grid.configs([g.TraceRef("/traces/qa", "f" * 16)])]
    refit = dataclasses.replace(_default_serving(), kernel_latency_s=_default_serving().kernel_latency_s * 1.01)
    assert ids(g.Settings(CostConfig(serving=refit))) != ids(g.Settings())
    assert ids(g.Settings(CostConfig(serving=_default_serving()))) != ids(g.Settings(CostConfig(serving=refit)))
