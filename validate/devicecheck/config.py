"""What `validate device-check` takes: one frozen dataclass whose fields are its options (help and default)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from pathlib import Path

from ecosim.errors import EcoSimError

# Catalogue models whose per-layer sizes the full check's targets take (hidden size, expert width,
# experts, top-k, attention), one per family the check must cover.
FULL_TARGETS = ("qwen3-30b-a3b", "gpt-oss-20b")


@dataclass(frozen=True, kw_only=True)
class CheckConfig:
    """The check's design; each field with `help` is a `validate device-check` option."""

    device: str = field(default="cuda", metadata={"help": "cuda, cuda:N or cpu: the one device every phase runs on."})
    out: Path = field(default=Path("device-check"), metadata={"help": "Folder to write summary.json, summary.md and "
                                                                    "each phase's files into."})
    small: bool = field(default=False, metadata={"help": "Tiny targets (the tracer's tiny Qwen3-MoE and gpt-oss "
                                                         "pairs) and a few tokens: the machinery, in about a minute on a CPU."})
    budget_s: float = field(default=420.0, metadata={"help": "Seconds the whole check may take; each phase shrinks "
                                                             "its work (tokens, prompts, repeats) to fit its share."})
    targets: tuple[str, ...] = field(default=FULL_TARGETS, metadata={"help": "Catalogue models whose per-layer sizes "
                                                                             "the targets take, comma-separated."})
    layers: int = field(default=2, metadata={"help": "Decoder layers of each full-size target (random weights)."})
    dtype: str = field(default="auto", metadata={"help": "auto (bfloat16 on cuda, float32 on cpu), float32, "
                                                         "bfloat16 or float16."})
    prompts: int = field(default=4, metadata={"help": "Prompts to record and decode per target (one per task file "
                                                      "of prompts/ first), at most."})
    tokens: int = field(default=32, metadata={"help": "Tokens to record and decode per prompt, at most."})
    sample: int = field(default=16, metadata={"help": "Trace nodes recomputed by plain decoding per target, at most."})
    threads: int | None = field(default=None, metadata={"help": "torch CPU threads (default: torch's own; 1 under "
                                                                "--small)."})
    seed: int = field(default=0, metadata={"help": "Seed of the random weights and the sampled nodes."})
    force: bool = field(default=False, metadata={"help": "Replace a device check already in --out."})

    @staticmethod
    def help(name: str) -> str:
        return next(f.metadata["help"] for f in fields(CheckConfig) if f.name == name)

    @property
    def cuda(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def torch_dtype(self) -> str:
        return ("bfloat16" if self.cuda else "float32") if self.dtype == "auto" else self.dtype

    def sizes(self) -> "CheckConfig":
        """--small: tiny everything (the options given are caps)."""
        from dataclasses import replace

        if not self.small:
            return self
        return replace(self, prompts=min(self.prompts, 4), tokens=min(self.tokens, 6), sample=min(self.sample, 6),
                       threads=self.threads or 1)

    def check(self) -> None:
        """Bad values: one line before anything is imported, built or written."""
        if not re.fullmatch(r"cpu|cuda(:\d+)?", self.device):
            raise EcoSimError(f"--device {self.device}: expected cuda, cuda:N or cpu (the check measures one device)")
        if self.budget_s < 30:
            raise EcoSimError(f"--budget-s {self.budget_s:g}: give at least 30 seconds")
        if min(self.layers, self.prompts, self.tokens, self.sample) < 1:
            raise EcoSimError("--layers, --prompts, --tokens and --sample must be at least 1")
        if self.threads is not None and self.threads < 1:
            raise EcoSimError(f"--threads {self.threads}: must be at least 1")
        if self.dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise EcoSimError(f"--dtype {self.dtype}: expected auto, float32, bfloat16 or float16")
        if not self.targets:
            raise EcoSimError("--targets: name at least one catalogue model")
        from validate.devicecheck.targets import check_target

        for name in self.targets:
            check_target(name)
