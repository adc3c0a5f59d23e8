"""A tiny immutable record base for the runtime's data.

The login-node side uses frozen dataclasses; the shim cannot afford them: `import dataclasses`
pulls in `inspect` (and with it `re`, `ast`, `dis`, ...), about 10 ms in a clean interpreter, most of
the whole shim budget. Fields are the class annotations, in order; every field is keyword-only.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs ~3 ms to import; only type checkers need it
    from typing import Any, TypeVar

    _F = TypeVar("_F", bound="Frozen")

_MISSING = object()


class Frozen:
    """Immutable record: fields = annotations; equality, hash and repr by field values."""

    _fields: tuple[str, ...] = ()

    def __init_subclass__(cls) -> None:
        # the class's own annotations (not its bases'); inspect.get_annotations would cost the shim ~10 ms of imports
        own = tuple(name for name in cls.__dict__.get("__annotations__", {}) if not name.startswith("_"))  # noqa: RUF063
        cls._fields = tuple(dict.fromkeys(cls._fields + own))

    def __init__(self, **values: Any) -> None:
        for name in self._fields:
            value = values.pop(name, _MISSING)
            if value is _MISSING:
                value = type(self).__dict__.get(name, _MISSING)  # `field: T = default` in the class body
            if value is _MISSING:
                raise TypeError(f"{type(self).__name__}: missing field {name!r}")
            object.__setattr__(self, name, value)
        if values:
            raise TypeError(f"{type(self).__name__}: unknown fields {sorted(values)}")

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen; cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen; cannot delete {name!r}")

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self._fields)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash((type(self).__name__,) + self._values())

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
        return f"{type(self).__name__}({inner})"

    def replace(self: _F, **changes: Any) -> _F:
        """A copy with some fields changed (like dataclasses.replace)."""
        values = {name: getattr(self, name) for name in self._fields}
        values.update(changes)
        return type(self)(**values)

    def as_dict(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in self._fields}
