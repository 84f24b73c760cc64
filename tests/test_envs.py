"""envs/fedhet.yaml (the conda environment of every rule) stays in sync with pyproject.toml."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[1]
# PyPI name → conda-forge / bioconda name, where they differ
CONDA_NAMES = {"torch": "pytorch"}
SPEC = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*(.*?)\s*$")


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse(spec: str) -> tuple[str, str]:
    match = SPEC.match(spec)
    assert match, spec
    name, version = match.groups()
    return normalise(name), version.replace(" ", "")


def pyproject():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return data["project"]


def env_specs() -> dict[str, str]:
    env = yaml.safe_load((ROOT / "envs" / "fedhet.yaml").read_text())
    out = {}
    for dep in env["dependencies"]:
        assert isinstance(dep, str), "no pip section: every package comes from conda"
        name, version = parse(dep)
        out[name] = version
    return out


def test_every_dependency_is_in_the_env_with_the_same_bounds():
    env = env_specs()
    for dep in pyproject()["dependencies"]:
        name, version = parse(dep)
        conda = normalise(CONDA_NAMES.get(name, name))
        assert conda in env, f"{dep} missing from envs/fedhet.yaml"
        assert env[conda] == version, f"{dep}: envs/fedhet.yaml says {conda} {env[conda]}"


def test_the_env_has_nothing_else_but_python_and_pip():
    wanted = {normalise(CONDA_NAMES.get(n, n)) for n, _ in map(parse, pyproject()["dependencies"])}
    extra = set(env_specs()) - wanted - {"python", "pip"}
    assert not extra, f"envs/fedhet.yaml lists packages pyproject.toml does not: {extra}"


def test_python_bound_matches():
    assert env_specs()["python"] == pyproject()["requires-python"]


def test_channels_and_post_deploy():
    env = yaml.safe_load((ROOT / "envs" / "fedhet.yaml").read_text())
    assert env["channels"][:2] == ["conda-forge", "bioconda"]
    assert "nodefaults" in env["channels"]
    script = ROOT / "envs" / "fedhet.post-deploy.sh"
    assert script.exists() and "pip install --no-deps" in script.read_text()


def test_every_rule_uses_the_env():
    for smk in (ROOT / "workflow" / "rules").glob("*.smk"):
        text = smk.read_text()
        for block in re.split(r"\nrule ", text)[1:]:
            if "shell:" in block or "script:" in block:
                assert 'conda:\n        "../../envs/fedhet.yaml"' in block, smk.name
