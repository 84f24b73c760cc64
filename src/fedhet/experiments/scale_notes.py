"""What a table's or figure's own runs changed from the paper at a scale, in words: the note under
it, generated from each cell's resolved settings at the paper's scale and at this one (dataset,
model, local work, rounds and their bound, training and partition settings, plug-in
parameters), so that each item says what its own runs changed and nothing else."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from fedhet import catalog, printed
from fedhet.config import ConfigError, resolve_run
from fedhet.experiments.loading import get_path, plain_copy

Run = Mapping[str, Any]


@dataclass(frozen=True)
class Change:
    """One setting that differs: `paper → ours` (arrow) or `ours instead of paper`; `who`: the
    plug-in it belongs to, if any ("VHL")."""

    paper: str
    ours: str
    arrow: bool = False
    who: str = ""
    aspect: int = 0  # position of what it changes in ASPECTS: the order a note says it


def _dataset(paper: Run, ours: Run, scale: Mapping[str, Any]) -> list[Change]:
    p, o = paper["dataset"], ours["dataset"]
    if p["name"] == o["name"] and p.get("options") == o.get("options"):
        return []
    opts = o.get("options") or {}
    details = [f"{opts['size']} px"] if opts.get("size") else []
    if opts.get("train_per_class"):
        details.append(f"{printed.number(opts['train_per_class'])} training images a class")
    text = printed.dataset(o["name"], opts) + (f" ({', '.join(details)})" if details else "")
    return [Change(printed.dataset(p["name"], p.get("options")), text, arrow=True)]


def _model(paper: Run, ours: Run, scale: Mapping[str, Any]) -> list[Change]:
    p, o = paper["model"], ours["model"]
    if (p["name"], p["width"]) == (o["name"], o["width"]):
        return []
    return [Change(printed.model(p["name"], p["width"]), printed.model(o["name"], o["width"]),
                   arrow=True)]


def _local_work(run: Run) -> tuple[str, str]:
    """A run's local work per round: its count, printed, and its unit ("local steps", "local
    epoch(s)")."""
    t = run["training"]
    if t.get("local_steps"):
        return printed.number(t["local_steps"]), "local steps"
    epochs = t["local_epochs"]
    return printed.number(epochs), f"local epoch{'s' if epochs != 1 else ''}"


def _local(paper: Run, ours: Run, scale: Mapping[str, Any]) -> list[Change]:
    (p, p_unit), (o, o_unit) = _local_work(paper), _local_work(ours)
    if (p, p_unit) == (o, o_unit):
        return []
    # "5 local epochs instead of 10": the paper's count alone where both count in steps or both
    # in epochs ("1 local epoch" and "5 local epochs" are both epochs)
    same_unit = (p_unit == "local steps") == (o_unit == "local steps")
    return [Change(p if same_unit else f"{p} {p_unit}", f"{o} {o_unit}")]


def _rounds(paper: Run, ours: Run, scale: Mapping[str, Any]) -> list[Change]:
    p, o = paper["training"]["rounds"], ours["training"]["rounds"]
    if p == o:
        return []
    bounds = scale.get("rounds") or {}
    wanted = p * float(bounds.get("factor", 1.0))
    why = ""
    if bounds.get("max") and o == int(bounds["max"]) and wanted > o:
        why = " (this scale's cap)"
    elif o == int(bounds.get("min", 1)) and wanted < o:
        why = " (this scale's minimum)"
    return [Change(printed.number(p), f"{printed.number(o)} rounds{why}")]


# training and partition settings a scale may change → how a reader writes one's value
SETTINGS = {
    ("training", "batch_size"): "batch size {}",
    ("training", "lr"): "learning rate {}",
    ("training", "lr_decay"): "learning-rate decay {} a round",
    ("training", "momentum"): "momentum {}",
    ("training", "weight_decay"): "weight decay {}",
    ("training", "clients_per_round"): "{} clients a round",
    ("partition", "num_clients"): "{} clients",
    ("partition", "min_size"): "clients of at least {} images",
}


def _settings(paper: Run, ours: Run, scale: Mapping[str, Any]) -> list[Change]:
    out = []
    for (section, key), words in SETTINGS.items():
        p, o = paper[section].get(key), ours[section].get(key)
        if p != o:
            before = "the partition's own minimum" if p is None else printed.number(p)
            out.append(Change(before, words.format(printed.number(o))))
    return out


_TAG = re.compile(r"^(code|paper|assumed)( \([^)]*\))?: ")


def param_words(meaning: str) -> str:
    """A parameter's meaning as a short name: its declaration's text without the source tag
    ("code: ") and the details after a ";" or " (": "virtual images per class"."""
    text = _TAG.sub("", meaning)
    return re.split(r"; | \(|, ", text, maxsplit=1)[0].strip()


def _plugins(paper: Run, ours: Run, scale: Mapping[str, Any]) -> list[Change]:
    before = {p["name"]: p.get("params") or {} for p in paper.get("plugins") or []}
    out = []
    for plugin in ours.get("plugins") or []:
        name, params = plugin["name"], plugin.get("params") or {}
        if name not in before or name not in catalog.names("plugin"):
            continue
        declared = catalog.method(name).params
        for key, value in params.items():
            old = before[name].get(key)
            if old == value or isinstance(value, Mapping | list) or key not in declared:
                continue
            words = printed.param(name, key) or param_words(declared[key].meaning)
            who = printed.method(name)
            if isinstance(value, str):  # a name (a dataset): what stands in for what
                out.append(Change(f"{words}: {printed.number(old)}", printed.number(value),
                                  arrow=True, who=who))
            else:
                out.append(Change(printed.number(old), f"{words} {printed.number(value)}",
                                  who=who))
        for dparam in catalog.method(name).dataset_params:  # a dataset nested in a parameter
            old, new = get_path(before[name], dparam.name), get_path(params, dparam.name)
            if old != new and isinstance(new, str):
                words = printed.param(name, dparam.name) or "data"
                out.append(Change(f"{words}: {printed.number(old)}", printed.number(new),
                                  arrow=True, who=printed.method(name)))
    return out


# what a note compares, in the order it says it
ASPECTS: tuple[Callable[[Run, Run, Mapping[str, Any]], list[Change]], ...] = (
    _dataset, _model, _local, _rounds, _settings, _plugins,
)


def cell_changes(paper: Run, ours: Run, scale: Mapping[str, Any]) -> list[Change]:
    """What one cell's run at `scale` changes from its run at the paper's settings (both
    resolved by fedhet.config)."""
    return [replace(change, aspect=i) for i, aspect in enumerate(ASPECTS)
            for change in aspect(paper, ours, scale)]


def run_changes(paper: Run, ours: Run, scale: Mapping[str, Any]) -> list[Change]:
    """What the scale changed in one cell's run: `paper`, its settings as the paper gives them
    (resolved here, without their `runtime`: how a run executes is no change from the paper,
    and a scale completes some of it, e.g. the last round of `save_client_models: [-1]`),
    against `ours` (resolved at this scale). Nothing where the paper's settings do not resolve
    alone (a cell the scale must complete)."""
    given = {key: value for key, value in plain_copy(paper).items() if key != "runtime"}
    try:
        resolved = resolve_run(given)
    except ConfigError:
        return []
    return cell_changes(resolved, ours, scale)


def item_note_parts(changes: Iterable[Iterable[Change]]) -> list[str]:
    """The note of a table or figure from its cells' changes, a sentence per part: first what
    every run changed (data, model, local work, rounds, training settings), then each method's
    parameters under the method's name, said once ("VHL: virtual images per class 50 instead
    of 200; ..."). Each change once, in the order of ASPECTS and then first met; those with the
    same value at this scale said together ("batch size 32 instead of 64 or 128"). A table or
    figure run as in the paper says so."""
    merged: dict[tuple[int, str, bool], tuple[list[str], list[str]]] = {}
    for cell in changes:
        for change in cell:
            key = (change.aspect, change.ours, change.arrow)
            papers, whos = merged.setdefault(key, ([], []))
            for seen, new in ((papers, change.paper), (whos, change.who)):
                if new and new not in seen:
                    seen.append(new)
    if not merged:
        return ["As in the paper: datasets, models, local training and rounds."]
    groups: dict[tuple[str, ...], list[str]] = {}
    for (_, ours, arrow), (papers, whos) in sorted(merged.items(), key=lambda kv: kv[0][0]):
        text = (f"{', '.join(papers)} → {ours}" if arrow
                else f"{ours} instead of {' or '.join(papers)}")
        groups.setdefault(tuple(whos), []).append(text)
    out = []
    general = groups.pop((), [])
    if general:
        out.append("Changed from the paper: " + "; ".join(general) + ".")
    for whos, texts in groups.items():
        who = " and ".join(whos)
        lead = f"{who[0].upper()}{who[1:]}" if out else f"Changed from the paper, {who}"
        out.append(f"{lead}: " + "; ".join(texts) + ".")
    return out


def item_note(changes: Iterable[Iterable[Change]]) -> str:
    """`item_note_parts` as one paragraph."""
    return " ".join(item_note_parts(changes))
