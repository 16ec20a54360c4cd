"""The chapters' setup cell (``memobook.setup_cell_source``), run for real where
``pytorch_memo`` is missing: it installs the pinned release, and every failure (no
package index, a silent one, no pip) ends in one short message, within its time bound.

Issue 24, D13: before, the cell installed the moving ``git+...@main``, and a failure was
a raw ``CalledProcessError`` traceback with no advice (or minutes of silence).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import nbclient
import nbformat
import pytest

import memobook

RELEASE = memobook.package_release()
ADVICE = (
    "Check the network, or install it yourself, then restart the kernel:\n"
    f"  pip install {RELEASE}, or in a clone of\n"
    f"  {memobook.repository_url()}: pip install -e ."
)


def test_the_release_is_pyprojects_name_and_version() -> None:
    import tomllib

    project = tomllib.loads(memobook.PYPROJECT.read_text())["project"]
    assert f"{project['name']}=={project['version']}" == RELEASE
    source = memobook.setup_cell_source()
    assert f'release = "{RELEASE}"' in source
    assert "git+" not in source
    assert "@main" not in source  # never a moving branch


def test_the_cell_fits_the_books_column() -> None:
    for line in memobook.setup_cell_source().splitlines():
        assert len(line) <= memobook.CODE_WIDTH, line


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two Pythons without pytorch_memo: one with pip (the test environment's pip on
    its path, nothing else of it), one without."""
    root = tmp_path_factory.mktemp("bare")
    made = {}
    for name in ("pip", "nopip"):
        subprocess.run(
            [sys.executable, "-m", "venv", "--without-pip", str(root / name)], check=True
        )
        made[name] = root / name / "bin" / "python"
    only_pip = root / "only-pip"
    only_pip.mkdir()
    pip = Path(sysconfig.get_paths()["purelib"]) / "pip"
    assert pip.is_dir(), "the test environment has pip (nox makes it with --seed)"
    (only_pip / "pip").symlink_to(pip)
    site = subprocess.run(
        [made["pip"], "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    (Path(site) / "only_pip.pth").write_text(f"{only_pip}\n")
    return made


def _offline_env(index: str) -> dict[str, str]:
    """pip's settings that reach nothing but ``index``: no configuration files, no
    proxies, no local wheels."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("PIP_") and "proxy" not in key.lower()
    }
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL=index, PIP_NO_CACHE_DIR="1")
    return env


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port  # closed again: a connection to it is refused


def _run_cell(python: Path, env: dict[str, str], seconds: int = 300) -> tuple[str, float]:
    code = memobook.setup_cell_source(seconds=seconds)
    start = time.monotonic()
    done = subprocess.run(
        [str(python), "-I", "-c", code],
        check=False, capture_output=True, text=True, env=env, timeout=240,
    )  # fmt: skip
    elapsed = time.monotonic() - start
    assert done.returncode != 0
    assert f"Installing {RELEASE} (at most {seconds} s)..." in done.stdout
    return done.stderr, elapsed


def _message(stderr: str) -> str:
    """The exception's message, after Python's traceback (a script shows it)."""
    assert "CalledProcessError" not in stderr
    return stderr.split("SetupError: ", 1)[1].strip()


def test_no_package_index_gives_one_message_with_advice(bare: dict[str, Path]) -> None:
    index = f"http://127.0.0.1:{_free_port()}/simple"
    stderr, elapsed = _run_cell(bare["pip"], _offline_env(index))
    assert _message(stderr) == (
        f"Could not install {RELEASE}: the package index could not be reached.\n{ADVICE}"
    )
    assert elapsed < 60  # refused connections: pip's two retries, a few seconds


def test_a_silent_package_index_is_cut_at_the_time_bound(bare: dict[str, Path]) -> None:
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        index = f"http://127.0.0.1:{silent.getsockname()[1]}/simple"
        stderr, elapsed = _run_cell(bare["pip"], _offline_env(index), seconds=4)
    assert _message(stderr) == f"Could not install {RELEASE}: pip took more than 4 s.\n{ADVICE}"
    assert 4 <= elapsed < 4 + 30  # the bound, plus two interpreters' start


def test_no_pip_gives_one_message_with_advice(bare: dict[str, Path]) -> None:
    stderr, _ = _run_cell(bare["nopip"], _offline_env("http://127.0.0.1:9/simple"))
    assert _message(stderr) == (
        f"Could not install {RELEASE}: {bare['nopip']}: No module named pip.\n{ADVICE}"
    )


def test_in_a_notebook_run_all_stops_at_the_message_without_a_traceback(
    bare: dict[str, Path], tmp_path: Path
) -> None:
    """In a kernel (IPython), the failure is the message alone, and no later cell runs."""
    index = f"http://127.0.0.1:{_free_port()}/simple"
    hide = (  # this kernel has pytorch_memo: the cell must believe it is missing
        "import importlib.util\n"
        "_find = importlib.util.find_spec\n"
        "importlib.util.find_spec = lambda name, *a: None if name == 'pytorch_memo' "
        "else _find(name, *a)"
    )
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(hide),
        nbformat.v4.new_code_cell(memobook.setup_cell_source()),
        nbformat.v4.new_code_cell("print('the next cell ran')"),
    ]
    env = _offline_env(index)
    env["PIP_TARGET"] = str(tmp_path / "target")  # pip ignores the installed package
    client = nbclient.NotebookClient(
        nb, kernel_name="python3", timeout=120, resources={"metadata": {"path": str(tmp_path)}}
    )
    with pytest.raises(nbclient.exceptions.CellExecutionError):
        client.execute(env=env)  # the kernel's environment, which pip inherits
    outputs = nb.cells[1].outputs
    assert [o["output_type"] for o in outputs] == ["stream", "error"]
    assert outputs[0]["text"] == f"Installing {RELEASE} (at most 300 s)...\n"
    errors = outputs[1:]
    assert errors[0]["ename"] == "SetupError"
    assert errors[0]["traceback"] == [
        f"Could not install {RELEASE}: the package index could not be reached.\n{ADVICE}"
    ]
    assert nb.cells[2].outputs == []  # Run All stopped there
