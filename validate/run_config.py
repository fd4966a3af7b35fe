"""What `validate run` takes (`RunConfig`), checked before any model is loaded or anything written.

Tree defaults come from `ecosim.tree_config.TREE`, the on-the-spot calibration's from
`CalibConfig`; the recording options it shares with `tracer record` are passed on by name
(`validate.recorded.record`).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ecosim.errors import EcoSimError
from ecosim.outputs import VALIDATE_RUN, check_output
from ecosim.predictors import KINDS
from ecosim.predictors import check_name as check_predictor_name
from ecosim.predictors.kfold import check_requests
from ecosim.trace.io import read_manifest
from ecosim.trace.schema import MANIFEST
from ecosim.tree_config import TREE
from tracer.loading import check_device, resolve
from tracer.prompts import read_prompts
from tracer.sampler import Sampler
from validate.calibrate import CalibConfig
from validate.choice import Choice
from validate.parts import Parts


def check_one_device(device: str) -> None:
    """validate times one device (cpu, cuda or cuda:N; not `auto`, which spreads a model over GPUs),
    and it must be on this machine."""
    if not re.fullmatch(r"cpu|cuda(:\d+)?", device):
        raise EcoSimError(f"--device {device}: expected cpu, cuda or cuda:N (validate measures one device)")
    check_device(device)


@dataclass
class RunConfig:
    """Everything `validate run` takes."""

    model: str
    out: Path
    choice: Choice
    prompts: list[Path] = field(default_factory=list)
    draft: str = "default"
    device: str = "cpu"
    dtype: str = "auto"
    attn: str = "auto"
    threads: int | None = 1
    max_new_tokens: int = 48
    max_prompts: int | None = None
    depth: int = TREE.depth
    topk: int = TREE.topk
    max_nodes: int = TREE.max_nodes
    repeats: int = 3
    clock: str = "wall"
    hardware: Path | None = None
    trace: Path | None = None
    calib: CalibConfig = field(default_factory=CalibConfig)
    progress: bool = True
    command: str = ""
    contexts_from_trace: bool = True  # calibrate at the trace's shortest and longest contexts
    force: bool = False  # replace a validate run already in `out`
    retime: bool = True  # with `hardware`: re-time anchors between rounds and scale the profile to this run (drift.py)
    retime_repeats: int = 2  # runs of each anchor case
    sampler: Sampler = field(default_factory=Sampler)  # temperature 0: greedy; recorded into the trace and decoded with

    def resume_key(self) -> dict:
        """The options a rerun must repeat to continue this run (validate/parts.py), as JSON values."""
        key = {"model": self.model, "draft": self.draft, "device": self.device, "dtype": self.dtype, "attn": self.attn,
               "threads": self.threads, "max_new_tokens": self.max_new_tokens, "max_prompts": self.max_prompts,
               "depth": self.depth, "topk": self.topk, "max_nodes": self.max_nodes, "repeats": self.repeats,
               "clock": self.clock, "hardware": str(self.hardware) if self.hardware else None,
               "trace": str(self.trace) if self.trace else None, "prompts": [str(p) for p in self.prompts],
               "policies": [s.label() for s in self.choice.policies], "calib": asdict(self.calib),
               "contexts_from_trace": self.contexts_from_trace, "retime": self.retime,
               "retime_repeats": self.retime_repeats}
        if not self.sampler.greedy:  # absent at T = 0: greedy runs continue as before
            key["decoding"] = self.sampler.decoding()
        return json.loads(json.dumps(key))

    def check(self) -> None:
        """Bad options fail with one line before recording, loading or writing anything."""
        if self.repeats < 1:
            raise EcoSimError(f"--repeats {self.repeats}: must be at least 1")
        if self.retime_repeats < 1:
            raise EcoSimError(f"--retime-repeats {self.retime_repeats}: must be at least 1")
        if self.trace is None and not self.prompts:
            raise EcoSimError("--prompts is needed (or --trace, a trace recorded earlier with the same model)")
        if self.hardware is not None and not self.hardware.is_file():
            raise EcoSimError(f"--hardware {self.hardware}: no such profile file")
        missing = [p for p in self.prompts if not p.exists()]
        if missing:
            raise EcoSimError(f"--prompts {missing[0]}: no such file or directory")
        if self.max_new_tokens < 1:
            raise EcoSimError(f"--max-new-tokens {self.max_new_tokens}: must be at least 1")
        if self.trace is not None and not (self.trace / MANIFEST).is_file():
            raise EcoSimError(f"--trace {self.trace}: no such trace (a directory with {MANIFEST})")
        t = self.sampler
        if (why := t.problem()) is not None:
            raise EcoSimError(why)
        if self.trace is not None and not t.greedy:
            from validate.recorded import check_same_sampler

            check_same_sampler(t, read_manifest(self.trace), self.trace)
        for spec in self.choice.policies:
            if spec.predictor:
                check_predictor_name(spec.predictor)
            if spec.policy.priced and self.hardware is None:
                raise EcoSimError(f"{spec.label()} selects by the cost model: give the profile it prices with (--hardware, "
                                  "from validate calibrate)")
        on_the_fly = sorted({s.predictor for s in self.choice.policies if s.predictor in KINDS})
        if on_the_fly:  # k-fold over the requests: enough requests, checked before recording or loading anything
            if self.trace is not None:
                n, where = len(read_manifest(self.trace)["requests"]), f"--trace {self.trace}"
            else:
                n = len(read_prompts(self.prompts, self.max_prompts))
                where = "--prompts" + (f" with --max-prompts {self.max_prompts}" if self.max_prompts else "")
            check_requests(n, on_the_fly[0], where)
        check_one_device(self.device)
        check_output(self.out, VALIDATE_RUN, force=self.force, resume=True)  # a run is continued (parts.py)
        Parts(self.out).check(self.resume_key(), self.force)
        resolve(self.model)  # a missing model fails here, before anything is written
