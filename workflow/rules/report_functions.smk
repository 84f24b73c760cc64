# The report rule's function (report.smk): the config of the report's own Snakemake call.
import yaml


def report_config():
    """Config (YAML) that makes the report's own Snakemake call see this DAG. Without the
    challengers: when the report runs, every entry's leaderboard is built, and that call keeps
    them all from disk (with the tie margin each was built with), so that the report of a
    later plain `snakemake` is the same and is not rebuilt."""
    keys = {"scale": SCALE, "seeds": EXP.seeds, "papers": list(config["papers"])}
    keys["skip_plugins"] = list(config.get("skip_plugins") or [])
    return yaml.safe_dump(keys, default_flow_style=True).strip()
