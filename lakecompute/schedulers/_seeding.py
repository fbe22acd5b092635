"""The worker-start hook: fresh global random generators in every worker process.

A forked worker starts with a copy of its parent's generator states, so code that draws from
``np.random``, ``random`` or ``torch`` without the seeded ``rng`` it is given would draw the same
numbers in every worker. Every kind of worker process calls `reseed_globals` once as it starts:
the processed scheduler's (which run evals and ``ds.batches(num_workers=n)``), eval workers
elsewhere (Ray's), and torch's DataLoader workers (``ds.pytorch(num_workers=n)``, through its
``worker_init_fn``).
"""

from __future__ import annotations

import random
import secrets
import sys

# numpy.random itself, not numpy: numpy 2 imports it on first use, and a worker forked from a caller
# that never used it would import it again at every start (~10 ms of CPU per worker and eval).
from numpy import random as np_random

__all__ = ["reseed_globals"]


def reseed_globals(seed: int | None = None) -> None:
    """Reseed numpy's and Python's global generators, and torch's if torch is imported.

    Args:
        seed: what the generators are seeded from; None for fresh entropy (a different seed in every
            call, so every worker draws differently).
    """
    if seed is None:
        seed = secrets.randbits(64)
    random.seed(seed)
    # The legacy global generator takes up to 32 bits per word.
    np_random.seed([seed & 0xFFFFFFFF, seed >> 32 & 0xFFFFFFFF])
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)
