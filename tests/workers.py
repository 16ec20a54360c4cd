"""Workers for ``run_workers`` tests: module-level, so a started rank can import them."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset


def dataloader_sum() -> float:
    """Each rank sums ``arange(8)`` through a DataLoader with two worker processes."""
    loader = DataLoader(TensorDataset(torch.arange(8.0)), batch_size=2, num_workers=2)
    total = torch.zeros(())
    for (batch,) in loader:
        total += batch.sum()
    dist.all_reduce(total)
    return float(total)


def start_a_child_then_hang(folder: str) -> None:
    """Start a long-running child process, record its pid, and never return."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    (Path(folder) / f"child-of-rank-{dist.get_rank()}").write_text(str(child.pid))
    time.sleep(120)


def hang() -> None:
    """Never return (within the tests' patience)."""
    time.sleep(120)


def rank1_fails_rank0_waits() -> None:
    """Rank 1 raises at once; rank 0 waits for it in a barrier (which never comes)."""
    import torch.distributed as dist

    if dist.get_rank() == 1:
        raise ValueError("rank 1 gives up")
    dist.barrier()
