"""`ecosim tune` answers on a trace of one request: a predictor trained on the fly (k-fold by request)
has no other request to hold out there, so it is fitted in-sample on that request, and the output
says so; `replay` still refuses it (its figures are per policy and predictor, held out or not at all)."""

from __future__ import annotations

import json

from conftest import tiny_trace
from ecosim.cli import main


def test_tune_on_one_request_fits_in_sample_and_says_so(write, capsys):
    path = write(tiny_trace(4, requests=1, positions=30))
    assert main(["tune", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["best"] in ("ar", "static") and len(doc["notes"]) == 1
    assert "holds one request" in doc["notes"][0] and "in-sample" in doc["notes"][0]
    assert main(["tune", str(path), "--predictor", "oracle", "--json"]) == 0  # needs no training: no note
    assert json.loads(capsys.readouterr().out)["notes"] == []
    assert main(["replay", str(path)]) == 2
    assert "at least 2" in capsys.readouterr().err
