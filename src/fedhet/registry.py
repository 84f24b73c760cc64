"""A name → factory table with errors that list the valid names."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class UnknownNameError(KeyError):
    """Raised for a name that is not registered; the message lists the valid ones."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the message readable
        return str(self.args[0])


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

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            valid = ", ".join(sorted(self._items))
            raise UnknownNameError(f"unknown {self.kind} '{name}'; valid: {valid}") from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))
