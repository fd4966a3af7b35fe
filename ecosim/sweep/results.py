"""A sweep directory: parts committed as they finish, consolidated into results.parquet.

    DIR/sweep.json              the grid, the traces (path + fingerprint) and the versions of the last run
    DIR/parts/<hash>.parquet    one finished task's rows (its configurations), written to a temporary
                                file and renamed into place, so a part is whole or absent
    DIR/results.parquet         the sweep's rows in grid order with the ratios filled in; rewritten
                                (atomically) at the end of every run, including a resumed one
    DIR/winner.json             see winner.py

A configuration is done when some part holds its id, so a rerun computes only what is missing and
a killed sweep loses only the tasks in flight. Rows of configurations not in the current grid stay
in parts/ (a later sweep may want them) but not in results.parquet.

Columns of results.parquet: the configuration (config_id, trace_path, trace_fingerprint, policy,
one column per registered knob: budget, lambda, predictor, score, ...; then hardware, hbm_bw,
placement, draft_steps (the depth the trace was cut to; null: its recorded depth); knobs a policy
lacks are null), then
the fields of `ecosim replay --json` rows (metrics.Row.to_dict(): trace, provenance, requests, tokens,
steps, verified, expert_loads, expert_bytes, pcie_bytes, time_s, draft_s, draft_levels, synthetic, speedup_vs_ar, oracle_fraction,
tokens_per_step, experts_per_step, expert_bytes_per_token, pcie_bytes_per_token, time_per_token_s, tokens_per_s).
Ratios compare each row with the `ar` and `oracle` rows of the same trace, draft steps and pricing.
`provenance` is the trace's (real, hybrid, synthetic); `synthetic` (provenance is not real) is kept
for readers of older files. A part written before `provenance` existed holds only `synthetic`:
its provenance is derived from it as the trace reader does for version 1 traces (row_of).
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Any

import polars as pl

from ecosim.errors import EcoSimError
from ecosim.metrics import Row
from ecosim.policies import registry
from ecosim.sweep.grid import Config, Pricing, TraceRef
from ecosim.trace.io import provenance_of
from ecosim.trace.schema import MANIFEST, NODES, POSITIONS

PARTS = "parts"
RESULTS = "results.parquet"
SWEEP = "sweep.json"

DTYPES: dict[type, pl.DataType] = {int: pl.Int64(), float: pl.Float64(), str: pl.String()}


def config_schema() -> dict[str, pl.DataType]:
    """The configuration columns: one per knob the registry knows (read when a sweep runs)."""
    return {
        "config_id": pl.String(), "trace_path": pl.String(), "trace_fingerprint": pl.String(), "policy": pl.String(),
        **{k.key: DTYPES[k.type] for k in registry.knobs()},
        "hardware": pl.String(), "hbm_bw": pl.Float64(), "placement": pl.String(), "draft_steps": pl.Int64(),
    }



RAW_SCHEMA: dict[str, pl.DataType] = {
    "trace": pl.String(), "provenance": pl.String(), "requests": pl.Int64(), "tokens": pl.Int64(),
    "steps": pl.Int64(), "verified": pl.Int64(), "expert_loads": pl.Int64(), "expert_bytes": pl.Float64(),
    "pcie_bytes": pl.Float64(), "time_s": pl.Float64(), "draft_s": pl.Float64(), "draft_levels": pl.Float64(),
}
DERIVED_SCHEMA: dict[str, pl.DataType] = {
    "synthetic": pl.Boolean(), "speedup_vs_ar": pl.Float64(), "oracle_fraction": pl.Float64(), "tokens_per_step": pl.Float64(),
    "experts_per_step": pl.Float64(), "expert_bytes_per_token": pl.Float64(),
    "pcie_bytes_per_token": pl.Float64(), "time_per_token_s": pl.Float64(), "tokens_per_s": pl.Float64(),
}


def kind_of(rec: dict[str, Any]) -> str:
    """A record's `provenance`; one written before it existed (a part, a results row, a trace of
    sweep.json) holds only `synthetic`, read as the trace reader reads a version 1 manifest."""
    return rec.get("provenance") or provenance_of({"version": 1, "synthetic": rec.get("synthetic")})


def row_of(rec: dict[str, Any]) -> Row:
    """The Row of a part's or results' record."""
    old = {"draft_s": 0.0, "draft_levels": 0.0}  # a part written before the draft side was a column
    return Row(**{k: rec.get(k, old.get(k)) if k in old else rec[k] for k in RAW_SCHEMA if k != "provenance"},
               provenance=kind_of(rec))


def part_schema() -> dict[str, pl.DataType]:
    return {**config_schema(), **RAW_SCHEMA}


def results_schema() -> dict[str, pl.DataType]:
    return {**config_schema(), **RAW_SCHEMA, **DERIVED_SCHEMA}


def trace_fingerprint(path: Path) -> str:
    """sha256 over the trace's three files (name and bytes), first 32 hex digits."""
    h = hashlib.sha256()
    for name in (MANIFEST, POSITIONS, NODES):
        f = path / name
        h.update(name.encode() + b"\0")
        try:
            with open(f, "rb") as fh:
                while chunk := fh.read(1 << 23):
                    h.update(chunk)
        except OSError as e:
            raise EcoSimError(f"{f}: cannot read ({e.strerror or e})") from None
        h.update(b"\0")
    return h.hexdigest()[:32]


def config_record(c: Config, hbm_bw: float) -> dict[str, Any]:
    return {
        "config_id": c.id, "trace_path": c.trace.path, "trace_fingerprint": c.trace.fingerprint,
        **c.selection.columns(), "hardware": c.pricing.hardware, "hbm_bw": hbm_bw, "placement": c.pricing.placement,
        "draft_steps": c.trace.steps,
    }


def _atomic_write(df: pl.DataFrame, dest: Path) -> None:
    tmp = dest.parent / f".tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}-{dest.name}"
    try:
        df.write_parquet(tmp, compression="zstd", statistics=False)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, dest)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise EcoSimError(f"{dest}: could not write ({e.strerror or e})") from None


def atomic_write_text(text: str, dest: Path) -> None:
    tmp = dest.parent / f".tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}-{dest.name}"
    try:
        tmp.write_text(text)
        os.replace(tmp, dest)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise EcoSimError(f"{dest}: could not write ({e.strerror or e})") from None


class SweepDir:
    """The files of one sweep directory."""

    def __init__(self, path: Path):
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise EcoSimError(f"{self.path}: exists and is not a directory")

    @property
    def parts(self) -> Path:
        return self.path / PARTS

    @property
    def results(self) -> Path:
        return self.path / RESULTS

    def create(self) -> None:
        try:
            self.parts.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise EcoSimError(f"{self.path}: cannot create ({e.strerror or e})") from None
        for tmp in self.parts.glob(".tmp-*"):  # left by a killed writer
            try:
                pid = int(tmp.name.split("-")[1])
                os.kill(pid, 0)
            except (ValueError, IndexError, ProcessLookupError):
                tmp.unlink(missing_ok=True)
            except PermissionError:
                pass

    def _part_files(self) -> list[Path]:
        return sorted(p for p in self.parts.glob("*.parquet") if not p.name.startswith("."))

    def done(self) -> set[str]:
        """Ids of the configurations some part holds (an unreadable part is removed: recomputed)."""
        ids: set[str] = set()
        for f in self._part_files():
            try:
                ids.update(pl.read_parquet(f, columns=["config_id"])["config_id"].to_list())
            except Exception:  # noqa: BLE001  (a part that cannot be read is as good as absent)
                f.unlink(missing_ok=True)
        return ids

    def write_part(self, records: list[dict[str, Any]]) -> Path:
        """One finished task's rows, committed whole or not at all."""
        name = hashlib.sha256("\n".join(sorted(r["config_id"] for r in records)).encode()).hexdigest()[:32]
        dest = self.parts / f"{name}.parquet"
        _atomic_write(pl.DataFrame(records, schema=part_schema()), dest)
        return dest

    def read_parts(self, ids: list[str]) -> dict[str, dict[str, Any]]:
        """Raw rows of the given configurations, first part wins on a duplicate."""
        want = set(ids)
        out: dict[str, dict[str, Any]] = {}
        for f in self._part_files():
            df = pl.read_parquet(f)
            for rec in df.filter(pl.col("config_id").is_in(want)).iter_rows(named=True):
                out.setdefault(rec["config_id"], rec)
        return out

    def consolidate(self, configs: list[Config]) -> pl.DataFrame:
        """results.parquet for `configs` (grid order), ratios against ar and oracle filled in."""
        raw = self.read_parts([c.id for c in configs])
        missing = [c for c in configs if c.id not in raw]
        if missing:
            raise EcoSimError(f"{self.path}: {len(missing)} configurations have no results yet; rerun the sweep")
        rows = {c.id: row_of(raw[c.id]) for c in configs}
        ar, oracle = registry.references()
        base: dict[tuple[TraceRef, Pricing, str], Row] = {}
        for c in configs:
            if c.selection.name in (ar, oracle):
                base[(c.trace, c.pricing, c.selection.name)] = rows[c.id]
        schema = results_schema()
        records = []
        for c in configs:
            row = rows[c.id]
            row.compare(base[(c.trace, c.pricing, ar)], base[(c.trace, c.pricing, oracle)])
            cfg = {k: raw[c.id].get(k) for k in config_schema()}  # a part written before a knob existed lacks it
            records.append({**cfg, **row.to_dict()})
        df = pl.DataFrame(records, schema=schema)
        _atomic_write(df, self.results)
        return df

    def write_meta(self, doc: dict[str, Any]) -> None:
        atomic_write_text(json.dumps(doc, indent=1) + "\n", self.path / SWEEP)

    def read_meta(self) -> dict[str, Any]:
        f = self.path / SWEEP
        try:
            return json.loads(f.read_text())
        except FileNotFoundError:
            raise EcoSimError(f"{self.path}: not a sweep directory (no {SWEEP}; run `ecosim sweep ... --out {self.path}`)") from None
        except (OSError, ValueError) as e:
            raise EcoSimError(f"{f}: unreadable ({e})") from None

    def read_results(self, meta: dict[str, Any] | None = None) -> pl.DataFrame:
        """results.parquet; with `meta` (sweep.json), checked to be that sweep's, consolidated."""
        if not self.results.is_file():
            raise EcoSimError(f"{self.path}: no {RESULTS} (run or resume `ecosim sweep ... --out {self.path}`)")
        try:
            df = pl.read_parquet(self.results)
        except Exception as e:  # noqa: BLE001
            raise EcoSimError(f"{self.results}: unreadable ({str(e).splitlines()[0][:200]})") from None
        if meta is not None and df.height != meta.get("configurations"):
            raise EcoSimError(f"{self.results} holds {df.height} rows but {SWEEP} describes {meta.get('configurations')} "
                              f"configurations (an unfinished sweep?); rerun the same `ecosim sweep` into {self.path}")
        return df
