"""FedLGD's figure kinds (sweep, distilled_grid, distilled_tsne, pixel_hist, mia_roc,
domain_tsne), the data `fedhet figure-data` computes for them and the loss-threshold membership
inference of `fedhet.analysis.mia`."""

from __future__ import annotations

import copy
import json
import os
import re
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.image import AxesImage  # noqa: E402

from fedhet.analysis import figure_data  # noqa: E402
from fedhet.analysis.mia import balanced_subsets, loss_scores, roc_summary, run_membership  # noqa: E402
from fedhet.config import resolve_run  # noqa: E402
from fedhet.figures.labels import domain_label  # noqa: E402
from fedhet.distill.core import load_or_make_distilled  # noqa: E402
from fedhet.distill.spec import settings_for_run  # noqa: E402
from fedhet.atomic import write_json  # noqa: E402
from fedhet.experiments.cells import Cell, Item  # noqa: E402
from fedhet.figures.kinds import FIGURE_KINDS  # noqa: E402
from fedhet.saved import open_run  # noqa: E402
from fedhet.train import train  # noqa: E402
from figure_checks import assert_legible  # noqa: E402
from test_figures import load_script  # noqa: E402

NEW_KINDS = ("sweep", "distilled_grid", "distilled_tsne", "pixel_hist", "mia_roc", "domain_tsne")
PENDING = "method not implemented yet: x"


def sm_of(payload: dict, tmp_path: Path, inputs: list[str] | None = None,
          results: Path | None = None, note: str = "demo stand-ins") -> SimpleNamespace:
    """What Snakemake hands a figure script; `note`: the scale's note."""
    return SimpleNamespace(
        params=SimpleNamespace(payload=payload, note=note, device="cpu",
                               results=str(results or tmp_path / "results")),
        input=inputs or [], output=[str(tmp_path / "fig.png")], threads=1,
        wildcards=SimpleNamespace(scale="demo"))


def footnote(fig) -> str:
    """The figure's notes (its caption in the report) and the texts drawn on it."""
    from fedhet.figures.save import notes_of

    texts = [*notes_of(fig), *(t.get_text() for t in fig.texts)]
    return " ".join(texts).replace("\n", " ")


def test_every_new_kind_is_registered_with_a_script_and_caption():
    root = Path(__file__).resolve().parents[1]
    for name in NEW_KINDS:
        kind = FIGURE_KINDS.get(name)
        assert (root / "workflow" / "scripts" / "figures" / f"{kind.script}.py").exists()
        assert len(kind.caption) > 80
    assert not FIGURE_KINDS.get("mia_roc").local and FIGURE_KINDS.get("sweep").local


def test_the_inputs_are_the_first_runs_files():
    def cell(run_ids, column):
        return Cell(paper="fedlgd", item="f", grid=0, labels={}, display={"method": column},
                    row="", column=column, metrics=[], run_ids=run_ids)

    item = Item("fedlgd", "f", "mia_roc", True, {}, [cell([], "A"), cell(["r1", "r2"], "B"),
                                                     cell(["r3"], "C")])
    exp = SimpleNamespace(run_artefacts={})
    grid = FIGURE_KINDS.get("distilled_grid").inputs(item, exp, "results/demo")
    assert grid == ["results/demo/runs/r1/final.json"]  # the virtual data lies beside it
    mia = FIGURE_KINDS.get("mia_roc").inputs(item, exp, "results/demo")
    assert [p for p in mia if p.endswith("model.pt")] == ["results/demo/runs/r1/model.pt",
                                                          "results/demo/runs/r3/model.pt"]
    assert FIGURE_KINDS.get("pixel_hist").inputs(item, exp, "b") == ["b/runs/r1/resolved.yaml"]


# -- sweep -----------------------------------------------------------------------------------

def sweep_payload(metric: str) -> dict:
    """λ ∈ {10, 0.5, 1} (out of order) × reg {SupCon, MMD}; MMD at λ 10 pending."""
    cells, n = [], 0
    for reg in ("SupCon", "MMD"):
        for lam in ("10", "0.5", "1"):
            pending = PENDING if (reg, lam) == ("MMD", "10") else None
            runs = [] if pending else [f"r{n}", f"r{n + 1}"] if reg == "SupCon" else [f"r{n}"]
            n += len(runs)
            cells.append({"display": {"lambda": f"λ = {lam}", "reg": reg},
                          "labels": {"lambda": f"l{lam}", "reg": reg.lower()},
                          "run_ids": runs, "pending": pending})
    return {"spec": {"title": "Fig. 3a style", "x": "lambda", "hue": "reg", "metric": metric,
                     "note": "a note of the figure"}, "cells": cells}


def write_finals(tmp_path: Path, payload: dict) -> tuple[list[str], dict[str, dict]]:
    rng = np.random.default_rng(0)
    inputs, finals = [], {}
    for cell in payload["cells"]:
        for rid in cell["run_ids"]:
            domains = {d: float(rng.uniform(0.2, 0.9)) for d in ("mnist", "svhn", "usps")}
            finals[rid] = {"last_acc": float(rng.uniform(0.3, 0.9)),
                           "top5_mean_acc": float(rng.uniform(0.3, 0.9)),
                           "last_domain_acc": domains, "status": "completed"}
            run = tmp_path / "runs" / rid
            run.mkdir(parents=True)
            (run / "final.json").write_text(json.dumps(finals[rid]))
            inputs.append(str(run / "final.json"))
    return inputs, finals


@pytest.mark.parametrize("metric", ["mean_domain_acc", "last_acc", "top5_acc"])
def test_sweep_draws_the_seed_means_in_numeric_order(tmp_path, metric):
    payload = sweep_payload(metric)
    inputs, finals = write_finals(tmp_path, payload)

    def value(rid):
        f = finals[rid]
        if metric == "mean_domain_acc":
            return 100 * np.mean(list(f["last_domain_acc"].values()))
        return 100 * f["last_acc" if metric == "last_acc" else "top5_mean_acc"]

    plt.close("all")
    load_script("sweep").main(sm_of(payload, tmp_path, inputs))
    fig = plt.gcf()
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["λ = 0.5", "λ = 1", "λ = 10"]
    assert all(float(t).is_integer() for t in ax.get_xticks())
    lines = {c.get_label(): c.lines[0] for c in ax.containers}  # errorbar: line, caps, bars
    assert set(lines) == {"SupCon", "MMD"}
    expected = {}
    for cell in payload["cells"]:
        if cell["run_ids"]:
            expected.setdefault(cell["display"]["reg"], {})[cell["labels"]["lambda"]] = \
                np.mean([value(r) for r in cell["run_ids"]])
    supcon = lines["SupCon"]
    assert list(supcon.get_xdata()) == [0, 1, 2]
    np.testing.assert_allclose(supcon.get_ydata(), [expected["SupCon"][k]
                                                    for k in ("l0.5", "l1", "l10")])
    np.testing.assert_allclose(lines["MMD"].get_xdata(), [0, 1])  # λ 10 pending
    np.testing.assert_allclose(lines["MMD"].get_ydata(), [expected["MMD"]["l0.5"],
                                                          expected["MMD"]["l1"]])
    # ± std error bars for the two-seed line only
    bars = [c for c in ax.containers if c.has_yerr]
    assert len(bars) == 1 and bars[0].get_label() == "SupCon"
    # the regulariser's names (SupCon, MMD) speak for themselves: no axis key over them
    assert ax.get_legend() is not None and ax.get_legend().get_title().get_text() == ""
    note = footnote(fig)
    assert "demo stand-ins" in note and "a note of the figure" in note
    assert f"MMD · λ = 10 ({PENDING})" in note and "± std" in note
    assert_legible(fig)
    assert (tmp_path / "fig.png").read_bytes()[:4] == b"\x89PNG"


def test_sweep_on_a_linear_numeric_axis_ticks_the_values(tmp_path):
    payload = sweep_payload("last_acc")
    payload["spec"]["options"] = {"x_scale": "linear"}
    payload["spec"].pop("hue")
    inputs, _ = write_finals(tmp_path, payload)
    plt.close("all")
    load_script("sweep").main(sm_of(payload, tmp_path, inputs))
    ax = plt.gcf().axes[0]
    assert sorted(ax.get_xticks()) == [0.5, 1.0, 10.0]
    assert_legible(plt.gcf())


# -- the figure-data command as the scripts see it ---------------------------------------------

class FigureData:
    """A `fedhet` first on PATH that answers `figure-data` with the JSON of `answer` (made by
    the real functions) and records the arguments of every call."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        self.data = tmp_path / "answer.json"
        self.log = tmp_path / "calls.jsonl"
        shim = bin_dir / "fedhet"
        shim.write_text(f"#!{sys.executable}\n" + textwrap.dedent(f"""
            import json, shutil, sys
            with open({str(self.log)!r}, "a") as fh:
                fh.write(json.dumps(sys.argv[1:]) + "\\n")
            shutil.copyfile({str(self.data)!r}, sys.argv[sys.argv.index("--out") + 1])
            """))
        shim.chmod(0o755)
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    def answer(self, data: dict) -> dict:
        """Serve `data` (through JSON, as the script will read it)."""
        write_json(self.data, data)
        return json.loads(self.data.read_text())

    def calls(self) -> list[dict]:
        """The arguments of every call: kind, runs, artefact, options, device."""
        out = []
        for line in self.log.read_text().splitlines():
            argv = json.loads(line)
            assert argv[:1] == ["figure-data"]
            runs = argv[argv.index("--runs") + 1:argv.index("--options")] \
                if "--runs" in argv else None
            artefact = argv[argv.index("--artefact") + 1] if "--artefact" in argv else None
            out.append({"kind": argv[1], "runs": runs, "artefact": artefact,
                        "options": json.loads(argv[argv.index("--options") + 1]),
                        "device": argv[argv.index("--device") + 1]})
        return out


@pytest.fixture
def served(tmp_path, monkeypatch) -> FigureData:
    return FigureData(tmp_path, monkeypatch)


# -- distilled_grid --------------------------------------------------------------------------

def test_distilled_grid_has_a_panel_per_client_and_one_global(tmp_path, served):
    clients, classes, ipc = 3, 4, 5
    gen = torch.Generator().manual_seed(0)
    virtual = {
        "x": [torch.randn(classes * ipc, 3, 8, 8, generator=gen) for _ in range(clients)],
        "y": [torch.arange(classes).repeat_interleave(ipc) for _ in range(clients)],
        "global_x": torch.randn(classes * 2, 3, 8, 8, generator=gen),
        "global_y": torch.arange(classes).repeat_interleave(2),
    }
    run = tmp_path / "runs" / "r1"
    path = run / "plugins" / "fedlgd" / "fedlgd_virtual.pt"
    path.parent.mkdir(parents=True)
    torch.save(virtual, path)
    data = served.answer(figure_data.virtual_images(run, per_class=3))
    assert [p["client"] for p in data["panels"]] == [0, 1, 2, None]
    first = np.asarray(data["panels"][0]["images"])
    assert first.shape == (classes * 3, 8, 8, 3)
    assert data["panels"][0]["labels"][:4] == [0, 0, 0, 1]
    x = virtual["x"][0][0].permute(1, 2, 0).numpy()
    np.testing.assert_allclose(first[0], 255 * (x - x.min()) / (x.max() - x.min()), atol=0.5)
    assert data["panels"][-1]["count"] == classes * 2
    payload = {"spec": {"title": "D.2 style", "per_class": 3},
               "cells": [{"display": {"dataset": "DIGITS"}, "run_ids": ["r1"], "pending": None}]}
    final = run / "final.json"
    final.write_text("{}")
    plt.close("all")
    load_script("distilled_grid").main(sm_of(payload, tmp_path, [str(final)]))
    assert served.calls() == [{"kind": "virtual-images", "runs": [str(run)], "artefact": None,
                               "options": {"per_class": 3, "clients": None}, "device": "cpu"}]
    fig = plt.gcf()
    panels = [ax for ax in fig.axes if any(isinstance(a, AxesImage) for a in ax.get_children())]
    assert len(panels) == clients + 1
    titles = [ax.get_title() for ax in panels]
    assert titles[0] == "client 0 (local, 20 images)" and titles[-1] == "server (global, 8 images)"
    image = next(a for a in panels[0].get_children() if isinstance(a, AxesImage)).get_array()
    assert image.shape == (classes * 9, 3 * 9, 3)  # 4 rows of classes, 3 images each, 1 px pads
    assert float(image.min()) == 0.0 and float(image.max()) == 1.0  # per-image min-max
    np.testing.assert_allclose(image[:8, :8], first[0] / 255)
    assert [t.get_text() for t in panels[0].get_yticklabels()] == ["0", "1", "2", "3"]
    assert "minimum and maximum" in footnote(fig)
    assert_legible(fig)


def test_virtual_images_choose_clients_and_read_soft_labels(tmp_path):
    virtual = {"x": [torch.randn(4, 1, 3, 3) for _ in range(3)],
               "y": [torch.eye(2)[[1, 0, 1, 1]] for _ in range(3)],  # soft labels
               "global_x": torch.randn(2, 1, 3, 3), "global_y": torch.tensor([0, 1])}
    path = tmp_path / "virtual.pt"
    torch.save(virtual, path)
    data = figure_data.virtual_images(path, per_class=2, clients=[2])
    assert [p["client"] for p in data["panels"]] == [2, None] and data["num_clients"] == 3
    assert data["panels"][0]["labels"] == [1, 0, 1] and data["num_classes"] == 2
    assert (data["channels"], data["height"], data["width"]) == (1, 3, 3)
    with pytest.raises(ValueError, match="clients \\[5\\] do not exist"):
        figure_data.virtual_images(path, clients=[5])


# -- ROC downsampling ------------------------------------------------------------------------

def test_downsampled_roc_keeps_the_ends_and_the_one_percent_point():
    rng = np.random.default_rng(0)
    full = roc_summary(rng.normal(0.3, 1, 5000), rng.normal(0, 1, 5000))
    fpr, tpr = full["fpr"], full["tpr"]
    keep = figure_data.downsample_roc(fpr, tpr, 1 / 5000)
    assert len(fpr) > 5000 and len(keep) <= figure_data.ROC_POINTS
    assert keep[0] == 0 and keep[-1] == len(fpr) - 1 and np.all(np.diff(keep) > 0)
    low = fpr[keep] <= 0.01
    assert tpr[keep][low].max() == full["tpr_at_1pct_fpr"]
    assert fpr[keep][~low].min() == fpr[fpr > 0.01].min()
    # on log axes, the kept polyline stays within a few % of the full curve
    grid = np.geomspace(1e-3, 1, 200)
    np.testing.assert_allclose(np.interp(grid, fpr[keep], tpr[keep]), np.interp(grid, fpr, tpr),
                               rtol=0.05, atol=2e-3)
    short = np.linspace(0, 1, 50)
    np.testing.assert_array_equal(figure_data.downsample_roc(short, short, 0.02), np.arange(50))


# -- model-based kinds on a tiny real run ----------------------------------------------------

RUN = {
    "seed": 1,
    "dataset": {"name": "digits_domains", "options": {"train_per_class": 12, "test_per_class": 6}},
    "model": {"name": "cnn4", "width": 0.25},
    "partition": {"scheme": "domain", "num_clients": 5},
    "training": {"rounds": 3, "clients_per_round": 5, "batch_size": 16, "local_steps": 10,
                 "lr": 0.05},
    "runtime": {"device": "cpu"},
}


@pytest.fixture(scope="module")
def results(tmp_path_factory, one_thread) -> Path:
    """results/ with two tiny FedAvg runs on the digits_domains stand-in (5 domain clients):
    `trained` (3 rounds) and `short` (1 round)."""
    base = tmp_path_factory.mktemp("fedlgd_figs")
    for rid, rounds in (("trained", 3), ("short", 1)):
        run = copy.deepcopy(RUN)
        run["dataset"]["root"] = str(base / "datasets")
        run["partition"]["root"] = str(base / "partitions")
        run["training"]["rounds"] = rounds
        train(run, base / "results" / "runs" / rid, log=lambda msg: None)
    return base / "results"


def test_pixel_hist_draws_one_line_per_client(results, tmp_path, served):
    run = results / "runs" / "trained"
    data = served.answer(figure_data.pixel_hist(run, bins=32))
    assert data["num_clients"] == 5 and data["channels"] == 3 and len(data["edges"]) == 33
    train_data, indices = figure_data.run_data(run)
    x = train_data.x_train[torch.as_tensor(indices[0])][:, 0].reshape(-1).numpy()
    shares = np.asarray(data["clients"][0]["shares"])
    np.testing.assert_allclose(shares.sum(-1), 1.0)
    np.testing.assert_allclose(shares[0], np.histogram(x, bins=data["edges"])[0] / x.size)
    assert data["clients"][0]["domain"] == "mnist"
    assert data["clients"][0]["images"] == len(indices[0])
    payload = {"spec": {"title": "D.3 style", "options": {"bins": 32}},
               "cells": [{"display": {"dataset": "DIGITS"}, "run_ids": ["trained"],
                          "pending": None}]}
    plt.close("all")
    load_script("pixel_hist").main(sm_of(payload, tmp_path, [str(run / "resolved.yaml")]))
    assert served.calls() == [{"kind": "pixel-hist", "runs": [str(run)], "artefact": None,
                               "options": {"clients": None, "bins": 32}, "device": "cpu"}]
    fig = plt.gcf()
    axes = [ax for ax in fig.axes if ax.get_lines()]
    assert len(axes) == 3  # digits_domains is RGB: a panel per channel
    labels = [line.get_label() for line in axes[0].get_lines()]
    assert len(labels) == 5 and labels[0] == f"client 0: MNIST ({len(indices[0])} images)"
    np.testing.assert_allclose(axes[0].get_lines()[0].get_xdata(), (np.arange(32) + 0.5) * 8)
    np.testing.assert_allclose(axes[0].get_lines()[0].get_ydata(), 100 * shares[0])
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    assert len(legends) == 1  # beside the panels, or in the free slot after the last
    assert_legible(fig)


def test_pixel_hist_shows_the_chosen_clients(results):
    data = figure_data.pixel_hist(results / "runs" / "trained", clients=2, bins=8)
    assert [c["client"] for c in data["clients"]] == [0, 1] and data["num_clients"] == 5
    data = figure_data.pixel_hist(results / "runs" / "trained", clients=[3], bins=8)
    assert [c["client"] for c in data["clients"]] == [3]
    with pytest.raises(ValueError, match="do not exist"):
        figure_data.pixel_hist(results / "runs" / "trained", clients=[7])


def test_the_figure_data_command_writes_the_json(results, tmp_path, capsys):
    from fedhet.analysis.cli import FIGURE_DATA_KINDS
    from fedhet.cli import main

    assert set(FIGURE_DATA_KINDS) == set(figure_data.KINDS)
    out = tmp_path / "out" / "hist.json"
    run = str(results / "runs" / "trained")
    assert main(["figure-data", "pixel-hist", "--runs", run, "--options",
                 '{"bins": 16, "clients": 2}', "--out", str(out)]) == 0
    written = json.loads(out.read_text())
    assert written == json.loads(json.dumps(figure_data.pixel_hist(Path(run), 2, 16)))
    assert not list(out.parent.glob(".*.tmp"))  # written atomically
    # bad options or sources: one line, no traceback
    assert main(["figure-data", "pixel-hist", "--runs", run, "--options", '{"bin": 16}',
                 "--out", str(out)]) == 2
    assert "unknown options ['bin']" in capsys.readouterr().err
    assert main(["figure-data", "distilled-tsne", "--runs", run, "--out", str(out)]) == 2
    assert "reads an artefact" in capsys.readouterr().err
    assert main(["figure-data", "pixel-hist", "--runs", run, run, "--out", str(out)]) == 2
    assert "reads one run" in capsys.readouterr().err


def test_roc_summary_by_hand():
    rng = np.random.default_rng(0)
    same = roc_summary(rng.normal(size=4000), rng.normal(size=4000))
    assert abs(same["auc"] - 0.5) < 0.03
    apart = roc_summary(np.arange(10, 20), np.arange(10))
    assert apart["auc"] == 1.0 and apart["tpr_at_1pct_fpr"] == 1.0
    # 200 non-members at 0..199; members: 3 above every non-member, 2 between the 2nd and 3rd
    # highest non-members (FPR 2/200 = 1 % lets them in), the rest below all
    nonmembers = np.arange(200.0)
    members = np.array([500, 501, 502, 197.5, 197.6] + [-1.0] * 95)
    s = roc_summary(members, nonmembers)
    assert s["tpr_at_1pct_fpr"] == pytest.approx(5 / 100)
    assert roc_summary(members[:3].tolist() + [-1.0] * 97, nonmembers)["tpr_at_1pct_fpr"] == \
        pytest.approx(3 / 100)
    assert s["members"] == 100 and s["nonmembers"] == 200


def test_balanced_subsets_are_seeded_and_equal():
    a = balanced_subsets(50, 20, seed=3)
    assert len(a[0]) == len(a[1]) == 20 and len(set(a[0])) == 20
    b = balanced_subsets(50, 20, seed=3)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert len(balanced_subsets(50, 20, seed=3, max_per_side=7)[0]) == 7


def test_loss_scores_are_minus_the_cross_entropy():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 3))
    x, y = torch.randn(7, 3, 2, 2), torch.randint(0, 3, (7,))
    expected = -torch.nn.functional.cross_entropy(model(x), y, reduction="none")
    np.testing.assert_allclose(loss_scores(model, x, y, batch_size=3),
                               expected.detach().numpy(), rtol=1e-5)


def test_mia_roc_shows_the_analysis_numbers(results, tmp_path, served):
    runs = [results / "runs" / rid for rid in ("trained", "short")]
    data = served.answer(figure_data.membership(runs, samples=150, seed=0, device="cpu"))
    for result, run in zip(data["runs"], runs, strict=True):
        expected = run_membership(open_run(run, device="cpu"), 150, 0)
        assert result["run"] == run.name
        assert result["members"] == result["nonmembers"] == 150
        assert result["auc"] == expected["auc"]
        assert result["tpr_at_1pct_fpr"] == expected["tpr_at_1pct_fpr"]
        np.testing.assert_array_equal(result["fpr"], expected["fpr"])  # ≤ 400 points: all
        np.testing.assert_array_equal(result["tpr"], expected["tpr"])
    payload = {"id": "fig17", "spec": {"title": "Fig. 17 style", "options": {"samples": 150}},
               "cells": [{"display": {"method": "FedAvg"}, "run_ids": ["trained"], "pending": None},
                         {"display": {"method": "FedAvg, 1 round"}, "run_ids": ["short"],
                          "pending": None},
                         {"display": {"method": "FedLGD"}, "run_ids": [], "pending": PENDING}]}
    plt.close("all")
    load_script("mia_roc").main(sm_of(payload, tmp_path, results=results))
    assert served.calls() == [{"kind": "membership", "runs": [str(r) for r in runs],
                               "artefact": None, "options": {"samples": 150, "seed": 0},
                               "device": "cpu"}]
    fig = plt.gcf()
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    for label, result in zip(("FedAvg", "FedAvg, 1 round"), data["runs"], strict=True):
        text = next(t for t in legend if t.startswith(f"{label}: "))
        auc, tpr = re.search(r"AUC ([\d.]+), TPR@1%FPR ([\d.]+)%", text).groups()
        assert float(auc) == round(result["auc"], 3)
        assert float(tpr) == round(100 * result["tpr_at_1pct_fpr"], 1)
    fpr, tpr = np.asarray(data["runs"][0]["fpr"]), np.asarray(data["runs"][0]["tpr"])
    drawn = (fpr > 0) & (tpr > 0)
    np.testing.assert_array_equal(ax.get_lines()[0].get_xdata(), fpr[drawn])
    np.testing.assert_array_equal(ax.get_lines()[0].get_ydata(), tpr[drawn])
    assert any(t.startswith("chance") for t in legend)
    assert f"FedLGD ({PENDING})" in footnote(fig) and "Members: 150" in footnote(fig)
    assert_legible(fig)


def test_domain_tsne_has_a_panel_per_cell_and_a_marker_per_domain(results, tmp_path, served):
    runs = [results / "runs" / rid for rid in ("trained", "short")]
    data = served.answer(figure_data.domain_tsne(runs, ["usps", "synthdigits"], per_domain=40,
                                                 device="cpu"))
    first = data["runs"][0]
    assert first["domains"] == ["usps", "synthdigits"] and first["num_classes"] == 10
    assert [sum(p["domain"] == d for p in first["points"]) for d in first["domains"]] == [40, 40]
    assert {p["class"] for p in first["points"]} <= set(range(10))
    with pytest.raises(ValueError, match="is none of"):
        figure_data.domain_tsne(runs[:1], ["nowhere"], per_domain=4, device="cpu")
    payload = {"spec": {"title": "Fig. 4 style", "domains": ["usps", "synthdigits"],
                        "options": {"per_domain": 40}},
               "cells": [{"display": {"method": "FedAvg"}, "run_ids": ["trained"], "pending": None},
                         {"display": {"method": "1 round"}, "run_ids": ["short"],
                          "pending": None}]}
    plt.close("all")
    load_script("domain_tsne").main(sm_of(payload, tmp_path, results=results))
    assert served.calls() == [{"kind": "domain-tsne", "runs": [str(r) for r in runs],
                               "artefact": None, "device": "cpu",
                               "options": {"domains": ["usps", "synthdigits"], "per_domain": 40,
                                           "seed": 0, "perplexity": 30.0}}]
    fig = plt.gcf()
    panels = [ax for ax in fig.axes if ax.collections]
    assert [ax.get_title() for ax in panels] == ["FedAvg", "1 round"]
    assert all(len(ax.collections) == 2 for ax in panels)  # one scatter per domain
    assert [len(c.get_offsets()) for c in panels[0].collections] == [40, 40]
    usps = [(p["x"], p["y"]) for p in first["points"] if p["domain"] == "usps"]
    np.testing.assert_allclose(panels[0].collections[0].get_offsets(), usps)
    legend = [t.get_text() for t in panels[-1].get_legend().get_texts()]
    assert legend[:2] == ["domain: USPS", "domain: SynthDigits"] and "class 9" in legend
    assert "40 of USPS, 40 of SynthDigits" in footnote(fig)
    assert_legible(fig)


def test_distilled_tsne_embeds_original_and_distilled_pixels(results, tmp_path, served):
    base = results.parent
    run = copy.deepcopy(RUN)
    run["dataset"]["root"] = str(base / "datasets")
    run["partition"]["root"] = str(base / "partitions")
    run["plugins"] = [{"name": "distilled", "params": {
        "ipc": 2, "server_ipc": 1, "warmup_steps": 2, "real_batch": 8, "embed_width": 0.125}}]
    run = resolve_run(run)
    settings = settings_for_run(run, run["plugins"][0]["params"])
    artefact = load_or_make_distilled(settings, base / "datasets", base / "partitions")
    payload = torch.load(artefact.path, weights_only=True)
    points = figure_data.distilled_pixels(payload, base / "datasets", base / "partitions",
                                          [2, 3], per_class=4, seed=0)
    original = points["kind"] == "original"
    assert original.sum() == 2 * 10 * 4 and (~original).sum() == 2 * 10 * 2
    assert points["pixels"].shape[1] == 3 * 16 * 16
    assert set(points["client"]) == {2, 3} and points["domains"][2]
    np.testing.assert_allclose(points["pixels"][~original][:20],
                               payload["x"][2].flatten(1).numpy())
    again = figure_data.distilled_pixels(payload, base / "datasets", base / "partitions",
                                         [2, 3], 4, 0)
    np.testing.assert_array_equal(points["pixels"], again["pixels"])  # seeded
    data = served.answer(figure_data.distilled_tsne(artefact.path, [2, 3], per_class=4))
    assert data["artefact"] == artefact.path.stem and data["num_classes"] == 10
    assert [c["client"] for c in data["clients"]] == [2, 3]
    assert len(data["points"]) == 2 * 10 * (4 + 2)
    spec = {"title": "Fig. 1 style", "clients": [2, 3], "options": {"per_class": 4}}
    plt.close("all")
    load_script("distilled_tsne").main(sm_of({"spec": spec, "cells": []}, tmp_path,
                                             [str(artefact.path)]))
    assert served.calls() == [{"kind": "distilled-tsne", "runs": None,
                               "artefact": str(artefact.path), "device": "cpu",
                               "options": {"clients": [2, 3], "seed": 0, "per_class": 4,
                                           "perplexity": 30.0}}]
    fig = plt.gcf()
    panels = [ax for ax in fig.axes if ax.collections]
    assert len(panels) == 2
    assert panels[0].get_title() == f"client 2 ({domain_label(data['clients'][0]['domain'])})"
    assert [len(c.get_offsets()) for c in panels[0].collections] == [40, 20]
    distilled = [(p["x"], p["y"]) for p in data["points"]
                 if p["client"] == 2 and p["kind"] == "distilled"]
    np.testing.assert_allclose(panels[0].collections[1].get_offsets(), distilled)
    legend = [t.get_text() for t in panels[-1].get_legend().get_texts()]
    assert legend[:2] == ["original images", "distilled images"]
    assert "80 original training images" in footnote(fig)
    assert_legible(fig)


def test_distilled_grid_reads_a_real_fedlgd_run(tmp_path, one_thread, served):
    run = copy.deepcopy(RUN)
    run["dataset"] = {"name": "digits10", "root": str(tmp_path / "datasets"),
                      "options": {"train_per_class": 12, "test_per_class": 3}}
    run["partition"] = {"num_clients": 3, "min_size": 2, "root": str(tmp_path / "partitions")}
    run["training"] = {**run["training"], "rounds": 2, "clients_per_round": 3,
                       "local_steps": None, "local_epochs": 1}
    run["plugins"] = [{"name": "fedlgd", "params": {
        "ipc": 2, "server_ipc": 1, "warmup_steps": 2, "real_batch": 8, "embed_width": 0.125,
        "distill_every": 1, "distill_times": 1, "local_steps": 1, "server_steps": 1}}]
    run_dir = tmp_path / "results" / "runs" / "lgd"
    train(run, run_dir, log=lambda msg: None)
    served.answer(figure_data.virtual_images(run_dir, per_class=2))
    payload = {"spec": {"title": "D.2", "per_class": 2},
               "cells": [{"display": {"method": "FedLGD"}, "run_ids": ["lgd"], "pending": None}]}
    plt.close("all")
    load_script("distilled_grid").main(sm_of(payload, tmp_path, [str(run_dir / "final.json")]))
    fig = plt.gcf()
    panels = [ax for ax in fig.axes if any(isinstance(a, AxesImage) for a in ax.get_children())]
    assert [ax.get_title() for ax in panels] == [
        "client 0 (local, 20 images)", "client 1 (local, 20 images)",
        "client 2 (local, 20 images)", "server (global, 10 images)"]
    assert_legible(fig)
