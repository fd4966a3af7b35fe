"""Training of EcoSim's embedded default pair (`python -m tracer.train_pair`), one module a job.

- `config`: the two model configs, the special token ids and the targets the pair is held to;
- `data`: tokenizer, token streams, training and validation windows, prompts;
- `balance`: the expert load-balancing losses (per layer over a batch, and per sequence);
- `schedule`: optimiser, learning-rate schedule and their constants;
- `log`: the progress lines of a training loop and its final means;
- `target_loop`: the target's training loop; `distill`: the draft's distillation loop;
- `measure`: what the card reports (losses, agreement, expert balance, sizes);
- `pipeline`: the stages of one run, from seeding to `train_metrics.json`;
- `card`: `MODEL_CARD.md`, rendered from `tracer/templates/` and the measured figures.
"""
