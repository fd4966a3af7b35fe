"""Text into training data: the BPE tokenizer, token streams, windows and the evaluation prompts.

Documents are `<|bos|> text <|eos|>`, concatenated into one stream; training reads random windows
from a seeded generator and validation the first non-overlapping windows, so both are reproducible.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from tracer.training.config import BOS_ID, EOS_ID, PAD_ID, SPECIALS


def train_tokenizer(train_texts: list[str], vocab_size: int):
    """(tokenizers.Tokenizer, PreTrainedTokenizerFast): byte-level BPE with the specials first."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(train_texts, trainer=trainer)
    assert [tok.token_to_id(s) for s in SPECIALS] == [PAD_ID, BOS_ID, EOS_ID]
    # encode(text) gives <|bos|> + ids, as in training (each document is <|bos|> text <|eos|>).
    tok.post_processor = processors.TemplateProcessing(
        single="<|bos|> $A",
        pair="<|bos|> $A <|bos|> $B",
        special_tokens=[("<|bos|>", BOS_ID)],
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|bos|>",
        eos_token="<|eos|>",
        pad_token="<|pad|>",
        model_max_length=4096,
    )
    return tok, fast


def encode_stream(tok, texts: list[str]) -> torch.Tensor:
    """<|bos|> doc <|eos|> for every document, concatenated into one 1-D stream."""
    encs = tok.encode_batch(texts, add_special_tokens=False)
    parts = []
    for e in encs:
        parts.append(np.asarray([BOS_ID] + e.ids + [EOS_ID], dtype=np.int64))
    return torch.from_numpy(np.concatenate(parts))


class Windows:
    """Random (seeded) windows of seq_len+1 tokens from a stream."""

    def __init__(self, stream: torch.Tensor, seq_len: int, batch: int, seed: int):
        self.stream, self.seq_len, self.batch = stream, seq_len, batch
        self.gen = torch.Generator().manual_seed(seed)

    def next(self) -> torch.Tensor:
        hi = len(self.stream) - self.seq_len - 1
        starts = torch.randint(0, hi, (self.batch,), generator=self.gen)
        return torch.stack([self.stream[s : s + self.seq_len + 1] for s in starts.tolist()])


def eval_windows(stream: torch.Tensor, seq_len: int, max_tokens: int) -> torch.Tensor:
    """Non-overlapping validation windows from the start of the stream (deterministic)."""
    n = min(max_tokens, len(stream) - 1) // seq_len
    return torch.stack([stream[i * seq_len : i * seq_len + seq_len + 1] for i in range(n)])


def load_prompts(prompt_dir: Path) -> list[dict]:
    """Every line of `prompt_dir/*.jsonl` (files sorted by name): the prompts traces record."""
    prompts = []
    for p in sorted(prompt_dir.glob("*.jsonl")):
        for line in p.read_text(encoding="utf-8").splitlines():
            if line.strip():
                prompts.append(json.loads(line))
    return prompts
