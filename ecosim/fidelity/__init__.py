"""The step model against published measurements (`ecosim fidelity`).

Every row of catalog/data/published.json whose setting the simulator can reproduce (`sim`) is
predicted from a synthetic trace of its model shape (dtype applied; routed as the shape's shipped
preset, fitted to real gpt-oss-20b routing or scaled from it: routing/presets), on its hardware and
placement, after its context:

- plain decode (tok/s or ms/token): `ar` over the trace, seconds per token;
- speculative rows: the generator's acceptance knob is bisected until `confidence` at the row's
  budget (verified tokens - 1) on trees of its depth and top-k accepts the row's mean accept length
  (bonus token included); the speedup is ar's time per token over confidence's, the draft priced
  by its kind (catalog/drafts.py);
- step-time ratios: confidence's seconds per step over ar's (draft included, as the rows are).

A row's `sim.serving` sets the serving-profile terms its engine declares (e.g. `spec_overlap`
false for SGLang before spec v2, whose scheduler cannot overlap a speculative step's host work).
A row of an engine release that launched more kernels per layer than the fused count declares them
(`extra_layer_kernels`, serving.py: counted or estimated from that release's source, its notes say which).
A row's `sim.model` is a catalogue shape or a Hugging Face config.json (or its folder; a relative path is
the table's folder's), and `sim.preset` may name the routing preset its speculative rows need where the
shape has no shipped one (`ecosim synth --model CONFIG --calibrate ROUTING OUT` fits one).
A row's `sim.nodes` (default 1) says its placement spans that many nodes: every collective then
crosses the device's inter-node fabric (its data file's internode_link_bw / internode_latency_s).
A row with `separate` (why, quoting the source) measured a configuration its own source calls
unoptimised or broken: it is predicted and shown, but summarised apart from the targets' rows.

Modules: rows.py reads and checks the table; pricing.py prices a row as linear functions of the serving
profile's free constants; fit.py fits them on the declared fit set and predicts every row (`run`); summary.py
summarises the errors; releases.py fits each engine-release profile on its own release's plain rows.
"""

from __future__ import annotations

import numpy as np

from ecosim.catalog.dtypes import at_dtype
from ecosim.fidelity.fit import Result, fit_theta, fitted_profile, run
from ecosim.fidelity.pricing import (FREE, HOST_FREE, POSITIONS, Linear, Priced, _costs, _price, _replay, _shape,
                                     _synth, predict, price_row)
from ecosim.fidelity.rows import METRICS, PLAIN, PUBLISHED, load_rows, model_label
from ecosim.fidelity.releases import ReleaseFit, fit_releases
from ecosim.fidelity.summary import per_profile, summary

__all__ = ["FREE", "HOST_FREE", "METRICS", "PLAIN", "POSITIONS", "PUBLISHED", "Linear", "Priced", "Result", "at_dtype",
           "ReleaseFit", "fit_releases", "per_profile", "fit_theta", "fitted_profile", "load_rows", "model_label", "np", "predict", "price_row", "run", "summary",
           "_costs", "_price", "_replay", "_shape", "_synth"]
