"""Argument checks shared by the helpers: each error names the argument, the value
it got and what was expected.

Every helper checks its arguments through these functions, so that one kind of
argument (a tensor, a count, seconds, a device, matplotlib axes...) is refused the same
way everywhere. The limits that bound the helpers' work live here too.
"""

from __future__ import annotations

import importlib.util
import inspect
import itertools
import math
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from matplotlib.axes import Axes

INT64_MAX = 2**63 - 1
"""The largest storage position, stride or size torch can hold (``int64``)."""
MAX_SECONDS = 365 * 24 * 3600.0
"""The longest timeout a helper accepts: one year. Longer ones overflow some clocks
(``datetime.timedelta``, ``threading``'s ``TIMEOUT_MAX``) and mean "forever"."""
DEVICE_EXAMPLES = "'cpu', 'cuda', 'cuda:0', 'mps'"
_FLOAT_MAX = sys.float_info.max


def _shown(value: Any) -> str:
    try:
        text = repr(value)
    except ValueError:  # an int of more than 4300 digits (sys.get_int_max_str_digits)
        return f"<{type(value).__name__} too long to print>"
    return text if len(text) <= 60 else text[:57] + "..."


def check_type(name: str, value: Any, expected: type | tuple[type, ...], spelled: str) -> None:
    """Raise a TypeError naming ``name`` unless ``value`` is an instance of ``expected``.

    ``spelled`` says what was expected in the message: ``"a bool"``, ``"a torch.nn.Module"``.

    Example:
        >>> check_type("flag", 1, bool, "a bool")
        Traceback (most recent call last):
        ...
        TypeError: flag must be a bool, got int: 1
    """
    if not isinstance(value, expected):
        msg = f"{name} must be {spelled}, got {type(value).__name__}: {_shown(value)}"
        raise TypeError(msg)


def check_tensor(name: str, value: Any) -> torch.Tensor:
    """Return ``value`` if it is a strided (dense) tensor; raise a TypeError/ValueError otherwise.

    Sparse tensors have another layout; nested tensors report the strided layout but
    have no single shape or stride, so they are refused too.

    Example:
        >>> check_tensor("x", torch.eye(2).to_sparse())
        Traceback (most recent call last):
        ...
        ValueError: x must be a strided (dense) tensor, got layout torch.sparse_coo
    """
    if not isinstance(value, torch.Tensor):
        msg = f"{name} must be a torch.Tensor, got {type(value).__name__}: {_shown(value)}"
        raise TypeError(msg)
    if value.is_nested:
        msg = (
            f"{name} must be a strided (dense) tensor, got a nested tensor of layout "
            f"{value.layout} (its components differ in shape: pass them one by one, e.g. "
            "from tensor.unbind())"
        )
        raise ValueError(msg)
    if value.layout != torch.strided:
        msg = f"{name} must be a strided (dense) tensor, got layout {value.layout}"
        raise ValueError(msg)
    return value


def check_values(name: str, tensor: torch.Tensor) -> torch.Tensor:
    """Return ``tensor`` if it holds values; a ``meta`` tensor (a shape only) is refused.

    Example:
        >>> check_values("x", torch.empty(2, device="meta"))
        Traceback (most recent call last):
        ...
        ValueError: x must hold values, got a tensor on the meta device (shape (2,), no data)
    """
    if tensor.device.type == "meta":
        msg = (
            f"{name} must hold values, got a tensor on the meta device "
            f"(shape {tuple(tensor.shape)}, no data)"
        )
        raise ValueError(msg)
    return tensor


def check_int(
    name: str, value: Any, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    """Return ``value`` if it is an int (not a bool) in ``[minimum, maximum]``.

    Example:
        >>> check_int("n", True)
        Traceback (most recent call last):
        ...
        TypeError: n must be an int, got bool: True
    """
    if isinstance(value, bool) or not isinstance(value, int):
        msg = f"{name} must be an int, got {type(value).__name__}: {_shown(value)}"
        raise TypeError(msg)
    if minimum is not None and value < minimum:
        msg = f"{name} must be >= {minimum}, got {_shown(value)}"
        raise ValueError(msg)
    if maximum is not None and value > maximum:
        msg = f"{name} must be <= {maximum}, got {_shown(value)}"
        raise ValueError(msg)
    return int(value)  # an int subclass (IntEnum, numpy's?) becomes a plain int


def check_ints(
    name: str,
    value: Any,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    spelled: str = "a sequence of ints",
) -> tuple[int, ...]:
    """Return ``value`` as a tuple if it is a sequence (not a str) of ints in range.

    Each element is checked as ``name[i]``.

    Example:
        >>> check_ints("size", (2, -1), minimum=0)
        Traceback (most recent call last):
        ...
        ValueError: size[1] must be >= 0, got -1
    """
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        msg = f"{name} must be {spelled}, got {type(value).__name__}: {_shown(value)}"
        raise TypeError(msg)
    return tuple(
        check_int(f"{name}[{i}]", v, minimum=minimum, maximum=maximum) for i, v in enumerate(value)
    )


def check_number(
    name: str, value: Any, *, minimum: float | None = None, maximum: float | None = None
) -> float:
    """Return ``value`` as a float if it is a finite int or float (not a bool) in range.

    Example:
        >>> check_number("lr", float("nan"))
        Traceback (most recent call last):
        ...
        ValueError: lr must be a finite number, got nan
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        msg = f"{name} must be a number, got {type(value).__name__}: {_shown(value)}"
        raise TypeError(msg)
    if abs(value) > _FLOAT_MAX or not math.isfinite(value):  # huge ints do not fit a float
        msg = f"{name} must be a finite number, got {_shown(value)}"
        raise ValueError(msg)
    if minimum is not None and value < minimum:
        msg = f"{name} must be >= {minimum}, got {value!r}"
        raise ValueError(msg)
    if maximum is not None and value > maximum:
        msg = f"{name} must be <= {maximum}, got {value!r}"
        raise ValueError(msg)
    return float(value)


def check_seconds(name: str, value: Any) -> float:
    """Return ``value`` as a float if it is a positive, finite number of seconds.

    At most :data:`MAX_SECONDS` (a year): NaN, infinity and longer waits are refused.

    Example:
        >>> check_seconds("timeout", float("inf"))
        Traceback (most recent call last):
        ...
        ValueError: timeout must be a finite number of seconds (at most 31536000), got inf
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        msg = f"{name} must be a number of seconds, got {type(value).__name__}: {_shown(value)}"
        raise TypeError(msg)
    if not value > 0:  # also refuses NaN
        msg = f"{name} must be > 0 seconds, got {_shown(value)}"
        raise ValueError(msg)
    if not value <= MAX_SECONDS:  # also refuses infinity
        msg = f"{name} must be a finite number of seconds (at most {MAX_SECONDS:.0f}), got {_shown(value)}"
        raise ValueError(msg)
    return float(value)


def check_path(name: str, value: Any) -> Path:
    """Return ``value`` as a Path if it is a str or os.PathLike (not bytes); raise TypeError.

    Example:
        >>> check_path("path", "a\\0b")
        Traceback (most recent call last):
        ...
        ValueError: path must not contain a NUL byte (at index 1), got 'a\\x00b'
    """
    if not isinstance(value, str | os.PathLike):
        msg = f"{name} must be a str or os.PathLike, got {type(value).__name__}: {_shown(value)}"
        raise TypeError(msg)
    path = Path(value)
    text = str(path)
    if "\0" in text:
        at = text.index("\0")  # shown around the first NUL, which a long path's start hides
        near = ("..." if at > 40 else "") + text[max(0, at - 40) : at + 20]
        near += "..." if at + 20 < len(text) else ""
        msg = f"{name} must not contain a NUL byte (at index {at}), got {near!r}"
        raise ValueError(msg)
    return path


def check_callable(
    name: str, value: Any, *, no_arguments: bool = False, arguments: int | None = None
) -> Callable[..., Any]:
    """Return ``value`` if it is callable; else TypeError.

    ``no_arguments``: it must be callable without arguments; ``arguments``: with that
    many positional ones. A callable without a signature (some builtins) is accepted:
    calling it will tell.

    Example:
        >>> check_callable("fn", 3)
        Traceback (most recent call last):
        ...
        TypeError: fn must be callable, got int: 3
        >>> check_callable("fn", lambda x: x, no_arguments=True)
        Traceback (most recent call last):
        ...
        TypeError: fn must be callable without arguments (wrap them in a lambda), got a callable with signature (x)
        >>> check_callable("op", lambda: 0, arguments=1)
        Traceback (most recent call last):
        ...
        TypeError: op must be callable with 1 positional argument, got a callable with signature ()
    """
    if not callable(value):
        msg = f"{name} must be callable, got {type(value).__name__}: {_shown(value)}"
        raise TypeError(msg)
    count = 0 if no_arguments else arguments
    if count is not None:
        try:
            signature = inspect.signature(value)
        except (TypeError, ValueError):  # some builtins have none: call them and see
            return value  # type: ignore[no-any-return]
        try:
            signature.bind(*range(count))
        except TypeError:
            wanted = (
                "without arguments (wrap them in a lambda)"
                if count == 0
                else f"with {count} positional argument{'' if count == 1 else 's'}"
            )
            msg = f"{name} must be callable {wanted}, got a callable with signature {signature}"
            raise TypeError(msg) from None
    return value  # type: ignore[no-any-return]


def check_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    """Return ``value`` if it is one of the strings ``choices``.

    Example:
        >>> check_choice("reduction", "avg", ("mean", "sum"))
        Traceback (most recent call last):
        ...
        ValueError: reduction must be 'mean' or 'sum', got 'avg'
    """
    spelled = " or ".join(
        [", ".join(repr(c) for c in choices[:-1]), repr(choices[-1])]
        if len(choices) > 1
        else [repr(choices[0])]
    )
    if not isinstance(value, str):
        msg = f"{name} must be {spelled}, got {type(value).__name__}: {_shown(value)}"
        raise TypeError(msg)
    if value not in choices:
        msg = f"{name} must be {spelled}, got {value!r}"
        raise ValueError(msg)
    return value


def check_strings(name: str, value: Any, *, required: bool) -> list[str]:
    """Return a str or a sequence of str as a list; ``required``: some non-blank text.

    Example:
        >>> check_strings("sources", "  ", required=True)
        Traceback (most recent call last):
        ...
        ValueError: sources must hold some source code, got '  '
    """
    strings = [value] if isinstance(value, str) else value
    if (
        not isinstance(strings, Sequence)
        or isinstance(strings, bytes)
        or not all(isinstance(s, str) for s in strings)
    ):
        msg = f"{name} must be a str or a sequence of str, got {type(value).__name__}"
        raise TypeError(msg)
    if required and not "".join(strings).strip():
        msg = f"{name} must hold some source code, got {_shown(value)}"
        raise ValueError(msg)
    return list(strings)


def check_identifier(name: str, value: Any, *, why: str) -> str:
    """Return ``value`` if it is a str that is a Python identifier; ``why`` says what for.

    Example:
        >>> check_identifier("name", "no-dash", why="it names the module")
        Traceback (most recent call last):
        ...
        ValueError: name must be a Python identifier (it names the module), got 'no-dash'
    """
    if not isinstance(value, str):
        msg = f"{name} must be a str, got {type(value).__name__}: {_shown(value)}"
        raise TypeError(msg)
    if not value.isidentifier():
        msg = f"{name} must be a Python identifier ({why}), got {value!r}"
        raise ValueError(msg)
    return value


def check_module_name(name: str, value: Any) -> str:
    """Return ``value`` if it names a new module: an identifier no other module has.

    CPython enters an extension module into ``sys.modules`` under its name when it
    loads it: a name already there (``random``, ``os``, ``torch``) would replace that
    module for the rest of the process, and an importable one (``numpy`` before its
    first import) would be shadowed. Both are refused. A name whose module in
    ``sys.modules`` is an extension built in a torch build directory (one with a
    ``build.ninja``: an earlier ``build_extension`` or ``load_inline``) is accepted:
    building it again is how an extension is rebuilt or reloaded.

    Example:
        >>> check_module_name("name", "os")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: name must not be the name of an imported module, got 'os': loading the extension would replace <module 'os' ...> in sys.modules
    """
    checked = check_identifier(name, value, why="it names the module")
    existing = sys.modules.get(checked)
    if existing is not None:
        where = getattr(existing, "__file__", None)
        if where and (Path(where).parent / "build.ninja").is_file():
            return checked
        msg = (
            f"{name} must not be the name of an imported module, got {checked!r}: loading "
            f"the extension would replace {existing!r} in sys.modules"
        )
        raise ValueError(msg)
    try:
        spec = importlib.util.find_spec(checked)
    except (ImportError, ValueError):
        spec = None
    if spec is not None:
        msg = (
            f"{name} must not be the name of an importable module, got {checked!r}: the "
            f"extension would shadow {checked} from {spec.origin}"
        )
        raise ValueError(msg)
    return checked


def check_device(
    name: str, value: Any, *, types: Sequence[str] | None = None, optional: bool = False
) -> torch.device | None:
    """Parse a device given as a str or :class:`torch.device`: the helpers' one parser.

    Every helper that takes a device checks it here, so one rule holds for all of them:
    a string torch parses, and for the CPU no index but 0. torch parses ``"cpu:1"``, but
    its devices require a CPU index of 0 or none (``c10::Device::validate``, checked
    only in debug builds): a tensor made on ``"cpu:1"`` lands on ``"cpu"``, and
    ``torch.load(map_location="cpu:1")`` fails. So ``"cpu:1"`` is refused everywhere,
    and ``"cpu:0"`` is returned as ``device("cpu")``, the one spelling ``torch.load``
    takes.

    Args:
        name: the argument's name, for the messages.
        value: ``"cpu"``, ``"cuda:1"``, ``torch.device("mps")``... (or None if ``optional``).
        types: the device types accepted (``("cpu", "cuda")``); all when None.
        optional: accept None (and return it).

    Returns:
        The :class:`torch.device` (the CPU as ``device(type='cpu')``), or None.

    Raises:
        TypeError: ``value`` is neither a str nor a device (nor None when ``optional``).
        ValueError: torch does not parse the string, it names a CPU with an index other
            than 0 (``"cpu:1"``), or its type is not in ``types``.

    Example:
        >>> check_device("device", "cuda:1", types=("cpu", "cuda"))
        device(type='cuda', index=1)
        >>> check_device("device", "meta", types=("cpu", "cuda"))
        Traceback (most recent call last):
        ...
        ValueError: device must be a cpu or cuda device, got 'meta'
        >>> check_device("device", "cpu:1")
        Traceback (most recent call last):
        ...
        ValueError: device must be 'cpu' or 'cpu:0' for the CPU, got 'cpu:1': torch has one CPU device (a tensor made on 'cpu:1' lands on 'cpu', and torch.load refuses 'cpu:1')
    """
    if value is None and optional:
        return None
    if isinstance(value, torch.device):
        device = value
    elif isinstance(value, str):
        try:
            device = torch.device(value)
        except RuntimeError as error:
            msg = f"{name}={value!r} is not a device string: expected e.g. {DEVICE_EXAMPLES} ({error})"
            raise ValueError(msg) from None
    else:
        spelled = "a str, a torch.device or None" if optional else "a str or a torch.device"
        msg = f"{name} must be {spelled}, got {type(value).__name__}: {_shown(value)}"
        raise TypeError(msg)
    if device.type == "cpu" and device.index not in (None, 0):
        msg = (
            f"{name} must be 'cpu' or 'cpu:0' for the CPU, got {_shown(value)}: torch has "
            "one CPU device (a tensor made on 'cpu:1' lands on 'cpu', and torch.load "
            "refuses 'cpu:1')"
        )
        raise ValueError(msg)
    if device.type == "cpu":
        device = torch.device("cpu")  # "cpu:0" is the same device, which torch.load refuses
    if types is not None and device.type not in types:
        kinds = " or ".join(types)
        msg = f"{name} must be a {kinds} device, got {str(device)!r}"
        raise ValueError(msg)
    return device


def check_axes(name: str, value: Any) -> Axes | None:
    """Return ``value`` if it is None or matplotlib :class:`~matplotlib.axes.Axes`.

    Example:
        >>> check_axes("ax", "ax")
        Traceback (most recent call last):
        ...
        TypeError: ax must be a matplotlib Axes (e.g. from plt.subplots()) or None, got str: 'ax'
    """
    if value is None:
        return None
    from matplotlib.axes import Axes

    if not isinstance(value, Axes):
        msg = (
            f"{name} must be a matplotlib Axes (e.g. from plt.subplots()) or None, "
            f"got {type(value).__name__}: {_shown(value)}"
        )
        raise TypeError(msg)
    return value


def check_mapping(name: str, value: Any, keys: type, values: type, spelled: str) -> dict[Any, Any]:
    """Return ``value`` as a dict if it is a mapping of ``keys`` to ``values`` instances.

    ``spelled`` says what was expected: ``"a mapping of str to tensors"``.

    Example:
        >>> check_mapping("names", {"x": 1}, str, torch.Tensor, "a mapping of str to tensors")
        Traceback (most recent call last):
        ...
        TypeError: names must be a mapping of str to tensors, got an item str: int ('x')
    """
    if not isinstance(value, Mapping):
        msg = f"{name} must be {spelled}, got {type(value).__name__}"
        raise TypeError(msg)
    for key, item in value.items():
        if not isinstance(key, keys) or not isinstance(item, values):
            msg = (
                f"{name} must be {spelled}, got an item "
                f"{type(key).__name__}: {type(item).__name__} ({_shown(key)})"
            )
            raise TypeError(msg)
    return dict(value)


def check_count(name: str, count: int, *, limit: int, what: str, work: str) -> None:
    """Refuse work that grows with ``count`` beyond ``limit``: a ValueError naming ``name``.

    ``what`` says what is counted (``"elements"``), ``work`` what the limit protects
    (``"element_offsets returns one int64 per element"``).

    Example:
        >>> check_count("tensor", 2**40, limit=2**24, what="elements", work="one offset each")
        Traceback (most recent call last):
        ...
        ValueError: tensor has 1099511627776 elements; at most 16777216 allowed (one offset each)
    """
    if count > limit:
        msg = f"{name} has {count} {what}; at most {limit} allowed ({work})"
        raise ValueError(msg)


def check_pattern(name: str, value: Any) -> re.Pattern[str]:
    """Return ``value`` compiled if it is a str holding a valid regular expression.

    Example:
        >>> check_pattern("match", "(unclosed")
        Traceback (most recent call last):
        ...
        ValueError: match must be a valid regular expression, got '(unclosed' (missing ), unterminated subpattern at position 0)
    """
    check_type(name, value, str, "a str (a regular expression)")
    try:
        return re.compile(value)
    except re.error as error:
        msg = f"{name} must be a valid regular expression, got {_shown(value)} ({error})"
        raise ValueError(msg) from None


def check_exception_types(name: str, value: Any) -> tuple[type[BaseException], ...]:
    """Return ``value`` as a tuple if it is an exception class or a tuple of them.

    Example:
        >>> check_exception_types("expected", "ValueError")
        Traceback (most recent call last):
        ...
        TypeError: expected must be an exception class or a tuple of them, got str: 'ValueError'
    """
    classes = value if isinstance(value, tuple) else (value,)
    if not classes or not all(
        isinstance(c, type) and issubclass(c, BaseException) for c in classes
    ):
        msg = (
            f"{name} must be an exception class or a tuple of them, "
            f"got {type(value).__name__}: {_shown(value)}"
        )
        raise TypeError(msg)
    return classes


def check_iterable(name: str, value: Any, *, spelled: str, limit: int, work: str) -> list[Any]:
    """Return the items of the iterable ``value`` as a list: at most ``limit`` of them.

    At most ``limit + 1`` items are taken, so an endless iterator (``itertools.count()``)
    is refused instead of filling memory or running forever. A str, bytes or a tensor is
    refused as the iterable (iterating them gives characters or rows, not items).

    ``spelled`` says what was expected (``"an iterable of tensors"``), ``work`` what the
    limit protects.

    Example:
        >>> check_iterable("draws", itertools.count(), spelled="an iterable of Draws",
        ...                limit=3, work="one bar each")
        Traceback (most recent call last):
        ...
        ValueError: draws must hold at most 3 items (one bar each), got more
    """
    if isinstance(value, str | bytes | torch.Tensor) or not isinstance(value, Iterable):
        msg = f"{name} must be {spelled}, got {type(value).__name__}: {_shown(value)}"
        raise TypeError(msg)
    items = list(itertools.islice(value, limit + 1))
    if len(items) > limit:
        msg = f"{name} must hold at most {limit} items ({work}), got more"
        raise ValueError(msg)
    return items


def check_process_group(worker: str) -> None:
    """Refuse to run the worker ``worker`` outside a joined process group.

    The workers of :mod:`pytorch_memo.distributed` and :mod:`pytorch_memo.parallel`
    run inside :func:`~pytorch_memo.distributed.run_workers`, which joins the group
    first; called directly, torch would fail later with a message that does not say
    which call was wrong, or (``SyncBatchNorm``) return results that mean nothing.

    Example:
        >>> check_process_group("rank_info")
        Traceback (most recent call last):
        ...
        RuntimeError: rank_info is a worker for run_workers: it needs a joined process group, and torch.distributed.is_initialized() is False here
    """
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        msg = (
            f"{worker} is a worker for run_workers: it needs a joined process group, and "
            "torch.distributed.is_initialized() is False here"
        )
        raise RuntimeError(msg)
