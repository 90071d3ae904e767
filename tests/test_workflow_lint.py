"""The workflow's static checks and plans: lint, formatting, and what dry runs schedule."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from sacbench.pipeline.config import ConfigError, load_schema, validated_config

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def run(command: list[str], *, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300)


def planned_jobs(dry_run_output: str) -> list[tuple[str, str]]:
    """(rule, first output) of every job a `snakemake -n` run lists."""
    jobs = []
    rule = None
    for line in dry_run_output.splitlines():
        header = re.match(r"^(?:local)?rule (\w+):$", line)
        if header:
            rule = header.group(1)
            jobs.append((rule, ""))
            continue
        output = re.match(r"^\s+output: ([^,\s]+)", line)
        if output and rule is not None and jobs and jobs[-1][0] == rule and not jobs[-1][1]:
            jobs[-1] = (rule, output.group(1))
    return jobs


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A fresh working directory holding the repo's configs, so no results/ state leaks in."""
    shutil.copy(REPO / "config.yaml", tmp_path / "config.yaml")
    shutil.copytree(REPO / "config", tmp_path / "config")
    return tmp_path


def drawn_figures(printed_dry_run: str) -> list[str]:
    """The --figures of the one `report plots` command a `snakemake -n -p` run prints."""
    (figures,) = re.findall(r"sacbench.report plots .* --figures ([\w -]+?) --", printed_dry_run)
    return figures.split()


def dry_run(workdir: Path, *extra: str) -> list[tuple[str, str]]:
    done = run([*SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-n", *extra], cwd=workdir)
    assert done.returncode == 0, done.stdout + done.stderr
    return planned_jobs(done.stdout + done.stderr)


def test_lint_has_no_findings():
    done = run([*SNAKEMAKE, "--lint"], cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Lints for" not in done.stdout + done.stderr
    assert "Congratulations" in done.stdout + done.stderr


def test_snakefmt_check_passes():
    snakefmt = Path(sys.executable).parent / "snakefmt"
    done = run([str(snakefmt), "--check", "Snakefile", "workflow"], cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr


def test_default_config_plans_the_full_benchmark(workdir: Path):
    done = run([*SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-n", "-p"], cwd=workdir)
    assert done.returncode == 0, done.stdout + done.stderr
    jobs = planned_jobs(done.stdout + done.stderr)
    counts = Counter(rule for rule, _ in jobs)
    assert counts["train"] == 18
    assert counts["extract"] == 18
    assert {"runtimes_table", "returns_table", "aggregate_table", "plots", "all"} <= set(counts)
    # One job draws every figure: the evaluation figure, as every run ends with a final
    # evaluation, and the aggregate's, as every task has a pr-424 return. Nothing is filmed.
    assert counts["plots"] == 1 and "video" not in counts
    assert drawn_figures(done.stdout) == ["sac", "sac-time", "sac-sps", "sac-eval",
                                          "sac-aggregate", "sac-profile"]  # fmt: skip
    trained = {output for rule, output in jobs if rule == "train"}
    assert "results/runs/sac_continuous_action/Humanoid-v4/3/complete.json" in trained


def test_one_target_plans_only_what_it_needs(workdir: Path):
    jobs = dry_run(workdir, "results/sac_runtimes.md")
    assert Counter(rule for rule, _ in jobs) == {"train": 18, "extract": 18, "runtimes_table": 1}


def test_smoke_profile_plans_six_runs_that_reach_the_update(workdir: Path):
    done = run(
        [
            *SNAKEMAKE,
            "-s",
            str(REPO / "Snakefile"),
            "--profile",
            str(REPO / "profiles" / "smoke"),
            "-n",
            "-p",
        ],
        cwd=workdir,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    jobs = planned_jobs(done.stdout)
    trained = sorted(output for rule, output in jobs if rule == "train")
    assert len(trained) == 6
    assert all(path.startswith("results/smoke/runs/") for path in trained)
    commands = [line for line in done.stdout.splitlines() if "sacbench.train" in line]
    assert len(commands) == 6
    for command in commands:
        steps = int(re.search(r"--total-timesteps (\d+)", command).group(1))
        learning_starts = int(re.search(r"--learning-starts (\d+)", command).group(1))
        assert learning_starts < steps
        assert "--eval-episodes 3" in command
        # The one video of the smoke preset: InvertedPendulum-v4's final evaluation.
        filmed = "--env-id InvertedPendulum-v4" in command
        assert ("--capture-video" in command.split()) == filmed, command
    videos = [output for rule, output in jobs if rule == "video"]
    assert videos == ["results/smoke/videos/sac_continuous_action/InvertedPendulum-v4.mp4"]
    assert "sac-eval" in drawn_figures(done.stdout)


RUNTIME_KEYS = {"threads", "mem_mb", "mem", "runtime", "resources", "slurm_partition",
                "slurm_account", "partition", "gpu", "gpus", "cpus_per_task"}  # fmt: skip


def _keys(node: object) -> set[str]:
    """Every mapping key in a parsed YAML document, at any depth."""
    if isinstance(node, dict):
        return {str(key) for key in node} | {k for value in node.values() for k in _keys(value)}
    if isinstance(node, list):
        return {key for item in node for key in _keys(item)}
    return set()


def test_runtime_settings_come_from_profiles_not_config():
    # Threads, memory and time limits are threads and resources of the train rule (profiles
    # override them); the configs hold none, and the schema refuses them.
    for path in (REPO / "config.yaml", *sorted((REPO / "config").glob("*.yaml"))):
        keys = _keys(yaml.safe_load(path.read_text()))
        assert not keys & RUNTIME_KEYS, path
    repo = yaml.safe_load((REPO / "config.yaml").read_text())
    schema = load_schema(REPO / "workflow" / "schemas" / "config.schema.yaml")
    for key, value in (("threads", 2), ("runtime", 60), ("mem_mb", 4000)):
        with pytest.raises(ConfigError, match=f"{key}: unknown key '{key}'"):
            validated_config({**repo, key: value}, schema=schema)
    rule = (REPO / "workflow" / "rules" / "train.smk").read_text()
    assert re.search(r"^    threads: \S+$", rule, flags=re.MULTILINE), rule
    resources = re.search(r"^    resources:\n((?:        .*\n)+)", rule, flags=re.MULTILINE)
    assert resources, rule
    assert {"mem_mb", "runtime"} <= set(re.findall(r"^\s+(\w+)=", resources.group(1), re.M))
