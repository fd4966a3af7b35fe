"""Options shared by the commands that price steps (replay, sweep, tune): hardware and placement.

The cost options are CostConfig's fields (ecosim/cost/), turned into flags by adapter.config_options."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ecosim.catalog.devices import DEVICES, Device, get_device
from ecosim.cli.adapter import config_options, with_options
from ecosim.cli.values import checked_overrides
from ecosim.cost import CostConfig, Terms
from ecosim.errors import EcoSimError
from ecosim.options import from_options
from ecosim.policies.base import DRAFTING_RULE
from ecosim.placements.registry import usage as placement_usage
from ecosim.units import parse_quantity

if TYPE_CHECKING:  # typing only: the CLI options never need the sweep package loaded
    from ecosim.sweep.grid import Pricing, Settings

# Help that lists a catalogue or a registry is generated from it, so a new entry is never missing from --help.
DEVICE_NAMES = ", ".join(DEVICES)
PLACEMENT_HELP = (f"Where weights live: {placement_usage()} (N devices: tp shards every expert, ep splits the experts; "
                  "offload keeps CAP experts per layer in HBM; cpu-moe keeps the routed experts of every MoE layer, or of the "
                  "first N blocks, in host RAM computed by the CPU, and cpu the whole model: both need --host).")
Hardware = Annotated[str, typer.Option(help=f"Catalogue device ({DEVICE_NAMES}) or a profile .json from `validate calibrate`.")]
Bw = Annotated[str | None, typer.Option("--bw", help="Override the device's HBM bandwidth, e.g. 3.3TB/s.")]
Peak = Annotated[str | None, typer.Option(help="Override the dense peak compute, e.g. 989TFLOP/s (applies to BF16 and FP8).")]
LinkBw = Annotated[str | None, typer.Option(help="Override the per-direction device-to-device link bandwidth, e.g. 450GB/s.")]
PcieBw = Annotated[str | None, typer.Option(help="Override the per-direction host-to-device bandwidth, e.g. 64GB/s.")]
Placement = Annotated[str, typer.Option(help=PLACEMENT_HELP)]
Devices = Annotated[int | None, typer.Option(min=1, help="Number of devices; shorthand for --placement ep:N when N > 1.")]
DRAFT_STEPS_HELP = ("The setting's draft steps N per verification (SGLang --speculative-num-steps, vLLM "
                    "num_speculative_tokens, llama.cpp --draft-max): each trace's recorded trees are cut to depth N "
                    "before a policy selects (at most the recorded depth); default: the recorded depth. " + DRAFTING_RULE)
DraftSteps = Annotated[int | None, typer.Option("--draft-steps", min=1, help=DRAFT_STEPS_HELP)]


@dataclass(frozen=True)
class HardwareArgs:
    hardware: str = "h200"
    bw: str | None = None
    peak: str | None = None
    link_bw: str | None = None
    pcie_bw: str | None = None

    def device(self) -> Device:
        """The catalogue device with the given fields overridden (units parsed strictly)."""
        d = get_device(self.hardware)
        peak = parse_quantity(self.peak, "flops") if self.peak else None
        return checked_overrides(d.replace(
            hbm_bw=parse_quantity(self.bw, "bandwidth") if self.bw else None,
            peak_bf16=peak,
            peak_fp8=peak,
            link_bw=parse_quantity(self.link_bw, "bandwidth") if self.link_bw else None,
            pcie_bw=parse_quantity(self.pcie_bw, "bandwidth") if self.pcie_bw else None,
        ), {"--bw": (self.bw, "hbm_bw"), "--peak": (self.peak, "peak_bf16"), "--link-bw": (self.link_bw, "link_bw"),
            "--pcie-bw": (self.pcie_bw, "pcie_bw")})


# A command taking `cost: dict | None` gets one option per CostConfig field (--cost, --profile, ...).
cost_options = with_options("cost", lambda: config_options(CostConfig))


def cost_config(texts: dict[str, str | None] | None) -> CostConfig:
    """The CostConfig of the cost options given; those not given stay None so the profile's apply."""
    return from_options(CostConfig, texts or {})


def placement_text(placement: str, devices: int | None) -> str:
    if devices is not None and devices > 1:
        if placement.strip().lower() not in ("hbm", f"ep:{devices}"):
            raise EcoSimError(f"--devices {devices} conflicts with --placement {placement}")
        return f"ep:{devices}"
    return placement


def terms_text(used: dict[str, object]) -> str:
    """The serving profile and every step term priced with (cost.Terms, or CostModel.applied() with
    the model's kernels per step); experts-only has none."""
    if "serving" not in used:  # experts-only
        return "cost experts-only, routed-expert bytes at the raw bandwidth"
    f = {k: float(v) for k, v in used.items() if isinstance(v, (int, float))}
    kernels = f"{int(f['kernels_per_step'])} kernels" if "kernels_per_step" in f else "kernels"
    if f.get("extra_layer_kernels"):  # an older engine release's kernels beyond the fused count (serving.py)
        kernels += f" ({f['extra_layer_kernels']:g} per layer beyond the fused count, {f['extra_kernel_s'] * 1e6:.4g} us each)"
    tau = f"{f['kernel_latency_s'] * 1e6:.4g} us"
    if f.get("graph_node_s"):  # the platform's own graph-replay cost per kernel node (devices.py)
        tau = f"({tau} + {f['graph_node_s'] * 1e6:.4g} us the platform's graph node)"
    return (host_text(used) + f"profile {used['serving']}: step fixed {f['step_fixed_s'] * 1e6:.4g} us + {kernels} "
            f"x {tau}, collective {f['collective_latency_s'] * 1e6:.4g} us, "
            f"bw eff {f['bw_efficiency']:.3g}, compute eff {f['compute_efficiency']:.3g}, GEMM tile {f['gemm_tile_rows']:g} rows, "
            f"overlap {used['overlap']}, memory fraction {f['memory_fraction']:.3g}, "
            f"speculative step +{int(f['spec_step_kernels'])} kernels + {int(f['spec_level_kernels'])} kernels and "
            f"{f['spec_level_s'] * 1e6:.4g} us per level, host sync {f['spec_sync_s'] * 1e6:.4g} us"
            + (" (overlapped)" if used["spec_overlap"] else ""))


def host_text(used: dict[str, object]) -> str:
    """The host terms a replay with experts in host RAM priced with (ecosim/cost/host.py), and the dtype."""
    out = f"dtype {used['dtype']}; " if "dtype" in used else ""
    h = used.get("host")
    if not isinstance(h, dict):
        return out
    return out + (f"host {h['name']} ({h['layers']} MoE layers): {h['bandwidth'] / 1e9:.4g} GB/s x read eff "
                  f"{h['read_efficiency']:.3g}, matrix-vector {h['gemv_flops'] / 1e12:.3g} TFLOP/s, small GEMM "
                  f"{h['gemm_flops'] / 1e12:.3g} TFLOP/s" + (f" in tiles of {h['gemm_rows']:g} rows" if h["gemm_rows"] else "")
                  + f", overlap {h['overlap']}, {h['layer_s'] * 1e6:.4g} us per host layer; ")


def used_text(used: dict[str, object], draft: dict[str, float], setting: str | None = None) -> str:
    """The footer line naming the serving profile and every value a replay priced with (CLI values,
    profile fields and defaults resolved: cost.Terms), with each trace's draft time per step (of
    `setting`, where one setting is named: tune's recommended one)."""
    if len(set(draft.values())) == 1:  # the same draft and tree depth in every trace
        drafts = f"draft {next(iter(draft.values())) * 1e3:.4g} ms/step"
    else:
        drafts = "draft " + ", ".join(f"{v * 1e3:.4g} ms/step ({k})" for k, v in draft.items())
    return f"used: {terms_text(used)}; {drafts}" + (f" ({setting})" if setting else "")


def used_terms(settings: Settings, pricings: list[Pricing]) -> dict[str, dict[str, Any]]:
    """Per hardware, the step terms every configuration of a grid priced with (CLI values, the
    hardware's and the serving profile's resolved: cost.Terms); the bandwidth axis does not change them."""
    by_hw = {p.hardware: p for p in pricings}
    if settings.cost.mode == "experts-only":
        return {hw: {} for hw in by_hw}
    out = {}
    for hw, p in by_hw.items():
        device = settings.device(p)
        out[hw] = asdict(Terms.resolve(settings.cost, device))
        if device.graph_node_s:  # the platform's own cost per kernel node, named where it applies (devices.py)
            out[hw]["graph_node_s"] = device.graph_node_s
    return out


def used_lines(used: dict[str, dict[str, Any]], cost: CostConfig) -> list[str]:
    """One `used on HW:` line per hardware of `used_terms`, with the draft time."""
    dt = cost.draft_time_s
    if cost.mode == "experts-only":
        draft = "no draft time"
    else:
        draft = "draft: each trace's own draft model (drafts.py)" if dt is None else f"draft {dt * 1e3:.4g} ms/step"
    return [f"used on {hw}: {terms_text(terms)}; {draft}" for hw, terms in used.items()]
