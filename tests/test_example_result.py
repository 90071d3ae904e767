"""The committed example result (results/examples/, shown in the README) cannot drift.

Its tables are what `python -m sacbench.report` renders from its committed extracted runs, with
the very commands the workflow gives for its preset: Snakemake's dry run of the preset, forced
for the three tables (in a fresh clone every file has its checkout time, and nothing looks out
of date), prints them, and each is run again here, writing beside the committed files instead
of over them.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.workflow_copies import REPO, run_verbatim, workflow_copy

EXAMPLES = REPO / "results" / "examples"
PRESETS = sorted(path.name for path in EXAMPLES.glob("*") if path.is_dir())
TABLE_FORMATS = ("md", "csv", "html")


def test_there_is_an_example_result():
    assert PRESETS, f"no example result under {EXAMPLES}"


def table_commands(preset: str, workdir: Path) -> list[list[str]]:
    """The report commands of the preset's three tables, as Snakemake's dry run prints them."""
    tables = [
        f"results/examples/{preset}/{stem}.md" for stem in ("sac_runtimes", "sac", "sac_aggregate")
    ]
    dry_run = run_verbatim(
        workdir, f"snakemake -n -p -f {' '.join(tables)} --configfile config/{preset}.yaml"
    )
    output = dry_run.stdout + dry_run.stderr
    assert dry_run.returncode == 0, output[-4000:]
    commands = re.findall(
        r"^Shell command: (python -m sacbench\.report .+?) *>", output, re.MULTILINE
    )
    assert len(commands) == 3, output[-4000:]
    return [shlex.split(command) for command in commands]


@pytest.mark.parametrize("preset", PRESETS)
def test_committed_tables_are_what_the_report_renders_from_the_committed_runs(
    preset: str, tmp_path: Path
):
    committed = EXAMPLES / preset
    config = yaml.safe_load((REPO / "config" / f"{preset}.yaml").read_text())
    assert config["results_dir"] == f"results/examples/{preset}"
    workdir = workflow_copy(tmp_path, yaml.safe_load((REPO / "config.yaml").read_text()))
    (workdir / "results").symlink_to(REPO / "results")
    for argv in table_commands(preset, workdir):
        rendered = {}
        for fmt in TABLE_FORMATS:
            flag = argv.index(f"--{fmt}")
            name = Path(argv[flag + 1]).name
            rendered[name] = tmp_path / "rendered" / name
            argv[flag + 1] = str(rendered[name])
        done = subprocess.run(
            [sys.executable, *argv[1:]], cwd=workdir, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr[-4000:]
        for name, path in rendered.items():
            assert path.read_text() == (committed / name).read_text(), (
                f"results/examples/{preset}/{name} differs from what `{shlex.join(argv)}` renders"
            )
