"""A cache of values by kind and key, dropped a kind at a time: what a replay keeps between runs."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any


class Memo:
    """Values computed once per key, grouped by kind; a kind is dropped as a whole when the work it
    serves is done. A view shares some kinds with the memo it came from and starts the others empty."""

    def __init__(self, kinds: dict[str, dict[Hashable, Any]] | None = None):
        self.kinds: dict[str, dict[Hashable, Any]] = kinds if kinds is not None else {}

    def _of(self, kind: str) -> dict[Hashable, Any]:
        return self.kinds.setdefault(kind, {})

    def get(self, kind: str, key: Hashable, make: Callable[[], Any]) -> Any:
        d = self._of(kind)
        if key not in d:
            d[key] = make()
        return d[key]

    def peek(self, kind: str, key: Hashable) -> Any:
        return self._of(kind).get(key)

    def put(self, kind: str, key: Hashable, value: Any) -> None:
        self._of(kind)[key] = value

    def pop(self, kind: str, key: Hashable) -> Any:
        return self._of(kind).pop(key, None)

    def drop(self, *kinds: str) -> None:
        for k in kinds:
            self._of(k).clear()

    def share(self, *kinds: str) -> Memo:
        return Memo({k: self._of(k) for k in kinds})

    def size(self, *kinds: str) -> int:
        return sum(len(self._of(k)) for k in kinds)
