"""Reading paper configs: YAML, nested-dict helpers, protocols with their `extends` chains."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedhet.config import ConfigError
from fedhet.names import PAPERS


class ExperimentError(ConfigError):
    """A paper, scale or workflow config is wrong; the message names the file and the key."""

    def __init__(self, file: str | Path, key: str, message: str) -> None:
        self.file = str(file)
        self.key = key
        super().__init__(f"{file}: '{key}': {message}")


def plain_copy(obj: Any) -> Any:
    """Copy of a YAML/JSON-like structure (dicts, lists, scalars); much faster than deepcopy."""
    if isinstance(obj, dict):
        return {k: plain_copy(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [plain_copy(v) for v in obj]
    return obj


def deep_merge(base: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """`base` updated by `patch`; mappings merge recursively, everything else is replaced."""
    out = plain_copy(dict(base))
    for key, value in patch.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = plain_copy(value)
    return out


def merge_plugins(base: list[Mapping[str, Any]], patch: list[Mapping[str, Any]]) -> list[dict]:
    """Plug-in lists compose: a plug-in named in both keeps its place and merges its params
    (the patch's win); a new one is appended."""
    out = [plain_copy(dict(p)) for p in base]
    for plugin in patch:
        same = [p for p in out if p.get("name") == plugin.get("name")]
        if same:
            same[0]["params"] = deep_merge(same[0].get("params") or {}, plugin.get("params") or {})
        else:
            out.append(plain_copy(dict(plugin)))
    return out


def merge_settings(base: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """Run-settings patches: `deep_merge`, except that `plugins` lists merge by name, so a cell
    can be "FedAvg + FedBR + Mixup" from two axes."""
    plugins = patch.get("plugins")
    if isinstance(plugins, list) and isinstance(base.get("plugins"), list):
        patch = {**patch, "plugins": merge_plugins(base["plugins"], plugins)}
    return deep_merge(base, patch)


def read_yaml(path: str | Path) -> dict[str, Any]:
    """A YAML mapping, with the C parser when PyYAML has it (config files are read on every
    DAG build)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(path, encoding="utf-8") as fh:
        data = yaml.load(fh, Loader=loader)  # noqa: S506 (a safe loader)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return data


def set_path(target: dict[str, Any], dotted: str, value: Any) -> None:
    """Set `a.b.c` in a nested dict, creating the mappings on the way."""
    keys = dotted.split(".")
    node = target
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = plain_copy(value)


def get_path(source: Mapping[str, Any], dotted: str, default: Any = None) -> Any:
    node: Any = source
    for key in dotted.split("."):
        if not isinstance(node, Mapping) or key not in node:
            return default
        node = node[key]
    return node


def short_hash(obj: Any, length: int = 6) -> str:
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:length]


class Loader:
    """Paper configs of one workflow root, each read once."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.cache: dict[str, dict[str, Any]] = {}

    def paper_file(self, paper: str) -> Path:
        return self.root / "config" / "papers" / f"{paper}.yaml"

    def paper(self, paper: str, referenced_from: str | None = None) -> dict[str, Any]:
        if paper not in self.cache:
            path = self.paper_file(paper)
            if paper not in PAPERS or not path.exists():
                where = referenced_from or "config/config.yaml"
                raise ExperimentError(
                    where, "papers", f"unknown paper '{paper}'; valid: {', '.join(PAPERS)}"
                )
            data = read_yaml(path)
            if data.get("paper") != paper:
                raise ExperimentError(
                    path, "paper", f"must be '{paper}', got {data.get('paper')!r}"
                )
            self.cache[paper] = data
        return self.cache[paper]

    def protocol(self, paper: str, name: str, file: str, stack: tuple = ()) -> dict[str, Any]:
        """A protocol with its `extends` chain merged. `name` may be `<paper>/<protocol>`."""
        if "/" in name:
            paper, name = name.split("/", 1)
        cfg = self.paper(paper, referenced_from=file)
        protocols = cfg.get("protocols") or {}
        if name not in protocols:
            raise ExperimentError(
                self.paper_file(paper),
                f"protocols.{name}",
                f"unknown protocol; valid: {', '.join(sorted(protocols))}",
            )
        if (paper, name) in stack:
            raise ExperimentError(self.paper_file(paper), f"protocols.{name}.extends", "cycle")
        proto = protocols[name] or {}
        base: dict[str, Any] = {"settings": {}, "values": {}, "defaults": {}, "lookups": []}
        if proto.get("extends"):
            base = self.protocol(
                paper, proto["extends"], str(self.paper_file(paper)), stack + ((paper, name),)
            )
        merged = {
            "settings": merge_settings(base["settings"], proto.get("settings") or {}),
            "values": plain_copy(base["values"]),
            "defaults": {**base["defaults"], **(proto.get("defaults") or {})},
            # look-up tables are not inherited: a protocol that extends another one states its
            # own per-cell values (a silently inherited learning rate would be a wrong cell)
            "lookups": list(proto.get("lookups") or []),
            "file": str(self.paper_file(paper)),
            "name": f"{paper}/{name}",
        }
        for axis, values in (proto.get("values") or {}).items():
            merged["values"].setdefault(axis, {}).update(values or {})
        return merged
