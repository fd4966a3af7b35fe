"""A trace's manifest.json declared once: every key with its type, range and meaning (docs/TRACE_FORMAT.md's
tables are generated from these models: `python -m ecosim.gate.doc`).

The rules that relate keys to each other (moe_layers within num_layers, top_k within num_experts, request ids
unique, prompt ids within the vocabulary, positions against positions.parquet) stay in ecosim/trace/checks.py,
which runs this declaration first. Keys beyond those declared are kept (a reader ignores them), except in
`model`, `tree` and `decoding`, whose every key the cost model reads.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ecosim.gate.core import declare

INT16_MAX, INT32_MAX = 2**15 - 1, 2**31 - 1
# Bytes beyond any device's memory by orders of magnitude: a figure past them is a unit slip, not a model.
MAX_BYTES = 2.0**50  # 1 PiB


def Int(lo: int | None = None, hi: int | None = None, doc: str = "", null: bool = False, **kw: Any) -> Any:
    """A JSON integer (not a bool, not 2.0) within [lo, hi]; with `null`, or null."""
    return Annotated[int | None if null else int, Field(strict=True, ge=lo, le=hi, description=doc, **kw)]


def Num(gt: float | None = None, ge: float | None = None, le: float | None = None, doc: str = "", null: bool = False,
        **kw: Any) -> Any:
    """A finite JSON number (int or float, not a bool) within its bounds; with `null`, or null."""
    return Annotated[float | None if null else float,
                     Field(strict=True, allow_inf_nan=False, gt=gt, ge=ge, le=le, description=doc, **kw)]


def Str(doc: str = "", null: bool = False, **kw: Any) -> Any:
    return Annotated[str | None if null else str, Field(strict=True, description=doc, **kw)]


class Spec(BaseModel):
    """Strict JSON types (no "1" for 1, no true for 1), unknown keys kept."""

    model_config = ConfigDict(strict=True, extra="allow", frozen=True)


class Closed(Spec):
    """A part whose every key is read: an unknown key is a misspelling."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class ModelSpec(Spec):
    name: Str()
    family: Str("`deepseek_v3`, `qwen3_moe`, `gpt_oss`, `mixtral`, `olmoe`, ...")
    num_layers: Int(1, INT16_MAX, "all decoder layers")
    moe_layers: Annotated[list[Int(0, INT16_MAX)], Field(strict=True, min_length=1, description="indices of the MoE layers, increasing, within `[0, num_layers)`", json_schema_extra={"allowed": "a non-empty, increasing list of integers in [0, num_layers)"})]
    num_experts: Int(1, INT16_MAX, "routed experts per MoE layer")
    top_k: Int(1, INT16_MAX, "experts a token is routed to per MoE layer", json_schema_extra={"allowed": "an integer in [1, num_experts]"})
    num_shared_experts: Int(0, INT16_MAX, "experts every token uses (counted in `dense_bytes`)")
    hidden_size: Int(1, INT32_MAX)
    moe_intermediate_size: Int(1, INT32_MAX)
    vocab_size: Int(1, INT32_MAX)
    expert_bytes: Num(gt=0, le=MAX_BYTES, doc="bytes of one routed expert's weights as stored")
    dense_bytes: Num(ge=0, le=MAX_BYTES, doc="bytes read per forward that are not routed experts: attention, shared experts, dense layers, embeddings and LM head (0 only in hand-worked synthetic shapes whose every byte is an expert; a recorded trace's is positive)")
    kv_bytes_per_token: Num(ge=0, le=2.0**40, doc="optional (default 0): bytes of KV cache one context token adds, over all layers") = 0
    bytes_per_param: Num(gt=0, le=8, doc="optional (default 2): weight bytes per parameter as stored (1 FP8, 2 BF16, 0.53 MXFP4)") = 2.0
    source: Str("optional: where the shape comes from") = ""
    act_quant: Annotated[bool, Field(strict=True, description="optional (default false): FP8 weights with dynamic activation quantisation")] = False
    n_group: Int(0, INT16_MAX, "optional: DeepSeek-style routing groups where they differ from the family's (both 0: no limit)", json_schema_extra={"allowed": "an integer dividing num_experts, or 0"}, null=True) = None
    topk_group: Int(0, INT16_MAX, "optional: groups a token's experts come from", json_schema_extra={"allowed": "an integer in [0, n_group]"}, null=True) = None


class DraftSpec(Spec):
    name: Str("the draft's name")
    kind: Literal["model", "early-exit", "mtp", "eagle3"] | None = Field(None, description="optional: how a draft forward is priced (ecosim/catalog/drafts.py)")
    params: Num(ge=0, le=2.0**50, doc="optional: the draft's parameters", null=True) = None
    bytes: Num(ge=0, le=MAX_BYTES, doc="optional: the draft's weights, read once per tree level (0 or absent: from the target's shape)", null=True) = None
    layers: Int(1, INT16_MAX, "optional: decoder layers per draft forward", null=True) = None
    accept: Num(ge=0, le=1, doc="optional (generated traces): the generator's per-node acceptance", null=True) = None
    accept_len: Num(ge=0, le=INT16_MAX, doc="optional (generated traces): the published acceptance length matched", null=True) = None
    accept_decay: Num(ge=0, le=1, doc="optional (generated traces): level d of the tree accepted with `accept` x this^(d - 1)", null=True) = None
    source: Str("optional: where the figures come from") = ""


class TreeSpec(Spec):
    depth: Int(0, 127, "levels of draft tokens below the root (the `depth` column is an int8)")
    topk: Int(1, INT16_MAX - 1, "children kept per expanded node")
    max_nodes: Int(0, INT16_MAX - 1, "candidates kept besides the root (the `node` column is an int16)")


class Decoding(Closed):
    mode: Literal["greedy", "sample"] = Field(description="`greedy`; from version 3 also `sample` (the target's own sample)")
    temperature: Num(gt=0, le=100, doc="sampled: the temperature", null=True) = None
    top_p: Num(gt=0, le=1, doc="sampled: nucleus mass kept") = 1.0
    top_k: Int(0, 2**31 - 1, "sampled: tokens sampled among (0: all)") = 0
    seed: Int(0, 2**64 - 1, "sampled: seed of the continuation", null=True) = None
    verify: Literal["target-only"] | None = Field(None, description="sampled: the verification rule that replays the trace exactly")


class RequestSpec(Spec):
    request_id: Int(0, INT32_MAX, "unique within the trace")
    task: Str("e.g. `coding`, `reasoning`, `qa`, `dialogue`")
    positions: Int(0, INT32_MAX, "rows of positions.parquet for this request")
    prompt_ids: Annotated[list[Int(0, INT32_MAX)] | None, Field(strict=True, description="optional (synthetic traces may leave it out): the prompt's token ids", json_schema_extra={"allowed": "a list of integers in [0, vocab_size), or null"})] = None


class Provenance(Spec):
    kind: Literal["real", "hybrid", "synthetic"] = Field(description="`real` exactly when `synthetic` is false")
    source: Str("what it came from: recording, routing set and its credit, generator preset") = ""


class Manifest(Spec):
    format: Literal["ecosim-trace"] = Field(description="always this string")
    version: Literal[1, 2, 3] = Field(description="`2` is written (`3` for a sampled continuation); `1` (no `provenance`) is still read")
    synthetic: Annotated[bool, Field(strict=True, description="true for generated traces; reports must say so")]
    provenance: Provenance | None = Field(None, description="required by version 2: where the routing comes from (table `provenance`)")
    model: ModelSpec = Field(description="the target's shape (table `model`)")
    draft: DraftSpec = Field(description="the draft (table `draft`); traces from `tracer record` add `shares_target`, `shape` and `levels` (tracer/drafts/cost.py)")
    tree: TreeSpec = Field(description="how candidates were expanded (table `tree`)")
    decoding: Decoding = Field(description='`{"mode": "greedy"}`, or from version 3 a sampled continuation (table `decoding`)')
    requests: Annotated[list[RequestSpec], Field(strict=True, description="one object per request (table `requests`); may be empty")]
    recorded_on: Annotated[dict[str, Any], Field(strict=True, description="device, library versions, date; free form")]


MANIFEST = declare("manifest", Manifest, "a trace manifest")
# Each table of the manifest in the docs: its title there and its model.
TABLES: dict[str, type[BaseModel]] = {
    "manifest.json": Manifest, "model": ModelSpec, "draft": DraftSpec, "tree": TreeSpec, "decoding": Decoding, "requests": RequestSpec,
    "provenance": Provenance,
}
