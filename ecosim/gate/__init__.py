"""The one validation gate: every document a user hands in (trace manifests, hardware, serving and host profiles,
arrival files, predictor headers) is declared once, with types and ranges, and checked here before any work.

`check(kind, data, where)` / `load(kind, path)` refuse in one line naming the file, the field, the value and what
is allowed (`GateError`, an EcoSimError: exit status 2 at the CLI). The declarations live beside their kind
(trace.py, profiles.py); `doc.py` prints the docs' tables from them.
"""

from ecosim.gate.core import KINDS, GateError, Kind, allowed, check, declare, load, read_json

__all__ = ["KINDS", "GateError", "Kind", "allowed", "check", "declare", "load", "read_json"]
