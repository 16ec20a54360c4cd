"""pytorch_memo.gpu_memory, checked against the allocator's rules and, on CUDA, torch's."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from pytorch_memo.gpu_memory import (
    LARGE_BUFFER,
    MIN_BLOCK_SIZE,
    SMALL_BUFFER,
    SMALL_SIZE,
    AllocatorBlock,
    allocator_block,
)

MiB = 2**20


@pytest.mark.parametrize(
    ("nbytes", "block", "pool", "segment"),
    [
        (1, 512, "small", 2 * MiB),
        (512, 512, "small", 2 * MiB),
        (513, 1024, "small", 2 * MiB),
        (20_000, 20_480, "small", 2 * MiB),
        (MiB, MiB, "small", 2 * MiB),
        (MiB + 1, MiB + 512, "large", 20 * MiB),
        (4 * MiB, 4 * MiB, "large", 20 * MiB),
        (10 * MiB - 512, 10 * MiB - 512, "large", 20 * MiB),
        (10 * MiB, 10 * MiB, "large", 10 * MiB),
        (10 * MiB + 1, 10 * MiB + 512, "large", 12 * MiB),  # 2 MiB - 512 left: split
        (11 * MiB, 12 * MiB, "large", 12 * MiB),  # exactly 1 MiB left: not split
        (11 * MiB - 512, 11 * MiB - 512, "large", 12 * MiB),  # 1 MiB + 512 left
        (64 * MiB, 64 * MiB, "large", 64 * MiB),
    ],
)
def test_examples_worked_from_the_source(nbytes: int, block: int, pool: str, segment: int) -> None:
    assert allocator_block(nbytes) == AllocatorBlock(nbytes, block, pool, segment)  # type: ignore[arg-type]


@given(st.integers(1, 2**40))
def test_the_rules_hold_for_any_request(nbytes: int) -> None:
    got = allocator_block(nbytes)
    rounded = -(-nbytes // MIN_BLOCK_SIZE) * MIN_BLOCK_SIZE
    assert got.requested == nbytes
    assert got.rounding == got.block - nbytes >= 0
    assert got.block % MIN_BLOCK_SIZE == 0
    assert got.block <= got.segment
    assert got.pool == ("small" if rounded <= SMALL_SIZE else "large")
    if got.pool == "small":
        assert got.block == rounded
        assert got.segment == SMALL_BUFFER
    else:
        own = -(-rounded // (2 * MiB)) * (2 * MiB)
        assert got.segment == (LARGE_BUFFER if rounded < 10 * MiB else own)
        # split off when more than 1 MiB remains, else the whole segment
        assert got.block == (rounded if got.segment - rounded > SMALL_SIZE else got.segment)


@pytest.mark.parametrize(
    ("nbytes", "error", "message"),
    [
        (0, ValueError, "nbytes must be >= 1, got 0"),
        (-5, ValueError, "nbytes must be >= 1, got -5"),
        (2**63, ValueError, "nbytes must be <= 4611686018427387904"),
        (1.5, TypeError, "nbytes must be an int, got float"),
        (True, TypeError, "nbytes must be an int, got bool"),
        ("512", TypeError, "nbytes must be an int, got str"),
    ],
)
def test_bad_requests_are_named(nbytes: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        allocator_block(nbytes)  # type: ignore[arg-type]


FRESH_ALLOCATIONS = """
import json, sys
import torch
found = []
for nbytes in json.loads(sys.argv[1]):
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated()
    held = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    grown = torch.cuda.memory_allocated() - before
    segments = [
        (s["segment_type"], s["total_size"])
        for s in torch.cuda.memory_snapshot()
        if s["address"] <= held.data_ptr() < s["address"] + s["total_size"]
    ]
    found.append([nbytes, grown, segments])
    del held
print(json.dumps(found))
"""


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_matches_cudas_allocator() -> None:  # pragma: no cover - GPU only
    """In a fresh process, as the chapter's cell runs: a process that has used CUDA
    before may hold a partly used segment whose free block takes the request (a worker
    that ran other tests gave an 11 MiB request an 11 MiB block cut from one)."""
    import json
    import subprocess
    import sys

    sizes = [1, 513, 20_000, 4 * MiB, 11 * MiB]
    done = subprocess.run(
        [sys.executable, "-c", FRESH_ALLOCATIONS, json.dumps(sizes)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    found = {n: (grown, segments) for n, grown, segments in json.loads(done.stdout)}
    for nbytes in sizes:
        expected = allocator_block(nbytes)
        grown, segments = found[nbytes]
        assert grown == expected.block, (nbytes, grown, expected)
        assert [tuple(s) for s in segments] == [(expected.pool, expected.segment)], nbytes
