"""pytorch_memo._compat: each use of a torch internal, checked by what it must give.

Every test names, in its docstring, the torch versions it was run on and passed:
2.14.1 is the book's stack; the others are environments under /work/venvs (torch 2.8.0,
2.9.1, 2.10.0, 2.11.0 and 2.15.0), run with this checkout first on ``PYTHONPATH``:
``PYTHONPATH=. /work/venvs/torch-X/bin/python -m pytest -p no:cacheprovider
tests/test_compat.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from pytorch_memo._compat import (
    TorchInternalsChanged,
    cpp_extension_lock_is_a_file,
    cpu_allocations,
    cuda_toolkit_home,
    ddp_lazy_imports,
    inductor_config,
)
from pytorch_memo.modules import inventory

ROOT = Path(__file__).resolve().parent.parent


def test_cpu_allocations_are_the_allocations_in_time_order() -> None:
    """Checked on torch 2.8.0, 2.9.1, 2.10.0, 2.11.0, 2.14.1 and 2.15.0."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, acc_events=True) as prof:
        a = torch.empty(1000)  # 4,000 bytes
        b = torch.empty(250, dtype=torch.float64)  # 2,000 bytes
        del a
        c = torch.empty(10, dtype=torch.int8)  # 10 bytes
    events = cpu_allocations(prof)
    sizes = [size for _, size in events]
    assert sizes[:4] == [4000, 2000, -4000, 10]
    times = [t for t, _ in events]
    assert times == sorted(times)
    assert all(isinstance(t, int) for t in times)
    del b, c


def test_cpu_allocations_says_which_internal_is_missing() -> None:
    """Checked on torch 2.8.0, 2.9.1, 2.10.0, 2.11.0, 2.14.1 and 2.15.0."""
    with pytest.raises(TorchInternalsChanged, match=r"peak_memory on the CPU relies on a torch"):
        cpu_allocations(SimpleNamespace())  # no .profiler: as if torch renamed it
    empty = SimpleNamespace(profiler=SimpleNamespace(kineto_results=None))
    with pytest.raises(RuntimeError, match="the profiler recorded no results"):
        cpu_allocations(empty)


def test_the_lock_file_blocks_builds_exactly_when_it_is_a_file_baton(tmp_path: Path) -> None:
    """Checked on torch 2.8.0, 2.9.1, 2.10.0, 2.11.0 (FileBaton), 2.14.1 and 2.15.0 (FileLock).

    What matters is behaviour: with a ``FileBaton`` an existing, unheld ``lock`` file
    stops the next build; with a ``FileLock`` it does not.
    """
    from torch.utils import cpp_extension

    lock = tmp_path / "lock"
    lock.touch()  # left by an earlier build, held by nobody
    # Looked up by name: each class exists in some releases only, and mypy checks this
    # file against whichever torch is installed.
    names = vars(cpp_extension)
    if cpp_extension_lock_is_a_file():
        assert not names["FileBaton"](str(lock)).try_acquire()
    else:
        held = names["FileLock"](str(lock))
        held.acquire(timeout=0)  # does not wait for the file
        held.release()


def test_cuda_toolkit_home_holds_nvcc() -> None:
    """Checked on torch 2.8.0, 2.9.1, 2.10.0, 2.11.0, 2.14.1 and 2.15.0."""
    home = cuda_toolkit_home()
    assert home is None or (Path(home) / "bin" / "nvcc").exists()


def test_ddp_imports_the_lazy_modules_when_constructed() -> None:
    """Checked on torch 2.8.0, 2.9.1, 2.10.0, 2.11.0, 2.14.1 and 2.15.0."""
    names = ddp_lazy_imports()
    assert names  # torch._dynamo exists in every supported torch
    script = textwrap.dedent(
        f"""
        import sys, tempfile
        import torch, torch.distributed as dist
        from torch import nn
        names = {names!r}
        before = [n for n in names if n in sys.modules]
        store = tempfile.mktemp()
        dist.init_process_group("gloo", init_method=f"file://{{store}}", rank=0, world_size=1)
        nn.parallel.DistributedDataParallel(nn.Linear(2, 1))
        dist.destroy_process_group()
        print(before, [n for n in names if n in sys.modules])
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", script],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == f"[] {list(names)}"


class _Buffers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("kept", torch.zeros(1))
        self.register_buffer("dropped", torch.zeros(1), persistent=False)
        self.inner = nn.BatchNorm1d(2)
        self.inner.register_buffer("scratch", torch.zeros(2), persistent=False)


def test_persistent_buffers_from_state_dict_agree_with_torchs_own_set() -> None:
    """Checked on torch 2.8.0, 2.9.1, 2.10.0, 2.11.0, 2.14.1 and 2.15.0.

    ``inventory`` reads persistence from ``state_dict()``'s keys (public); here, and
    only here, torch's private ``_non_persistent_buffers_set`` is read to cross-check.
    """
    module = _Buffers()
    table = inventory(module)
    for prefix, sub in module.named_modules():
        hidden = getattr(sub, "_non_persistent_buffers_set", None)
        if hidden is None:
            pytest.skip("this torch has no _non_persistent_buffers_set to compare with")
        for name, _ in sub.named_buffers(recurse=False):
            full = f"{prefix}.{name}" if prefix else name
            assert table[full].persistent is (name not in hidden)
    assert [r.name for r in table if r.kind == "buffer" and not r.persistent] == [
        "dropped",
        "inner.scratch",
    ]


def test_inductor_config_is_the_option_use_deterministic_algorithms_sets() -> None:
    """Checked on torch 2.8.0, 2.9.1 (None: no option) and 2.10.0 to 2.15.0."""
    config = inductor_config()
    if torch.__version__ < "2.10":
        assert config is None
        return
    before = (torch.are_deterministic_algorithms_enabled(), config.deterministic)
    try:
        for mode in (True, False):
            torch.use_deterministic_algorithms(mode)
            assert config.deterministic is mode
    finally:
        torch.use_deterministic_algorithms(before[0])
        config.deterministic = before[1]
