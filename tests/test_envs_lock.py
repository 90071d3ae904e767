"""envs/*.yaml (conda envs for `snakemake --sdm conda`) agree with requirements.lock.

No conda channel is reachable where these tests run, so the envs cannot be built here; instead
each file must parse, pin exactly the lock's versions, cover the third-party imports of the code
its rules run, and be named by the rules.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
ENV_FILES = sorted((REPO / "envs").glob("*.yaml"))
# The modules each env's rules run (python -m ...), whose imports it must satisfy.
ENTRY_MODULES = {"train.yaml": "sacbench.train", "report.yaml": "sacbench.report"}


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_versions() -> dict[str, str]:
    pins = {}
    for line in (REPO / "requirements.lock").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[normalized(name)] = version
    return pins


def pip_pins(env_file: Path) -> dict[str, str]:
    spec = yaml.safe_load(env_file.read_text())
    pip_sections = [item["pip"] for item in spec["dependencies"] if isinstance(item, dict)]
    assert len(pip_sections) == 1, f"{env_file.name}: expected one pip section"
    pins = {}
    for requirement in pip_sections[0]:
        name, separator, version = requirement.partition("==")
        assert separator, f"{env_file.name}: {requirement!r} is not pinned with =="
        pins[normalized(name)] = version
    return pins


def test_there_is_an_env_per_rule_group():
    assert [path.name for path in ENV_FILES] == sorted(ENTRY_MODULES)


@pytest.mark.parametrize("env_file", ENV_FILES, ids=lambda path: path.name)
def test_env_pins_equal_the_lock(env_file: Path):
    lock = lock_versions()
    for name, version in pip_pins(env_file).items():
        assert name in lock, f"{env_file.name}: {name} is not in requirements.lock"
        assert lock[name] == version, f"{env_file.name}: {name}=={version}"


def test_lock_pins_are_public_releases():
    """No local version labels (such as torch's +cpu): the public index serves none, so such a
    pin breaks every install outside a machine that keeps the wheel on disk."""
    labelled = {name: version for name, version in lock_versions().items() if "+" in version}
    assert not labelled, f"requirements.lock pins local builds: {labelled}"


@pytest.mark.parametrize("env_file", ENV_FILES, ids=lambda path: path.name)
def test_env_python_matches_the_project(env_file: Path):
    spec = yaml.safe_load(env_file.read_text())
    pythons = [d for d in spec["dependencies"] if isinstance(d, str) and d.startswith("python")]
    assert pythons == ["python=3.11"]
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["requires-python"].startswith(">=3.11")


def imported_modules(module: str, seen: set[str] | None = None) -> set[str]:
    """Top-level third-party modules that `module` and the sacbench modules it uses import.

    sacbench modules are followed wherever they are imported (a CLI may import a submodule
    lazily); third-party imports count at module level only, since one inside a function (a
    maintenance tool's) or under `try/except ImportError` (a speed-up) is not needed to run.
    """
    seen = set() if seen is None else seen
    if module in seen:
        return set()
    seen.add(module)
    path = REPO / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = REPO / module.replace(".", "/") / "__init__.py"
    tree = ast.parse(path.read_text())
    optional = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.Try)
        and any(
            isinstance(handler.type, ast.Name)
            and handler.type.id in ("ImportError", "ModuleNotFoundError")
            for handler in node.handlers
        )
        for statement in node.body
        for inner in ast.walk(statement)
    }
    module_level = {id(node) for node in tree.body}
    third_party: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top == "sacbench":
                candidate = REPO / (name.replace(".", "/") + ".py")
                package = REPO / name.replace(".", "/") / "__init__.py"
                if candidate.exists() or package.exists():
                    third_party |= imported_modules(name, seen)
            elif (
                top not in sys.stdlib_module_names
                and top != "__future__"
                and id(node) in module_level
                and id(node) not in optional
            ):
                third_party.add(top)
    return third_party


@pytest.mark.parametrize("env_name", sorted(ENTRY_MODULES))
def test_env_covers_the_imports_of_its_rules(env_name: str):
    module = ENTRY_MODULES[env_name]
    module_path = REPO / (module.replace(".", "/") + ".py")
    if not module_path.exists() and not (REPO / module.replace(".", "/")).is_dir():
        pytest.skip(f"{module} is not in this checkout yet")
    distributions = importlib.metadata.packages_distributions()
    pinned = set(pip_pins(REPO / "envs" / env_name))
    for top in sorted(imported_modules(module)):
        provided_by = {normalized(name) for name in distributions.get(top, [top])}
        assert provided_by & pinned, f"envs/{env_name} lacks {sorted(provided_by)} for {top}"


def test_every_env_is_named_by_a_rule_and_exists():
    named = set()
    for rule_file in (REPO / "workflow" / "rules").glob("*.smk"):
        for match in re.finditer(r"conda:\s*\n\s*\"([^\"]+)\"", rule_file.read_text()):
            named.add((rule_file.parent / match.group(1)).resolve())
    assert named == {path.resolve() for path in ENV_FILES}


def lock_lines(path: Path) -> list[str]:
    return [line.split("#")[0].strip() for line in path.read_text().splitlines()
            if line.split("#")[0].strip()]  # fmt: skip


def installed_closure(requirements: list[str]) -> set[str]:
    """The installed distributions that `requirements` (PEP 508 strings) need, transitively."""
    from packaging.requirements import Requirement

    needed: set[str] = set()
    pending = [Requirement(text) for text in requirements]
    while pending:
        requirement = pending.pop()
        name = normalized(requirement.name)
        if name in needed or not (
            requirement.marker is None or requirement.marker.evaluate({"extra": ""})
        ):
            continue
        needed.add(name)
        pending += [Requirement(text) for text in importlib.metadata.requires(name) or []]
    return needed


def test_the_runtime_lock_holds_what_running_needs_and_the_dev_lock_adds_the_tools():
    """requirements.lock: every distribution sacbench's dependencies need, and no test or lint
    tool; requirements-dev.lock: the runtime lock (-r) and the dev extra's tools it lacks."""
    sacbench = importlib.metadata.requires("sacbench") or []
    runtime = [text for text in sacbench if "extra ==" not in text]
    dev_extra = [text.split(";")[0] for text in sacbench if 'extra == "dev"' in text]
    needed = installed_closure(runtime) - {"setuptools", "pip"}  # pip installs these itself
    tools = installed_closure(dev_extra) - needed
    runtime_pins = set(lock_versions())
    assert needed <= runtime_pins, f"requirements.lock lacks {sorted(needed - runtime_pins)}"
    assert not tools & runtime_pins, f"test/lint tools in requirements.lock: {tools & runtime_pins}"
    dev_lines = lock_lines(REPO / "requirements-dev.lock")
    assert dev_lines[0] == "-r requirements.lock"
    dev_pins = {normalized(line.split("==")[0]): line.split("==")[1] for line in dev_lines[1:]}
    assert set(dev_pins) == tools
    for name, version in dev_pins.items():  # the tools as installed here, where the tests run
        assert importlib.metadata.version(name) == version, name
