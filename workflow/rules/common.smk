# The workflow's config and experiment: config validation, the run table (fedhet.experiments),
# the paths of every output and the targets, and what the rules of several files share (an item
# of a wildcard, its report entry, what a scale changed). The execution machinery is in
# execution.smk. Each rule file <job>.smk includes its own input and params functions from
# <job>_functions.smk beside it (`snakemake --lint` wants functions and rules in separate files).
from pathlib import Path

import yaml
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from fedhet import papers
from fedhet import experiments as X
from fedhet.config import ConfigError
from fedhet.report.drawing import drawing_fingerprint

ROOT = Path(workflow.basedir)
SCHEMAS = ROOT / "workflow" / "schemas"


def shown_path(path):
    """A config file as the user named it: relative to the working directory when inside it."""
    path = Path(path).absolute()
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def config_origin(keys):
    """Where the workflow config's value at `keys` (a key path; its top-level key decides)
    came from: `--config` when set there, else the last --configfile that sets it, else
    config/config.yaml (Snakemake merges them in this order)."""
    if not keys:
        return "config/config.yaml"
    settings = workflow.config_settings
    given = dict(settings.config or {})
    if keys[0] in given:
        value = given[keys[0]]
        shown = value if isinstance(value, (str, int, float)) else "..."
        return f"--config {keys[0]}={shown}"
    for path in reversed(list(settings.configfiles or [])):
        if keys[0] in X.read_yaml(path):
            return shown_path(path)
    return "config/config.yaml"


def config_origins():
    """Top-level key of the workflow config → the file (or --config) it came from."""
    return {key: config_origin([key]) for key in config}


def validate_file(data, schema, file):
    """Schema-check one config file; errors name the file and the key (`file`: its name, or
    a function of the bad key's path that names the file it came from)."""
    try:
        validate(data, schema=str(SCHEMAS / schema))
    except WorkflowError:
        import jsonschema

        schema_doc = yaml.safe_load((SCHEMAS / schema).read_text())
        error = jsonschema.validators.validator_for(schema_doc)(schema_doc)
        worst = jsonschema.exceptions.best_match(error.iter_errors(data))
        key = ".".join(str(p) for p in worst.absolute_path) or "(top level)"
        where = file(list(worst.absolute_path)) if callable(file) else file
        raise WorkflowError(
            f"{where}: invalid setting '{key}': {worst.message}"
        ) from None


def load_and_validate():
    """Validate config.yaml, the scale file and every paper file, then expand the experiment
    (with this scale's leaderboards on disk: `fedhet.experiments.challengers`)."""
    validate_file(config, "config.schema.yaml", config_origin)
    scale_file = ROOT / "config" / "scales" / f"{config['scale']}.yaml"
    if not scale_file.exists():
        valid = sorted(p.stem for p in scale_file.parent.glob("*.yaml"))
        raise WorkflowError(
            f"{config_origin(['scale'])}: unknown scale '{config['scale']}'; valid: "
            f"{', '.join(valid)}"
        )
    validate_file(
        X.read_yaml(scale_file),
        "scale.schema.yaml",
        f"config/scales/{scale_file.name}",
    )
    for paper in X.PAPERS:
        path = ROOT / "config" / "papers" / f"{paper}.yaml"
        if path.exists():
            validate_file(
                X.read_yaml(path),
                "paper.schema.yaml",
                f"config/papers/{path.name}",
            )
    try:
        return X.load_experiment(
            config,
            ROOT,
            origins=config_origins(),
            results=f"results/{config['scale']}",
        )
    except ConfigError as err:
        raise WorkflowError(str(err)) from None


EXP = load_and_validate()
SCALE = EXP.scale
RES = EXP.scale_config["resources"]


ITEMS = EXP.items
TABLE_IDS = sorted({i.id for i in ITEMS.values() if not i.is_figure})
FIGURE_IDS = sorted({i.id for i in ITEMS.values() if i.is_figure})
PAPERS_WITH_ITEMS = sorted({i.paper for i in ITEMS.values()})


def alternation(names):
    """Regex of exactly these names (wildcard constraints); never empty."""
    return "|".join(sorted(names)) or "(?!)"


def item_outputs(target):
    """Files a table or figure target (<paper>_<id>) consists of."""
    item = ITEMS[target]
    if item.is_figure:
        return [f"results/{SCALE}/figures/{item.paper}/{item.id}.png"]
    base = f"results/{SCALE}/tables/{item.paper}/{item.id}"
    return [f"{base}.csv", f"{base}.md", f"{base}.html"]


def paper_outputs(paper):
    out = []
    for item in EXP.items_of(paper):
        out.extend(item_outputs(item.target))
    return out


def scorecard_outputs():
    base = f"results/{SCALE}/scorecard"
    return [f"{base}.csv", f"{base}.md", f"{base}.html"]


def run_outputs(run_id):
    base = f"results/{SCALE}/runs/{run_id}"
    return [f"{base}/final.json", f"{base}/metrics.jsonl"]


def all_results():
    """Everything `snakemake` builds for the papers in config['papers'], plus the scorecard
    and, with challengers configured, their leaderboards."""
    out = []
    for paper in config["papers"]:
        out.extend(paper_outputs(paper))
    return out + scorecard_outputs() + all_leaderboards()


def all_targets():
    out = all_results()
    if config["report_after_run"]:
        out.append(f"reports/{SCALE}/report.html")
    return out


def ci_targets():
    """`snakemake ci`: a few whole tables/figures, the runs of selected cells and the
    scorecard of the claims those tables check (its report looks like the full one)."""
    items, run_ids = ci_items()
    out = [f"results/{SCALE}/ci/scorecard.{ext}" for ext in ("csv", "md", "html")]
    for target in items:
        out.extend(item_outputs(target))
    for run_id in run_ids:
        out.extend(run_outputs(run_id))
    return out


def ci_items():
    """The whole tables and figures of the `ci` target (config.yaml → ci.targets)."""
    try:
        return X.ci_selection(EXP, config.get("ci") or {})
    except ConfigError as err:
        raise WorkflowError(str(err)) from None


def item_of(wildcards, kind):
    target = f"{wildcards.paper}_{wildcards[kind]}"
    if target not in ITEMS:
        raise WorkflowError(
            f"unknown {kind} '{target}'; valid: "
            + ", ".join(
                t for t, i in ITEMS.items() if i.is_figure == (kind == "figure")
            )
        )
    return ITEMS[target]


def calibration_output(calibration_id):
    """calibration.json of a post-hoc step (`<run_id>/<key>`, CCVR; workflow/rules/posthoc.smk)."""
    return f"results/{SCALE}/calibrations/{calibration_id}/calibration.json"


def report_category(wildcards):
    """The report's sidebar entry of a table's or figure's paper, in paper order."""
    return papers.report_category(wildcards.paper)


def report_labels(wildcards):
    """The report's sidebar row of a table or figure: sorted in paper order, with its title."""
    kind = "figure" if "figure" in wildcards.keys() else "table"
    item = item_of(wildcards, kind)
    return {kind: papers.item_label(item.id, item.spec.get("title", item.id))}


def scenario_note():
    """One line saying what this scale is (the report's introduction; each table and figure
    says what its own runs changed, fedhet.experiments.scale_notes): the scale's description,
    and its share of the papers' rounds read from its own `rounds` setting, with the papers
    whose own keys bound their rounds otherwise."""
    scale = EXP.scale_config
    text = " ".join(str(scale.get("description", "")).split()).rstrip(".")
    if float(scale["rounds"]["factor"]) == 1.0:
        return f"{text}."
    terms = rounds_terms(scale["rounds"])
    bounds = [", ".join(term for key, term in terms.items() if key != "factor")]
    for name in config["papers"]:
        own = rounds_terms(X.scale_for_paper(EXP.scale_config, name)["rounds"])
        differ = [term for key, term in own.items() if terms.get(key) != term]
        if differ:
            bounds.append(f"{papers.paper_name(name)}: {', '.join(differ)}")
    return f"{text}; {terms['factor']} of the papers' rounds ({'; '.join(bounds)})."


def rounds_terms(rounds):
    """How a scale's `rounds` cuts the papers' rounds: "2%", "at least 5", "at most 100"."""
    terms = {"factor": f"{100 * float(rounds['factor']):g}%"}
    terms["min"] = f"at least {rounds['min']}"
    if rounds.get("max"):
        terms["max"] = f"at most {rounds['max']}"
    return terms


# the report's introduction says the same (workflow/report/workflow.rst), under the scale's warning
config["scale_note"] = scenario_note()
config["scale_warning"] = " ".join(str(EXP.scale_config["warning"]).split())
# whether a difference from a paper's number means something at this scale: the tables print it
# in their cells only then (their CSVs always keep it), and the report's texts say which
COMPARABLE = bool(EXP.scale_config.get("comparable", True))
config["scale_comparable"] = COMPARABLE
# the package code that draws tables, figures and leaderboards (fedhet.report.drawing): a param
# of the rules that draw, so that editing it redraws their results, and only theirs
DRAWN_WITH = drawing_fingerprint()


def item_note(kind):
    """Params function: what a table's or figure's own runs changed from the paper at this
    scale, in words (fedhet.experiments.scale_notes): a figure's as one paragraph (the first of
    its notes), a table's a sentence per part (its page folds the methods' settings)."""
    if kind == "table":
        return lambda wildcards: item_of(wildcards, kind).scale_change_parts
    return lambda wildcards: item_of(wildcards, kind).scale_changes


# The report's landing text (its title, the scale's warning, how to read the tables).
REPORT_TEXT = "workflow/report/workflow.rst"
