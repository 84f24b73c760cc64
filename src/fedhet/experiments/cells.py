"""What a paper config expands into: cells, items (tables and figures) and the experiment."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from fedhet.papers import paper_name


def chance_accuracy(dataset: Mapping[str, Any]) -> float:
    """Test accuracy (%) of guessing one of a run's dataset's classes at random."""
    from fedhet.data import describe  # torch-free; only tables need it

    return 100.0 / describe(dataset["name"], dataset.get("options"))["num_classes"]


class Payload(dict):
    """What a table, figure or scorecard script reads, passed to it as a Snakemake param.
    Printed (the report's job parameters) it is one line saying where it comes from; its repr
    stays the whole content, which Snakemake's params rerun trigger compares."""

    def __init__(self, content: dict[str, Any], printed: str) -> None:
        super().__init__(content)
        self.printed = printed

    def __str__(self) -> str:
        return self.printed


@dataclass
class Cell:
    """One position of a table or figure: its labels, the runs behind it (one per seed)."""

    paper: str
    item: str  # table or figure id, e.g. "t1", "fig3a"
    grid: int
    labels: dict[str, str]  # axis → vocabulary key
    display: dict[str, str]  # axis → printed label
    row: str
    column: str
    metrics: list[str]
    run_ids: list[str] = field(default_factory=list)  # one per seed, empty when pending
    pending: str | None = None  # why no run exists yet
    quoted: str | None = None  # a number the paper quotes from elsewhere: its source; no run
    reference: dict[str, Any] = field(default_factory=dict)  # metric → transcribed value
    settings: dict[str, Any] = field(default_factory=dict)  # resolved run (first seed)
    values: dict[str, Any] = field(default_factory=dict)  # settings tables: metric → setting
    # post-hoc cells: one calibration id ("<run_id>/<key>") per seed, parallel to run_ids
    calibrations: list[str] = field(default_factory=list)
    # axis → the numbers its value's settings ran with, where the scale changed them
    # (`fedhet.experiments.ran`): a figure ticks what ran, not only the paper's value
    ran: dict[str, str] = field(default_factory=dict)
    # likewise with what the value's look-ups set (FedLGD's IPC: the images per class), for
    # every cell; the scorecard names what ran (`Item.claim_payload`), no table or figure
    runs_as: dict[str, str] = field(default_factory=dict)
    # the cell's settings as the paper gives them (before any scale, with its first seed): two
    # cells that resolve to one run this way are one configuration in the paper too (a table's
    # rows may repeat its default), whatever a scale does to them (`Item.payload`)
    paper_patch: dict[str, Any] = field(default_factory=dict, repr=False)

    def key(self) -> dict[str, Any]:
        out = {
            "calibrations": self.calibrations,
            "grid": self.grid,
            "labels": self.labels,
            "display": self.display,
            "row": self.row,
            "column": self.column,
            "metrics": self.metrics,
            "run_ids": self.run_ids,
            "pending": self.pending,
            "reference": self.reference,
            "values": self.values,
        }
        if self.quoted is not None:  # absent otherwise: today's payloads stay as they were
            out["quoted"] = self.quoted
        if self.ran:  # likewise
            out["ran"] = self.ran
        return out


@dataclass
class Item:
    """A table or figure of one paper, expanded."""

    paper: str
    id: str
    kind: str
    is_figure: bool
    spec: dict[str, Any]
    cells: list[Cell]
    # the paper's cells this scale does not run (its `restrict`): labels, display, row, column,
    # metrics and reference each, for the scorecard's check of a claim's whole scope
    left_out: list[dict[str, Any]] = field(default_factory=list)
    # per cell that runs: its settings as the paper gives them (unresolved, with its seed) and
    # as they run at this scale (resolved), and the scale; what `scale_changes` compares
    paper_settings: list[tuple[dict[str, Any], dict[str, Any]]] = field(
        default_factory=list, repr=False)
    scale: dict[str, Any] = field(default_factory=dict, repr=False)

    @cached_property
    def scale_change_parts(self) -> list[str]:
        """What the item's runs changed from the paper at this scale, in words (its note), a
        sentence per part (`scale_notes.item_note_parts`); worked out when first asked for, as
        it resolves every cell's settings once more. None for an analytic table: it is
        computed for the paper's settings at every scale, whatever its protocol's runs do."""
        from fedhet.experiments import scale_notes
        from fedhet.experiments.kinds import ANALYTIC_KINDS

        if not self.is_figure and self.kind in ANALYTIC_KINDS:
            return []
        return scale_notes.item_note_parts(scale_notes.run_changes(paper, ours, self.scale)
                                           for paper, ours in self.paper_settings)

    @property
    def scale_changes(self) -> str:
        """`scale_change_parts` as one paragraph."""
        return " ".join(self.scale_change_parts)

    @cached_property
    def paper_runs(self) -> dict[int, str]:
        """id(cell) → the run id of the cell's settings as the paper gives them (resolved
        without their runtime, as `scale_changes` does), for each table cell that runs and
        resolves alone."""
        from fedhet.config import ConfigError, resolve_run, run_id
        from fedhet.experiments.loading import plain_copy

        out = {}
        for cell in self.cells:
            if not cell.run_ids or not cell.paper_patch:
                continue
            given = {k: v for k, v in plain_copy(cell.paper_patch).items() if k != "runtime"}
            try:
                out[id(cell)] = run_id(resolve_run(given))
            except ConfigError:
                continue
        return out

    @property
    def target(self) -> str:
        return f"{self.paper}_{self.id}"

    def run_ids(self) -> list[str]:
        """Every cell's runs, each once, in cell order."""
        return list(dict.fromkeys(rid for cell in self.cells for rid in cell.run_ids))

    def calibration_ids(self) -> list[str]:
        """Every cell's calibrations, each once, in cell order."""
        return list(dict.fromkeys(cid for cell in self.cells for cid in cell.calibrations))

    def payload(self) -> Payload:
        """Everything a table/figure script needs (passed as Snakemake params)."""
        cells = [c.key() for c in self.cells]
        if not self.is_figure:  # a table marks the cells whose runs sit near chance
            for cell, key in zip(self.cells, cells):
                if cell.run_ids:
                    key["chance_acc"] = chance_accuracy(cell.settings["dataset"])
                    # and which of its rows are one configuration in the paper
                    # (`fedhet.tables.identical_rows`)
                    paper_run = self.paper_runs.get(id(cell))
                    if paper_run:
                        key["paper_run"] = paper_run
        content = {
            "paper": self.paper,
            "paper_name": paper_name(self.paper),
            "id": self.id,
            "kind": self.kind,
            "spec": self.spec,
            "cells": cells,
        }
        return Payload(content, f"config/papers/{self.paper}.yaml: {self.id}, "
                                f"{len(self.cells)} cells")

    def claim_payload(self) -> Payload:
        """What the scorecard reads of this table: its payload, the cells this scale leaves out
        (`left_out`) and, per cell that runs, what it ran on where the scale changed what its
        labels say: `stand_in`, the offline data that stood in for the paper's dataset
        ({"name": what ran, "for": the paper's}), and `runs_as`, the axis values whose
        printed numbers ran otherwise, as they ran ({"ipc": "IPC=2"} for IPC=10)."""
        from fedhet import printed

        payload = self.payload()
        cells = []
        for cell, key in zip(self.cells, payload["cells"], strict=True):
            key = dict(key)
            data = cell.settings.get("dataset") or {}
            real = (data.get("options") or {}).get("stands_in_for")
            if real and not cell.quoted:
                key["stand_in"] = {"name": printed.stand_in(data["name"], data.get("options")),
                                   "for": printed.dataset(real)}
            if cell.runs_as and not cell.quoted:
                key["runs_as"] = dict(cell.runs_as)
            cells.append(key)
        return Payload({**payload, "cells": cells, "left_out": self.left_out}, str(payload))


@dataclass
class Experiment:
    """All cells and runs of the selected papers at one scale, and every job they need."""

    scale: str
    scale_config: dict[str, Any]
    seeds: list[int]
    papers: dict[str, dict[str, Any]]  # paper → loaded config
    items: dict[str, Item]  # "<paper>_<id>" → item
    runs: dict[str, dict[str, Any]]  # run id → resolved run
    datasets: dict[str, dict[str, Any]]  # dataset key → {name, options}
    run_dataset: dict[str, str]  # run id → dataset key
    # run id → keys of the further datasets its training job reads (its methods' declarations)
    run_extra_datasets: dict[str, list[str]] = field(default_factory=dict)
    partitions: dict[str, dict[str, Any]] = field(default_factory=dict)  # key → partition job
    run_partition: dict[str, str] = field(default_factory=dict)  # run id → partition key
    # artefact id ("<family>/<key>") → {family, key, settings, sources: [dataset keys]}
    artefacts: dict[str, dict[str, Any]] = field(default_factory=dict)
    run_artefacts: dict[str, list[str]] = field(default_factory=dict)  # run id → artefact ids
    # calibration id ("<run_id>/<key>") → {run_id, key, settings} (post-hoc steps, CCVR)
    calibrations: dict[str, dict[str, Any]] = field(default_factory=dict)
    # challenger name → its board (`fedhet.experiments.challengers.Board`): the comparable
    # tables with it added; empty without challengers
    leaderboard: dict[str, Any] = field(default_factory=dict)
    # leaderboards on disk left out of this run, entry name → why (their method's code changed,
    # another run's papers...); empty unless the results folder was given
    leaderboard_left_out: dict[str, str] = field(default_factory=dict)

    def items_of(self, paper: str) -> list[Item]:
        return [item for item in self.items.values() if item.paper == paper]

    def claims(self) -> list[dict[str, Any]]:
        out = []
        for paper, cfg in self.papers.items():
            for claim in cfg.get("claims", []) or []:
                out.append({"paper": paper, **claim})
        return out
