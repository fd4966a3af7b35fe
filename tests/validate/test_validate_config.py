"""The configs of `validate`: built by keywords, defaults in one place, recording options passed on."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest
import typer.main

from validate.calibrate import CalibConfig


def _defaults(command: str) -> dict[str, object]:
    from validate.cli import app

    return {p.name: p.default for p in typer.main.get_command(app).commands[command].params}


def test_calib_config_takes_keywords_only():
    with pytest.raises(TypeError):
        CalibConfig((1, 2, 4), 4)  # type: ignore[misc]
    assert CalibConfig(levels=2, seed=7).levels == 2


def test_calibrate_defaults_are_the_config_defaults():
    """`validate calibrate`'s options show CalibConfig's defaults; `validate run` calibrates the same sizes."""
    cfg, d = CalibConfig(), _defaults("calibrate")
    assert d["tokens"] == list(map(str, cfg.tokens)) and d["contexts"] == list(map(str, cfg.contexts))
    assert {k: d[k] for k in ("levels", "repeats", "budget", "seed", "depth", "topk", "max_nodes")} == {
        k: getattr(cfg, k) for k in ("levels", "repeats", "budget", "seed", "depth", "topk", "max_nodes")}
    assert _defaults("run")["calib_tokens"] == d["tokens"]


def test_run_passes_every_shared_recording_option(monkeypatch, tmp_path):
    """`validate run` records with every option it shares with `tracer record` (by name), so a
    recording option added to both needs no third edit; out and force are the run's own."""
    import tracer.record
    from ecosim.policies import PolicySpec
    from validate.choice import Choice
    from validate.recorded import record
    from validate.run_config import RunConfig

    seen = {}
    monkeypatch.setattr(tracer.record, "run_record", lambda rc: seen.setdefault("cfg", rc) and Path("x"))
    run = RunConfig(model="m", out=tmp_path, choice=Choice(PolicySpec("ar"), "test"), prompts=[Path("p.jsonl")],
                    draft="d", device="cpu", dtype="float32", attn="eager", threads=3, max_new_tokens=7, max_prompts=2,
                    depth=3, topk=2, max_nodes=5, progress=False, command="validate run ...")
    record(run)
    rc = seen["cfg"]
    shared = {f.name for f in fields(rc)} & {f.name for f in fields(run)}
    assert shared >= {"model", "draft", "device", "dtype", "attn", "threads", "max_new_tokens", "max_prompts", "depth",
                      "topk", "max_nodes", "progress", "command", "prompts", "out", "force"}
    for name in shared - {"out", "force"}:
        assert getattr(rc, name) == getattr(run, name), name
    assert rc.out == tmp_path / "trace" and rc.force is True
