"""demo_train_common.py — the pieces tools/train_demo.py and
tools/train_demo_drafter.py share: reading and encoding the KJV corpus, the
train/validation split, the learning-rate schedule and the step budget.

Plain Python + numpy; the callers bring the tokenizer and torch.
"""
import math

import numpy as np


def read_verses(path):
    """The corpus file's non-blank lines (one verse each), without newlines."""
    with open(path, encoding="utf-8") as f:
        return [l.rstrip("\n") for l in f if l.strip()]


def encode_corpus(tok, lines):
    """Whole text as one stream, each verse ending in '\\n'; encoded in chunks
    that end at a newline (a pre-token boundary), so equal to one encode."""
    ids = []
    for i in range(0, len(lines), 500):
        chunk = "".join(l + "\n" for l in lines[i:i + 500])
        ids.extend(tok.encode(chunk).ids)
    return np.array(ids, dtype=np.int64)


def split_val(ids):
    """(train, validation): the last 1% of the token stream validates."""
    n_val = len(ids) // 100
    return ids[:-n_val], ids[-n_val:]


def cosine_lr(step, steps, warm, peak, floor):
    """Linear warm-up over `warm` steps, then a cosine from peak down to
    floor * peak at the last step."""
    if step < warm:
        return peak * (step + 1) / warm
    return peak * (floor + (1.0 - floor) * 0.5 *
                   (1 + math.cos(math.pi * (step - warm) / max(1, steps - warm))))


def fit_steps(per_step_s, max_seconds, steps, min_steps):
    """The step count that fits max_seconds at per_step_s each (never below
    min_steps, never above steps)."""
    fit = int(max_seconds / per_step_s)
    return max(fit, min_steps) if fit < steps else steps
