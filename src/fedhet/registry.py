"""A name → factory table with errors that list the valid names."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class UnknownNameError(KeyError):
    """Raised for a name that is not registered; the message lists the valid ones."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the message readable
        return str(self.args[0])


class _Lazy:
    """A registered item not imported yet: `module:attribute`."""

    def __init__(self, target: str) -> None:
        self.target = target

    def load(self) -> Any:
        module, _, attribute = self.target.partition(":")
        return getattr(importlib.import_module(module), attribute)


class Registry(Generic[T]):
    """Registered factories of one kind (datasets, models, algorithms, ...)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def decorator(item: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} '{name}' registered twice")
            self._items[name] = item
            return item

        return decorator

    def add(self, name: str, item: T) -> None:
        self.register(name)(item)

    def add_lazy(self, name: str, target: str) -> None:
        """Register `module:attribute`, imported on the first `get` (keeps names listable
        without importing heavy modules such as torch)."""
        self.register(name)(_Lazy(target))  # type: ignore[arg-type]

    def get(self, name: str) -> T:
        try:
            item = self._items[name]
        except KeyError:
            valid = ", ".join(sorted(self._items))
            raise UnknownNameError(f"unknown {self.kind} '{name}'; valid: {valid}") from None
        if isinstance(item, _Lazy):
            item = self._items[name] = item.load()
        return item

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))
