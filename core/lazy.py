"""``lazy``: a value computed on first read and memoised on the instance, for ``dict=True`` msgspec structs.

Used where a value derived from an immutable struct is read far more often than the struct is made (a view's
decoded status, a data identity's key): the first read stores it in the instance's ``__dict__``, where later
reads find it without calling anything (a non-data descriptor is shadowed by the instance dictionary). The
memo is never serialised (msgspec encodes fields only) and never compared (equality and hashing are by fields).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

_T = TypeVar("_T")


class lazy(Generic[_T]):
    """``functools.cached_property`` without its lock (Python 3.11 takes an RLock on every first read, which
    costs more than the decode it guards): the value is computed on first read and stored in the instance's
    ``__dict__``, where later reads find it without calling anything."""

    def __init__(self, func: Callable[[Any], _T]) -> None:
        self.func = func
        self.name = func.__name__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> lazy[_T]: ...
    @overload
    def __get__(self, instance: object, owner: type | None = None) -> _T: ...
    def __get__(self, instance: object | None, owner: type | None = None) -> lazy[_T] | _T:
        if instance is None:
            return self
        value = instance.__dict__[self.name] = self.func(instance)
        return value
