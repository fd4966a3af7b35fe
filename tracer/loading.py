"""Finding and loading checkpoints: registry names, local directories, hub ids; safetensors only.

`--model` is a registry name (``deepseek-v3.1``), a local checkpoint directory, a pair directory
holding ``target/`` and ``draft/`` (what ``tracer tiny`` and ``tracer.train_pair`` write), or a
Hugging Face hub id. A hub id loads from the local cache when it is there; otherwise the hub must
be reachable. With neither, or with ``HF_HUB_OFFLINE=1``, loading stops with one line naming the
id it tried. Weights load from safetensors only (``use_safetensors=True``); ``trust_remote_code``
only when the user passes it.
"""

from __future__ import annotations

import importlib.util
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from tracer.errors import TracerError
from tracer.registry import known_names, lookup

DTYPES = ("auto", "float32", "bfloat16", "float16")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")


@dataclass(frozen=True)
class Source:
    """Where a model comes from: `ref` is a local directory or a hub id."""

    name: str
    ref: str
    local: bool
    default_draft: str = "early-exit:auto"
    attn: str | None = None


def _model_dir(path: Path) -> Path | None:
    if (path / "config.json").is_file():
        return path
    return None


def resolve(spec: str, *, what: str = "--model") -> Source:
    """Turn a `--model`/`--draft` value into a Source, or fail in one line."""
    spec = spec.strip()
    if not spec:
        raise TracerError(f"{what}: empty value")
    path = Path(spec).expanduser()
    entry = lookup(spec)
    if entry is not None and not path.is_dir():  # an existing directory wins over a short name
        return Source(entry.name, entry.hub_id, False, entry.draft, entry.attn)
    if path.exists():
        if not path.is_dir():
            raise TracerError(f"{what} {spec}: not a directory (a checkpoint is a directory with config.json)")
        if _model_dir(path / "target") is not None:  # a pair directory: target/ and draft/
            draft = path / "draft"
            default = str(draft) if _model_dir(draft) is not None else "early-exit:auto"
            return Source(path.resolve().name, str(path / "target"), True, default)
        if _model_dir(path) is not None:
            full = path.resolve()
            name = f"{full.parent.name}/{full.name}" if full.name in ("target", "draft") else full.name
            return Source(name, str(path), True)
        raise TracerError(f"{what} {spec}: no config.json in this directory (nor in {spec}/target)")
    if spec.startswith((".", "/", "~")) or spec.endswith("/") or not _HUB_ID.match(spec):
        if "/" in spec or spec.startswith((".", "~")):
            raise TracerError(f"{what} {spec}: no such directory")
        raise TracerError(f"{what} {spec}: unknown model name; known: {known_names()} (or a local directory, or a hub id)")
    return Source(spec.split("/")[-1].lower(), spec, False)


def hub_offline(timeout: float = 3.0) -> bool:
    """True when HF_HUB_OFFLINE is set or the hub cannot be reached (then it sets HF_HUB_OFFLINE=1)."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return True
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname or "huggingface.co", port), timeout=timeout).close()
        return False
    except OSError:
        os.environ["HF_HUB_OFFLINE"] = "1"
        return True


def locate(src: Source) -> tuple[str, bool]:
    """(what to pass to from_pretrained, local_files_only); fails in one line when nothing is reachable."""
    if src.local:
        if not any(Path(src.ref).glob("*.safetensors")):
            raise TracerError(f"{src.ref}: no *.safetensors weights (the tracer loads safetensors only)")
        return src.ref, True
    from huggingface_hub import constants, try_to_load_from_cache

    cached = try_to_load_from_cache(src.ref, "config.json")
    if isinstance(cached, str):
        return src.ref, True
    if hub_offline():
        raise TracerError(
            f"no weights for {src.name} ({src.ref}): not in the Hugging Face cache ({constants.HF_HUB_CACHE}) "
            f"and the hub is unreachable (offline); download it where there is network, or pass --model /path/to/checkpoint"
        )
    return src.ref, False


def torch_dtype(name: str) -> Any:
    import torch

    if name not in DTYPES:
        raise TracerError(f"--dtype {name}: expected one of {', '.join(DTYPES)}")
    return "auto" if name == "auto" else getattr(torch, name)


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:300]


def load_model(src: Source, *, dtype: str = "auto", device: str = "cpu", attn: str = "auto",
               trust_remote_code: bool = False) -> Any:
    """A causal LM in eval mode on `device` ("auto" spreads it over the GPUs with device_map)."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    ref, local_only = locate(src)
    hf_logging.disable_progress_bar()
    kw: dict[str, Any] = dict(
        dtype=torch_dtype(dtype), use_safetensors=True, local_files_only=local_only,
        trust_remote_code=trust_remote_code,
    )
    if attn != "auto":
        kw["attn_implementation"] = attn
    elif src.attn is not None:
        kw["attn_implementation"] = src.attn
    accelerate = importlib.util.find_spec("accelerate") is not None
    if device == "auto" or (device != "cpu" and accelerate):
        kw["device_map"] = device  # straight onto the device(s), no stop in host memory
    try:
        if attn == "auto" and "attn_implementation" not in kw:
            kw["attn_implementation"] = _default_attn(ref, local_only, trust_remote_code)
        model = AutoModelForCausalLM.from_pretrained(ref, **kw)
        if device not in ("cpu", "auto") and "device_map" not in kw:
            model = model.to(device)  # without accelerate: load on the host, then move
    except (OSError, ValueError, ImportError, RuntimeError, KeyError) as e:
        raise TracerError(f"could not load {src.ref}: {_one_line(e)}") from None
    # Routing is read by hooks; a checkpoint saved for training (output_router_logits=True) would
    # otherwise compute its load-balancing loss on every forward, which fails under a tree mask.
    if getattr(model.config, "output_router_logits", False):
        model.config.output_router_logits = False
    return model.eval()


def check_device(device: str) -> None:
    """Fail early, in one line, on a device this machine does not have."""
    import torch

    if device == "cpu":
        return
    if device == "auto":
        if not torch.cuda.is_available():
            raise TracerError("--device auto: no CUDA device is available here")
        if importlib.util.find_spec("accelerate") is None:
            raise TracerError('--device auto (device_map="auto" over the GPUs) needs the accelerate package')
        return
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise TracerError(f"--device {device}: expected cpu, cuda, cuda:N or auto") from None
    if dev.type == "cuda" and (not torch.cuda.is_available() or (dev.index or 0) >= torch.cuda.device_count()):
        raise TracerError(f"--device {device}: no such CUDA device here ({torch.cuda.device_count()} available)")


def _default_attn(ref: str, local_only: bool, trust_remote_code: bool) -> str:
    """eager for GPT-OSS (sinks: eager only), sdpa otherwise."""
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(ref, local_files_only=local_only, trust_remote_code=trust_remote_code)
    return "eager" if getattr(cfg, "model_type", "") == "gpt_oss" else "sdpa"


def load_tokenizer(src: Source, *, trust_remote_code: bool = False) -> Any:
    from transformers import AutoTokenizer

    ref, local_only = locate(src)
    try:
        return AutoTokenizer.from_pretrained(ref, local_files_only=local_only, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, ImportError, KeyError) as e:
        raise TracerError(f"could not load the tokenizer of {src.ref}: {_one_line(e)}") from None


def same_tokenizer(a: Any, b: Any) -> bool:
    """Whether two tokenizers map every token string to the same id."""
    return a.get_vocab() == b.get_vocab()
