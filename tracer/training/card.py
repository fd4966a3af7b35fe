"""`MODEL_CARD.md` of the default pair, rendered from `tracer/templates/` and `train_metrics.json`.

The text lives in the templates (`string.Template`, `${name}` fields); this module turns the
measured figures into those fields. Every number comes from the metrics, the training constants
(`schedule`, `log`) or the targets (`config.TARGETS`), so re-rendering after a rerun never leaves
a stale figure behind.
"""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path
from string import Template

from tracer.corpus import LICENCE
from tracer.training.config import SPECIALS, TARGETS, PairTargets
from tracer.training.log import LAST, fmt_time
from tracer.training.schedule import BETAS, CLIP_NORM, DRAFT_WD, LR_FLOOR, TARGET_WD

TARGET_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
               "num_key_value_heads", "head_dim", "num_experts", "num_experts_per_tok",
               "moe_intermediate_size", "norm_topk_prob", "decoder_sparse_step", "mlp_only_layers",
               "tie_word_embeddings", "max_position_embeddings", "rope_theta", "rms_norm_eps",
               "hidden_act", "output_router_logits", "router_aux_loss_coef",
               "bos_token_id", "eos_token_id", "pad_token_id")
DRAFT_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "head_dim", "intermediate_size", "tie_word_embeddings",
              "max_position_embeddings", "rope_theta", "rms_norm_eps", "hidden_act",
              "bos_token_id", "eos_token_id", "pad_token_id")


def template(name: str) -> Template:
    """A card template shipped in the `tracer` package (`tracer/templates/NAME`)."""
    return Template(files("tracer").joinpath("templates", name).read_text(encoding="utf-8"))


def write_card(out: Path, m: dict) -> None:
    """Write `out/MODEL_CARD.md` from the metrics `m` of `train_metrics.json`."""
    (out / "MODEL_CARD.md").write_text(render_card(m), encoding="utf-8")


def render_card(m: dict, targets: PairTargets = TARGETS) -> str:
    """The card's text for the metrics `m` (with the second stage's account when `m` has it)."""
    for c in (m["target_config"], m["draft_config"]):  # transformers 5 saves num_experts as num_local_experts
        if c.get("num_experts") is None and c.get("num_local_experts") is not None:
            c["num_experts"] = c["num_local_experts"]
    fields = {**_run_fields(m), **_model_fields(m), **_training_fields(m), **_measured_fields(m)}
    fields["target_rows"] = "\n".join(f"| {label} | {measured} | {_yes(ok)} |"
                                      for label, measured, ok in target_rows(m, targets))
    return template("model_card.md").substitute(fields)


def target_rows(m: dict, t: PairTargets = TARGETS) -> list[tuple[str, str, bool]]:
    """(target, measured, met) for each target of `t`, per task kind where the metrics have it."""
    rb = m.get("rebalance")
    size = m["target_bytes"] + m["draft_bytes"]
    wall = m["wall_seconds"] + (rb["wall_seconds"] if rb else 0.0)
    worst_task = min(m["greedy"]["top1_agreement_per_task"].values())
    gen = m["greedy"]["target_expert_balance"]
    rows = [
        (f"pair well under {t.size_said_mb:g} MB", f"{size / 1e6:.1f} MB", size < t.size_max_mb * 1e6),
        (f"a few tens of CPU minutes (aim <= {t.wall_minutes:g} min wall on {t.wall_threads} threads)",
         f"{fmt_time(wall)}{' (both stages)' if rb else ''}", wall <= t.wall_minutes * 60),
        (f"greedy top-1 agreement >= {t.min_agreement:.0%} on every task kind (proxy for accepted length + 1 >= 2 "
         f"under a 16-node tree)", f"{worst_task:.1%} (worst task)", worst_task >= t.min_agreement),
        (f"no expert above {t.max_share:g}x its fair share on the greedy continuations",
         f"{gen['max_over_fair']:.2f}x", gen["max_over_fair"] <= t.max_share),
        ("no dead expert on the greedy continuations", f"{gen['dead_experts']} dead",
         gen["dead_experts"] <= t.max_dead),
    ]
    for k, v in m["greedy"].get("target_expert_balance_per_task", {}).items():
        rows.append((f"no expert above {t.max_share:g}x its fair share, nor dead, on each task's greedy "
                     f"continuations ({k})", f"{v['max_over_fair']:.2f}x, {v['dead_experts']} dead",
                     v["max_over_fair"] <= t.max_share and v["dead_experts"] <= t.max_dead))
    return rows


def _yes(ok: bool) -> str:
    return "yes" if ok else "**no**"


def _run_fields(m: dict) -> dict[str, object]:
    """How to rerun, on what, and how long it took."""
    rb = m.get("rebalance")
    cpu_note = ""
    if m.get("cpu_seconds"):
        cpu_note = (f"; CPU time of the process {fmt_time(m['cpu_seconds'])} ({m['cpu_seconds'] / 60:.0f} CPU "
                    f"minutes; where other work shares the cores, both are upper bounds)")
    return {
        "commands": m["command"] + (f"\n{rb['command']}" if rb else ""),
        "seed": m["args"]["seed"], "python": m["python"], "stdlib_root": m["stdlib_root"],
        "torch": m["torch"], "transformers": m["transformers"], "wall": fmt_time(m["wall_seconds"]),
        "wall_s": f"{m['wall_seconds']:.0f}", "threads": m["threads"], "machine": m["machine"],
        "cpu_note": cpu_note,
        "target_mb": f"{m['target_bytes'] / 1e6:.2f}", "draft_mb": f"{m['draft_bytes'] / 1e6:.2f}",
        "rebalance_section": "\n" + _rebalance_section(m) if rb else "",
    }


def _model_fields(m: dict) -> dict[str, object]:
    """Tokenizer, both configs and the parameter counts."""
    tc, tp, dp = m["target_config"], m["target_params"], m["draft_params"]
    return {
        "vocab_size": m["vocab_size"],
        "specials": ", ".join(f"`{s}`={i}" for i, s in enumerate(SPECIALS)),
        "target_table": _config_table(tc, TARGET_KEYS), "draft_table": _config_table(m["draft_config"], DRAFT_KEYS),
        "num_experts": tc["num_experts"], "top_k": tc["num_experts_per_tok"],
        "hidden_size": tc["hidden_size"], "moe_intermediate_size": tc["moe_intermediate_size"],
        "expert_params": f"{3 * tc['hidden_size'] * tc['moe_intermediate_size']:,}",
        "expert_bytes": f"{m['expert_bytes_fp32']:,}",
        "t_total": f"{tp['total']:,}", "t_routed_experts": f"{tp['routed_experts']:,}",
        "t_non_expert": f"{tp['non_expert']:,}", "t_embedding": f"{tp['embedding']:,}",
        "t_active": f"{m['target_active_params']:,}",
        "d_total": f"{dp['total']:,}", "d_embedding": f"{dp['embedding']:,}",
    }


def _training_fields(m: dict) -> dict[str, object]:
    """Data, schedule, losses and wall time of the first stage."""
    a, d, t, dr = m["args"], m["data"], m["target_train"], m["draft_train"]
    tokens = a["batch"] * a["seq_len"]
    return {
        "documents": d["documents"], "train_docs": d["train_docs"], "val_docs": d["val_docs"],
        "train_tokens": f"{d['train_tokens']:,}", "val_tokens": f"{d['val_tokens']:,}", "licence": LICENCE,
        "target_steps": a["target_steps"], "draft_steps": a["draft_steps"], "batch": a["batch"],
        "seq_len": a["seq_len"], "tokens_per_step": f"{tokens:,}",
        "target_tokens": f"{a['target_steps'] * tokens:,}", "draft_tokens": f"{a['draft_steps'] * tokens:,}",
        "betas": str(BETAS), "target_wd": TARGET_WD, "draft_wd": DRAFT_WD, "clip": CLIP_NORM,
        "target_lr": a["target_lr"], "draft_lr": a["draft_lr"], "warmup": a["warmup"], "lr_floor": f"{LR_FLOOR:.0%}",
        "balance_coef": m["target_config"]["router_aux_loss_coef"], "alpha": a["alpha"],
        "temperature": a["temperature"], "ce_weight": f"{1 - a['alpha']:.2f}",
        "target_wall": fmt_time(t["seconds"]), "draft_wall": fmt_time(dr["seconds"]), "last": LAST,
        "t_ce": f"{t['final_train_ce_last50']:.4f}", "t_balance": f"{t['final_train_balance_loss_last50']:.4f}",
        "d_ce": f"{dr['final_train_ce_last50']:.4f}", "d_kl": f"{dr['final_train_kl_last50']:.4f}",
        "experts_impl": a.get("train_experts_impl", "grouped_mm"),
    }


def _measured_fields(m: dict) -> dict[str, object]:
    """Validation losses, agreement and expert balance after the last stage."""
    v, g = m["val"], m["greedy"]
    tb_val, tb_gen = v["target_expert_balance"], g["target_expert_balance"]
    per_task_bal = g.get("target_expert_balance_per_task", {})
    per_task_line = ""
    if per_task_bal:
        per_task_line = "Per task kind (each trace records one): " + ", ".join(
            f"{k} {b['max_over_fair']:.2f}x / {b['dead_experts']} dead" for k, b in per_task_bal.items()) + "."
    return {
        "val_positions": f"{v['tokens']:,}",
        "target_val_loss": f"{v['target_val_loss']:.4f}", "draft_val_loss": f"{v['draft_val_loss']:.4f}",
        "val_top1": f"{v['top1_agreement']:.1%}", "val_top4": f"{v['target_top1_in_draft_top4']:.1%}",
        "val_kl": f"{v['draft_kl_to_target']:.3f}",
        "new_tokens": g["new_tokens_per_prompt"], "prompts": g["prompts"],
        "greedy_top1": f"{g['top1_agreement']:.1%}",
        "per_task_agreement": ", ".join(f"{k} {a:.1%}" for k, a in g["top1_agreement_per_task"].items()),
        "balance_rows": _balance_rows("validation", tb_val) + "\n" + _balance_rows("greedy continuations", tb_gen),
        "val_max": f"{tb_val['max_over_fair']:.2f}", "val_dead": tb_val["dead_experts"],
        "gen_max": f"{tb_gen['max_over_fair']:.2f}", "gen_dead": tb_gen["dead_experts"],
        "per_task_balance": per_task_line,
    }


def _config_table(c: dict, keys: tuple[str, ...]) -> str:
    return "\n".join(f"| `{k}` | `{json.dumps(c.get(k))}` |" for k in keys)


def _balance_rows(name: str, b: dict) -> str:
    """One table row per layer: max and min share over fair, dead experts, routed slots."""
    return "\n".join(
        f"| {name} | {i} | {b['max_over_fair_per_layer'][i]:.2f} | {b['min_over_fair_per_layer'][i]:.2f} "
        f"| {b['dead_experts_per_layer'][i]} | {b['routed_slots_per_layer'][i]:,} |"
        for i in range(len(b["max_over_fair_per_layer"]))
    )


def _rebalance_section(m: dict) -> str:
    """The card's account of `tracer.rebalance`, the second stage (sequence-wise balancing)."""
    rb, a = m["rebalance"], m["rebalance"]["args"]
    t, d = rb["target_train"], rb["draft_train"]
    before = rb["before"]["greedy"].get("target_expert_balance_per_task", {})
    before_txt = ", ".join(f"{k} {v['max_over_fair']:.2f}x" for k, v in before.items())
    return template("model_card_rebalance.md").substitute(
        before_note=f" (before this stage, greedy continuations per task: {before_txt})" if before_txt else "",
        target_steps=a["target_steps"], target_lr=a["target_lr"], draft_steps=a["draft_steps"],
        draft_lr=a["draft_lr"], balance_coef=m["target_config"]["router_aux_loss_coef"],
        seq_balance_coef=a["seq_balance_coef"], last=LAST,
        t_ce=f"{t['final_train_ce_last50']:.4f}", t_balance=f"{t['final_train_balance_loss_last50']:.4f}",
        t_seq_balance=f"{t['final_train_seq_balance_loss_last50']:.4f}",
        d_ce=f"{d['final_train_ce_last50']:.4f}", d_kl=f"{d['final_train_kl_last50']:.4f}",
        wall=fmt_time(rb["wall_seconds"]),
    )
