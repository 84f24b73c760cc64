# The table and scorecard rules' functions (tables.smk): a table's inputs and payload; a
# scorecard's claims, tables and payload.
from fedhet import experiments as X
from fedhet import papers


def table_inputs(wildcards):
    item = item_of(wildcards, "table")
    runs = [f for rid in item.run_ids() for f in run_outputs(rid)]
    return runs + [calibration_output(cid) for cid in item.calibration_ids()]


def table_payload(wildcards):
    return item_of(wildcards, "table").payload()


def claim_targets(claim):
    """The tables (<paper>_<id>) one claim compares."""
    return {f"{claim['paper']}_{claim[side]['table']}" for side in ("better", "than")}


def scorecard_claims(selection):
    """Claims of a scorecard: of every built paper ("all"), or those whose tables the `ci`
    target builds whole ("ci")."""
    claims = [c for c in EXP.claims() if c["paper"] in config["papers"]]
    if selection == "ci":
        built = set(ci_items()[0])
        claims = [c for c in claims if claim_targets(c) <= built]
    return claims


def scorecard_tables(selection):
    """Input function: the long tables (CSV) the claims of a scorecard compare."""

    def tables(wildcards):
        targets = {t for c in scorecard_claims(selection) for t in claim_targets(c)}
        return sorted(
            f"results/{SCALE}/tables/{ITEMS[t].paper}/{ITEMS[t].id}.csv"
            for t in targets
        )

    return tables


def scorecard_payload(selection):
    """Params function: the claims of a scorecard, their tables' payloads and the scale's
    warning (the scorecard repeats it)."""

    def payload(wildcards):
        claims = scorecard_claims(selection)
        targets = {t for c in claims for t in claim_targets(c)}
        content = {
            "claims": claims,
            # with the cells this scale does not run, so that a claim's verdict says which
            # part of it was tested, and what the cells ran on (stand-ins)
            "payloads": {t: ITEMS[t].claim_payload() for t in sorted(targets)},
            "seeds": EXP.seeds,
            "warning": config["scale_warning"],
            "tie_margin": tie_margin(),
        }
        return X.Payload(content, f"{len(claims)} claims of config/papers/*.yaml")

    return payload


def tie_margin():
    """Within how much two means tie (config.yaml → leaderboard.tie_margin): the leaderboard's
    and the scorecard's margin."""
    from fedhet.tables.maths import TIE_MARGIN

    return float((config.get("leaderboard") or {}).get("tie_margin", TIE_MARGIN))
