"""The JSON files a user hands in beside traces, declared once: hardware profiles (a data sheet's fields or a
`validate calibrate` profile), serving profiles (the step model's free constants), arrival files (`--arrivals
FILE`) and a predictor file's header. docs/PROFILES.md's tables are generated from these models.

Ranges are what a real machine can be, with room: a bandwidth above 1 PB/s or a kernel of a second is a unit
slip, refused with what is allowed. Keys ending in `_source` (where a value comes from) are free text. A field
of the dataclass a file becomes (Device, ServingProfile) that this file does not yet declare is let through
untyped (the loader names them: `check(..., undeclared=...)`; tests/test_trace_doc.py fails until it is
declared), so adding a field is never a refusal of shipped data.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, RootModel, model_validator

from ecosim.gate.core import declare
from ecosim.gate.trace import MAX_BYTES, Closed, Int, Num, Str

PB_S = 1e15  # bytes/s: above every device's memory by two orders of magnitude
EFLOP_S = 1e18  # FLOP/s
# Below any machine that runs a model (a floppy disk reads 62.5 kB/s): past it, times overflow sums to infinity.
MB_S = 1e6  # bytes/s
MFLOP_S = 1e6  # FLOP/s


def _notes_dropped(data: Any) -> Any:
    """`*_source` keys are free-text notes on where a value comes from: not fields."""
    if not isinstance(data, dict):
        return data
    return {k: v for k, v in data.items() if not (k.endswith("_source") and isinstance(v, str))}


class ServingSpec(Closed):
    """A serving profile: the free constants of the step model in ecosim/cost/."""

    name: Str("the profile's name") = "none"
    base: Str("optional: a shipped profile or another file this one changes (only the fields it names differ)", null=True) = None
    step_fixed_s: Num(ge=0, le=1, doc="s per verification step: sampling, scheduling, graph launch") = 0.0
    kernel_latency_s: Num(ge=0, le=0.01, doc="s per kernel on a layer's critical path") = 0.0
    extra_layer_kernels: Num(ge=0, le=10_000, doc="kernels per layer an older engine launches beyond the fused count") = 0.0
    extra_kernel_s: Num(ge=0, le=0.01, doc="s per such extra kernel") = 0.0
    collective_latency_s: Num(ge=0, le=0.1, doc="s per all-reduce or all-to-all round, before its bytes") = 0.0
    bw_efficiency: Num(ge=0.001, le=1, doc="achieved fraction of peak memory bandwidth") = 1.0
    compute_efficiency: Num(ge=0.001, le=1, doc="achieved fraction of dense peak FLOP/s in a full GEMM tile") = 1.0
    gemm_tile_rows: Num(ge=0, le=4096, doc="rows of a grouped-GEMM tile; 0: no tile quantisation") = 0.0
    overlap: Literal["max", "sum"] = Field("max", description="`max`: memory and compute overlap (GPU); `sum`: they add (CPU)")
    memory_fraction: Num(ge=0.001, le=1, doc="fraction of device memory for weights and KV cache") = 0.9
    spec_step_kernels: Num(ge=0, le=10_000, doc="kernels per speculative step beyond the forwards") = 0.0
    spec_level_kernels: Num(ge=0, le=10_000, doc="kernels per draft level beyond its forward") = 0.0
    spec_level_s: Num(ge=0, le=1, doc="s per draft level beyond its forward and counted kernels") = 0.0
    spec_sync_s: Num(ge=0, le=1, doc="s of host work per speculative step exposed by its sync") = 0.0
    spec_overlap: Annotated[bool, Field(strict=True, description="the engine hides that host work (SGLang spec v2)")] = True
    draft_step_fixed_s: Num(ge=0, le=1, doc="older profiles' name of spec_sync_s (then not overlapped)", null=True) = None
    host_layer_s: Num(ge=0, le=1, doc="s per MoE layer whose experts the host computes: the hidden states' round trip and sync") = 0.0
    host_read_efficiency: Num(ge=0.001, le=1, doc="achieved fraction of the host's memory bandwidth on scattered expert reads") = 1.0
    host_gemm_efficiency: Num(ge=0.001, le=1, doc="achieved fraction of the host's matrix throughput") = 1.0
    source: Str("where the profile comes from") = ""
    sources: Annotated[dict[str, str], Field(strict=True, description="per field, where its value comes from")] = {}
    fitted_on: Annotated[list[str], Field(strict=True, description="published rows the fitted fields were fitted on")] = []

    @model_validator(mode="before")
    @classmethod
    def drop_notes(cls, data: Any) -> Any:
        return _notes_dropped(data)


class HardwareSpec(Closed):
    """A device: a data sheet's fields in bytes, bytes/s and FLOP/s, or a `validate calibrate` profile."""

    name: Str("the device's name")
    hbm_bw: Num(ge=MB_S, le=PB_S, doc="bytes/s, peak memory bandwidth")
    hbm_bytes: Num(gt=0, le=MAX_BYTES, doc="bytes of device memory")
    peak_bf16: Num(ge=MFLOP_S, le=EFLOP_S, doc="FLOP/s, dense BF16 peak")
    peak_fp8: Num(ge=MFLOP_S, le=EFLOP_S, doc="FLOP/s, dense FP8 peak (the BF16 one where the device has no FP8 path)")
    link_bw: Num(ge=MB_S, le=PB_S, doc="bytes/s per direction between devices")
    pcie_bw: Num(ge=MB_S, le=PB_S, doc="bytes/s per direction between host and device")
    step_overhead_s: Num(ge=0, le=1, doc="calibrated: s per step beyond bytes and FLOPs", null=True) = None
    bw_efficiency: Num(ge=0.001, le=1, doc="calibrated: achieved fraction of hbm_bw", null=True) = None
    compute_efficiency: Num(ge=0.001, le=1, doc="calibrated: achieved fraction of the peaks", null=True) = None
    overlap: Literal["max", "sum"] | None = Field(None, description="calibrated: how memory and compute time combine")
    draft_time_s: Num(ge=0, le=10, doc="calibrated: draft seconds per speculative step", null=True) = None
    serving: ServingSpec | None = Field(None, description="calibrated: the serving terms the profile carries (the serving profile table)")
    calibration: Annotated[dict[str, Any] | None, Field(strict=True, description="written by `validate calibrate`: its design and fit")] = None
    source: Str("where the figures come from") = ""
    link_latency_s: Num(ge=0, le=0.1, doc="s per collective the link adds beyond the serving profile's") = 0.0
    graph_node_s: Num(ge=0, le=0.01, doc="s per kernel the platform's graph replay adds (0 on NVIDIA)") = 0.0
    internode_link_bw: Num(ge=MB_S, le=PB_S, doc="bytes/s per GPU per direction between nodes", null=True) = None
    internode_latency_s: Num(ge=0, le=0.1, doc="s per collective across nodes", null=True) = None

    @model_validator(mode="before")
    @classmethod
    def drop_notes(cls, data: Any) -> Any:
        return _notes_dropped(data)


class Arrivals(RootModel[Annotated[list[Num(ge=0, le=1e9)], Field(strict=True, min_length=1)]]):
    """`--arrivals FILE`: a JSON list of arrival times in seconds, one per request in order."""


class PredictorHeader(Closed):
    """The `meta` header of a predictor file (`ecosim predictor train`); its arrays are checked by its kind."""

    model_config = ConfigDict(strict=True, extra="allow", frozen=True)
    format: Str("the predictor file format's name")
    version: Int(1, 1000, "the predictor file format's version")
    kind: Str("the predictor's kind (ecosim/predictors)")
    shape: Annotated[dict[str, Any], Field(strict=True, description="the model shape it was trained for")]
    selection: Annotated[dict[str, Any], Field(strict=True, description="how it picks experts")]
    config: Annotated[dict[str, Any], Field(strict=True, description="its training settings")]


HARDWARE = declare("hardware profile", HardwareSpec, "a hardware profile")
SERVING = declare("serving profile", ServingSpec, "a serving profile")
ARRIVALS = declare("arrivals", Arrivals, "an arrivals file (a JSON list of arrival seconds)")
PREDICTOR = declare("predictor header", PredictorHeader, "a predictor file header")
TABLES = {"hardware": HardwareSpec, "serving": ServingSpec}
