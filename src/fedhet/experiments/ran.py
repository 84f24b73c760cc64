"""What an axis value sets, as it ran at a scale: a scale may shrink a swept setting (a fifth of
FedLGD's distillation rounds |τ|, at least 1), so the paper's values 2 and 5 can both run as 1.
A figure that ticks the paper's values says what ran instead of implying a sweep that did not
happen."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any


def _leaves(patch: Any, resolved: Any, path: str = "") -> Iterator[tuple[str, Any, Any]]:
    """(path, value in the patch, value in the resolved run) of every leaf of `patch`; a
    plug-in list is matched by the plug-ins' names; a leaf the run lacks yields None."""
    if isinstance(patch, Mapping):
        for key, value in patch.items():
            inner = resolved.get(key) if isinstance(resolved, Mapping) else None
            yield from _leaves(value, inner, f"{path}.{key}" if path else str(key))
    elif isinstance(patch, list) and all(isinstance(p, Mapping) and "name" in p for p in patch):
        runs = {p.get("name"): p for p in resolved or [] if isinstance(p, Mapping)}
        for plugin in patch:
            inner = runs.get(plugin["name"])
            yield from _leaves({k: v for k, v in plugin.items() if k != "name"}, inner,
                               f"{path}[{plugin['name']}]")
    else:
        yield path, patch, resolved


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _printed(value: float) -> str:
    return f"{value:g}"


def scaled_setting(patch: Mapping[str, Any], resolved: Mapping[str, Any]) -> str | None:
    """The numbers of an axis value's settings `patch` that the scale changed, as they ran in
    `resolved` (the run at the scale), printed; None when every number ran as the paper set
    it (or the patch sets none)."""
    changed = [got for _, paper, got in _leaves(patch, resolved)
               if _number(paper) and _number(got) and float(paper) != float(got)]
    return ", ".join(_printed(got) for got in changed) if changed else None


def label_ran_as(label: str, patch: Mapping[str, Any], resolved: Mapping[str, Any]) -> str | None:
    """A printed axis value (a table's label, "IPC=10") as it ran at this scale ("IPC=2"): the
    numbers of `patch` the scale changed, as they ran in `resolved`, put in place of those the
    label states; None where the label states none of them or not all (a setting "α=0.1, E=1,
    K=10" whose rounds the scale cut still ran at α=0.1: the table's note says the rest)."""
    changed = [(paper, got) for _, paper, got in _leaves(patch, resolved)
               if _number(paper) and _number(got) and float(paper) != float(got)]

    def stated(number: Any) -> re.Pattern:
        return re.compile(rf"(?<![\d.]){re.escape(_printed(float(number)))}(?![\d.])")

    if not changed or not all(stated(paper).search(label) for paper, _ in changed):
        return None
    out = label
    for paper, got in dict.fromkeys(changed):
        out = stated(paper).sub(_printed(float(got)), out)
    return out
