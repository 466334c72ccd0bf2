"""Settings as frozen standard-library dataclasses, for the processes that must start light.

The gateway (a sidecar on every engine's request path) and the exporter (on GPU hosts) do not
import pydantic: it alone costs about 0.1 s of start-up. Their settings are dataclasses whose
bounds sit in each field's metadata (``max_queue: int = bounded(64, ge=0)``), where pydantic reads
them as well, so ``oximeter config check`` and the configuration reference, which embed the
dataclass in the pydantic model of the whole file, enforce and show the same bounds.
``check_fields`` enforces types and bounds without pydantic (call it from ``__post_init__``, which
both paths run), and ``from_mapping`` builds a dataclass from its YAML section. Every problem is a
``SettingError`` naming its key.
"""

from __future__ import annotations

import dataclasses
import operator
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")

# The metadata keys are pydantic's own Field arguments, which it reads from a dataclass field.
_BOUNDS: tuple[tuple[str, Callable[[Any, Any], bool], str], ...] = (
    ("ge", operator.ge, "≥"), ("gt", operator.gt, ">"), ("le", operator.le, "≤"), ("lt", operator.lt, "<"),
)


class SettingError(ValueError):
    """One invalid setting: ``key`` and what is wrong with it."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


def bounded(default: Any, *, ge: float | None = None, gt: float | None = None,
            le: float | None = None, lt: float | None = None) -> Any:
    """A field with ``default`` and numeric bounds (checked by ``check_fields`` and by pydantic)."""
    limits = {"ge": ge, "gt": gt, "le": le, "lt": lt}
    return dataclasses.field(default=default, metadata={k: v for k, v in limits.items() if v is not None})


def check_type(key: str, value: object, expected: type | tuple[type, ...]) -> None:
    """Raise SettingError unless ``value`` is of ``expected`` (a bool is not a number here)."""
    allowed = expected if isinstance(expected, tuple) else (expected,)
    # bool is an int in Python; a YAML "port: yes" must still be rejected.
    if (isinstance(value, bool) and bool not in allowed) or not isinstance(value, allowed):
        names = " or ".join(t.__name__ for t in allowed)
        raise SettingError(key, f"expected {names}, got {type(value).__name__}")


def as_list(key: str, value: object) -> list[Any]:
    """A YAML sequence as a list; SettingError for anything else (a bare string included)."""
    if not isinstance(value, list | tuple):
        raise SettingError(key, f"expected a list, got {type(value).__name__}")
    return list(value)


# Per field: its name, the type(s) its values must have (a float field takes a YAML 5 for 5.0; a
# tuple may hold a nested settings dataclass, which checks itself), whether it is a tuple of them,
# and its metadata (the bounds).
_Field = tuple[str, tuple[type, ...], bool, Mapping[str, Any]]
_FIELDS: dict[type, tuple[_Field, ...]] = {}
_SCALARS: dict[Any, tuple[type, ...]] = {str: (str,), int: (int,), bool: (bool,), float: (int, float)}


def _fields(cls: type) -> tuple[_Field, ...]:
    if cls not in _FIELDS:
        hints = typing.get_type_hints(cls)
        out: list[_Field] = []
        for field in dataclasses.fields(cls):
            hint = hints[field.name]
            many = typing.get_origin(hint) is tuple
            item = typing.get_args(hint)[0] if many else hint
            if item in _SCALARS:
                types = _SCALARS[item]
            elif many and dataclasses.is_dataclass(item) and isinstance(item, type):
                types = (item,)
            else:
                raise TypeError(f"{cls.__name__}.{field.name}: only str, int, float, bool, and tuples of "
                                "them or of a settings dataclass")
            out.append((field.name, types, many, field.metadata))
        _FIELDS[cls] = tuple(out)
    return _FIELDS[cls]


def check_fields(obj: Any) -> None:
    """Check every field of dataclass ``obj`` against its annotated type and its bounds."""
    for name, scalar, many, metadata in _fields(type(obj)):
        value = getattr(obj, name)
        if many:
            if not isinstance(value, tuple):
                raise SettingError(name, f"expected a tuple, got {type(value).__name__}")
            for item in value:
                check_type(f"{name}[]", item, scalar)
            continue
        check_type(name, value, scalar)
        for key, holds, sign in _BOUNDS:
            if key in metadata and not holds(value, metadata[key]):
                raise SettingError(name, f"must be {sign} {metadata[key]}, got {value}")


def from_mapping(cls: type[T], data: Mapping[str, Any] | None) -> T:
    """Build dataclass ``cls`` from its YAML section (None: every default); SettingError names the key."""
    if data is None:
        return cls()
    if not isinstance(data, Mapping):
        raise SettingError("<section>", f"expected a mapping, got {type(data).__name__}")
    many = {name: is_tuple for name, _scalar, is_tuple, _metadata in _fields(cls)}
    unknown = sorted(set(data) - set(many))
    if unknown:
        raise SettingError(unknown[0], "unknown key")
    return cls(**{key: tuple(as_list(key, value)) if many[key] else value for key, value in data.items()})
