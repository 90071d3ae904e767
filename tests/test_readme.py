"""The commands of the README and of docs/*.md work as written, and their links resolve.

Every command in the bash blocks of README.md and docs/*.md is either run here, exactly as
written, in a folder that looks like a clone of the repository, or named with the test that runs
it (the Slurm command needs the test cluster; the full benchmark is run with a tiny config), or
with the reason no test runs it. A command added to those pages without an entry below fails
`test_every_readme_command_is_checked`. Every relative link of those pages, and its #anchor,
must point at a file and a heading that exist (`test_every_relative_link_resolves`).
"""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import imageio.v2 as imageio
import pandas as pd
import pytest

from sacbench.events import read_run_scalars
from tests.trainer_runs import stop_once_it_prints, train_in_process
from tests.workflow_copies import (
    REPO,
    SMOKE_COMMAND,
    default_config_copy,
    interruptible,
    run_verbatim,
    smoke_preset_run,
    venv_environment,
    workflow_copy,
)

pytestmark = pytest.mark.slow

SMOKE = SMOKE_COMMAND
V5_TASKS = "snakemake --cores 6 --configfile config/v5-tasks.yaml"
HOPPER_RUN = "results/runs/sac_continuous_action/Hopper-v4/1/complete.json"

EVALUATED_RUN = (
    "python -m sacbench.train --env-id InvertedPendulum-v4 --seed 1 --run-dir runs/pendulum-1 "
    "--total-timesteps 20000 --eval-frequency 5000 --save-model --capture-video"
)
EVALUATE = "python -m sacbench.evaluate runs/pendulum-1 --episodes 10 --video"

# Command of README.md or docs/*.md -> (test file, test function) that runs it, or
# ("", why no test does).
CHECKED: dict[str, tuple[str, str]] = {
    "snakemake --cores 18": (
        "tests/test_readme.py",
        "test_one_run_then_the_benchmark_then_its_report",
    ),
    "snakemake --profile profiles/slurm": (
        "tests/test_slurm.py",
        "test_smoke_workflow_runs_every_train_job_as_a_slurm_job",
    ),
    "snakemake results/sac_runtimes.md": (
        "tests/test_commands.py",
        "test_plain_target_runs_locally_on_every_core",
    ),
    f"bash scripts/setup.sh && . .venv/bin/activate && {SMOKE}": (
        "tests/test_readme.py",
        "test_smoke_preset_builds_every_table_and_plot",
    ),
    "bash .ci/run": ("", "CI runs it on every submission"),
    "python -m sacbench.status --configfile config/smoke.yaml": (
        "tests/test_readme.py",
        "test_status_after_the_smoke_preset_shows_six_finished_runs",
    ),
    f"{SMOKE} --report results/smoke/report.html": (
        "tests/test_readme.py",
        "test_report_after_the_smoke_preset",
    ),
    "python -m sacbench.status --watch 60": (
        "tests/test_readme.py",
        "test_status_watch_reprints_until_interrupted",
    ),
    "tensorboard --logdir results/runs": (
        "tests/test_readme.py",
        "test_tensorboard_serves_the_runs",
    ),
    "snakemake -n": (
        "tests/test_readme.py",
        "test_dry_run_lists_the_full_benchmark",
    ),
    f"snakemake {HOPPER_RUN}": (
        "tests/test_readme.py",
        "test_one_run_then_the_benchmark_then_its_report",
    ),
    "snakemake --report results/report.html": (
        "tests/test_readme.py",
        "test_one_run_then_the_benchmark_then_its_report",
    ),
    V5_TASKS: (
        "tests/test_readme.py",
        "test_v5_tasks_preset_trains_tasks_pr424_did_not_run",
    ),
    "python -m sacbench.train --env-id Hopper-v4 --seed 1 --run-dir runs/hopper-1": (
        "tests/test_readme.py",
        "test_trainer_command_starts_and_stops_cleanly",
    ),
    EVALUATED_RUN: ("tests/test_readme.py", "test_evaluated_run_films_its_evaluations"),
    EVALUATE: ("tests/test_readme.py", "test_evaluate_command_replays_the_final_evaluation"),
    # Getting CleanRL and an environment for it needs the network and builds a second venv
    # (minutes, hundreds of MB): checked by hand, not in CI. The snakemake command is run as
    # written, with a cleanrl.yaml whose command is a CleanRL-style script written by the test.
    "git clone https://github.com/vwxyzjn/cleanrl.git ~/cleanrl": (
        "",
        "documentation only: needs the network; CleanRL at commit fe8d8a03 was checked by hand",
    ),
    "python3 -m venv ~/cleanrl-venv && ~/cleanrl-venv/bin/pip install torch==2.13.0"
    ' gymnasium==0.29.1 mujoco==2.3.3 "numpy<2" tyro tensorboard "imageio<3"': (
        "",
        "documentation only: needs a package index; run by hand (Python 3.11.7; checked with"
        " torch 2.14.1),"
        " then tests/test_external_command.py::test_cleanrls_own_script_runs_as_a_command_run",
    ),
    "snakemake --cores 18 --configfile cleanrl.yaml": (
        "tests/test_external_command.py",
        "test_cleanrl_style_script_side_by_side_in_every_table_after_a_failed_attempt",
    ),
    "python -m benchmarks.cleanrl_exact --cleanrl-checkout ~/cleanrl --cleanrl-python"
    " ~/cleanrl-venv/bin/python --env-ids HalfCheetah-v4 Hopper-v4 --total-timesteps 6000"
    " --learning-starts 1000 --out-dir /tmp/cleanrl-exact-runs --plot"
    " docs/figures/cleanrl-exact.png": (
        "tests/test_cleanrl_exact.py",
        "test_the_exact_mode_equals_cleanrls_script_step_for_step",
    ),
    # Weights & Biases, offline (WANDB_MODE=offline, as the README's export sets it).
    "python -m sacbench.train --env-id Hopper-v4 --seed 1 --run-dir runs/hopper-1 --track": (
        "tests/test_tracking.py",
        "test_readme_tracked_trainer_command_starts_and_stops_cleanly",
    ),
    "snakemake --cores 18 --configfile config/wandb.yaml": (
        "tests/test_tracking.py",
        "test_readme_offline_pipeline_then_sync",
    ),
    "wandb sync --dry-run results/runs/sac_continuous_action/Hopper-v4/1/wandb": (
        "tests/test_tracking.py",
        "test_readme_offline_pipeline_then_sync",
    ),
    # The upload needs a W&B account and network: the test runs it up to the login it asks for.
    "wandb sync results/runs/*/*/*/wandb": (
        "tests/test_tracking.py",
        "test_readme_offline_pipeline_then_sync",
    ),
    # docs/slurm.md. The smoke workflow's test runs `snakemake --profile profiles/slurm` on the
    # single-node test cluster, which its fixture starts and stops with the script.
    "snakemake --profile profiles/slurm results/sac_runtimes.md": (
        "",
        "needs a Slurm cluster: the Slurm tests run the command without a target, and"
        " tests/test_commands.py runs the target locally",
    ),
    "SACBENCH_SLURM_PARTITION=gpu SACBENCH_SLURM_GPUS=1 SACBENCH_SLURM_TRAIN_CPUS=4"
    " snakemake --profile profiles/slurm": (
        "",
        "needs a Slurm cluster with a GPU partition, which no test has: run by hand",
    ),
    "sudo apt-get install -y slurm-wlm munge": (
        "",
        "installs system packages: .ci/run installs them on every submission",
    ),
    "scripts/slurm-cluster.sh start": ("tests/test_slurm.py", "slurm_cluster"),
    "scripts/slurm-cluster.sh status": ("tests/test_slurm.py", "slurm_cluster"),
    "scripts/slurm-cluster.sh stop": (
        "tests/test_slurm.py",
        "test_stop_ends_what_ended_jobs_left_running",
    ),
    # The smoke preset on the test cluster: the test merges config/smoke.yaml into the copy's
    # config.yaml instead of passing --configfile, and polls every 2 s instead of 5.
    "SACBENCH_SLURM_STATUS_COMMAND=squeue SACBENCH_SLURM_STATUS_SECONDS=5"
    " snakemake --profile profiles/slurm --configfile config/smoke.yaml": (
        "tests/test_slurm.py",
        "test_smoke_workflow_runs_every_train_job_as_a_slurm_job",
    ),
}


def documentation_pages() -> list[Path]:
    """README.md and every page of docs/."""
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def readme_commands() -> list[str]:
    """Command lines of the bash blocks of README.md and docs/*.md: comments and `export` lines
    dropped."""
    text = "\n".join(page.read_text() for page in documentation_pages())
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            command = re.sub(r"(^|\s+)#.*$", "", line).strip()
            if command and not command.startswith("export "):
                commands.append(re.sub(r"\s+", " ", command))
    return commands


def test_every_readme_command_is_checked():
    commands = set(readme_commands())
    assert commands - set(CHECKED) == set(), "documented commands that no test runs"
    assert set(CHECKED) - commands == set(), "checked commands the docs no longer have"
    for command, (path, function) in CHECKED.items():
        if path:
            assert f"def {function}(" in (REPO / path).read_text(), f"{command}: {function} gone"


FENCED_BLOCK = re.compile(r"^ *```.*?^ *```", flags=re.DOTALL | re.MULTILINE)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def prose(page: Path) -> str:
    """A page's text without its code blocks, where a '#' or a bracket is code, not markdown."""
    return FENCED_BLOCK.sub("", page.read_text())


def headings(page: Path) -> list[str]:
    """The text of each of a page's headings, in order."""
    return re.findall(r"^#{1,6} +(.+?)\s*$", prose(page), flags=re.MULTILINE)


def heading_anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, every character but letters,
    digits, '_', '-' and spaces dropped, spaces as '-'; a repeated anchor gets -1, -2, ..."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    for heading in headings(page):
        anchor = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        repeats = seen.get(anchor, 0)
        seen[anchor] = repeats + 1
        anchors.add(anchor if repeats == 0 else f"{anchor}-{repeats}")
    return anchors


def broken_links(page: Path) -> list[str]:
    """The page's relative links (and images) whose file, or #anchor in it, does not exist."""
    broken = []
    for target in LINK.findall(INLINE_CODE.sub("", prose(page))):
        if re.match(r"[a-z]+:", target):  # https:, mailto:: not checked here
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{page.name}: {target} (no such file)")
        elif anchor and linked.suffix == ".md" and anchor not in heading_anchors(linked):
            broken.append(f"{page.name}: {target} (no such heading)")
    return broken


# `docs/PAGE.md, "Heading"` or `README, "Heading"`: how code, configs and pages point a reader at
# a section, in comments, help texts and error messages.
BINARY = {".png", ".svg", ".mp4", ".so", ".gif"}
# The dated log keeps the names sections had then; this file's own examples name none.
NOT_SCANNED = {"docs/performance-log.md", "tests/test_readme.py"}
SECTION_REFERENCE = re.compile(r'(README|docs/[\w-]+\.md),?\s+\(?"([^"]+)"')


def section_references(text: str) -> list[tuple[str, str]]:
    """(page, heading) of each section reference in a file's text; a reference may wrap across
    comment lines or sit in a Python string with escaped quotes."""
    text = re.sub(r"\s*\n\s*(#\s*)?", " ", text.replace("\\'", "'"))
    return [
        ("README.md" if page == "README" else page, heading)
        for page, heading in SECTION_REFERENCE.findall(text)
    ]


def test_section_references_are_found_across_wrapped_comments_and_strings():
    text = (
        '# no sweep (docs/performance.md, "Process\n# starts and exits")\n'
        "X = 'docs/variants.md, \"Benchmarking CleanRL\\'s own script\"'\n"
        '"""provenance (README,\n    "Tracking runs")"""'
    )
    assert section_references(text) == [
        ("docs/performance.md", "Process starts and exits"),
        ("docs/variants.md", "Benchmarking CleanRL's own script"),
        ("README.md", "Tracking runs"),
    ]


def test_every_section_that_code_and_pages_name_exists():
    """A help text, message or skip reason that sends a reader to a section that was renamed or
    moved is false."""
    tracked = subprocess.run(
        ["git", "ls-files", "sacbench", "workflow", "benchmarks", "scripts", "config", "profiles",
         "Snakefile", ".ci", "docs", "README.md", "tests"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    missing = []
    for name in tracked:
        path = REPO / name
        if name in NOT_SCANNED or path.is_symlink() or path.suffix in BINARY:
            continue
        for page, heading in section_references(path.read_text(errors="replace")):
            target = REPO / page
            # A reference may leave out a heading's parenthesis: "Extraction" for
            # "Extraction (`extract`)".
            named = headings(target) if target.exists() else set()
            if not any(h == heading or h.startswith(f"{heading} (") for h in named):
                missing.append(f'{name}: {page}, "{heading}"')
    assert not missing, "sections named that do not exist:\n" + "\n".join(missing)


def test_the_front_page_and_the_performance_page_stay_short():
    """The README is a front door (at most 250 lines); docs/performance.md says what is true now
    in at most 300 (the dated measurements go to docs/performance-log.md)."""
    lines = {
        name: len((REPO / name).read_text().splitlines())
        for name in ("README.md", "docs/performance.md")
    }
    assert lines["README.md"] <= 250 and lines["docs/performance.md"] <= 300, lines


def test_heading_anchors_are_githubs(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text(
        "# Tracking runs in Weights & Biases\n"
        "## The fused update (`--fused-update`, opt-in)\n"
        "```bash\n# a comment, not a heading\n```\n"
        "## Notes\n## Notes\n"
    )
    assert heading_anchors(page) == {
        "tracking-runs-in-weights--biases",
        "the-fused-update---fused-update-opt-in",
        "notes",
        "notes-1",
    }


def test_broken_links_finds_missing_files_and_headings(tmp_path: Path):
    (tmp_path / "other.md").write_text("# Other\n## Time limits\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#time-limits) [here](#page) ![img](other.md) [web](https://example.org)\n"
        "[gone](missing.md) [no heading](other.md#memory) `[code](missing.md)`\n"
        "# Page\n"
    )
    assert broken_links(page) == [
        "page.md: missing.md (no such file)",
        "page.md: other.md#memory (no such heading)",
    ]


def test_every_relative_link_resolves():
    broken = [link for page in documentation_pages() for link in broken_links(page)]
    assert not broken, "links that resolve to nothing:\n" + "\n".join(broken)


def verbatim(workdir: Path, command: str) -> subprocess.CompletedProcess[str]:
    result = run_verbatim(workdir, command)
    assert result.returncode == 0, f"{command}:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    return result


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> Path:
    return smoke_preset_run(tmp_path_factory)


def test_smoke_preset_builds_every_table_and_plot(smoke: Path):
    results = smoke / "results" / "smoke"
    for name in ("sac_runtimes.md", "sac.md", "sac_aggregate.md", "plots/sac.png",
                 "plots/sac-eval.png"):  # fmt: skip
        assert (results / name).stat().st_size > 0, name
    runs = sorted(results.glob("runs/sac_continuous_action/*/1/complete.json"))
    assert len(runs) == 6
    # The final-evaluation column has a value (3 episodes) for every task.
    returns = pd.read_csv(results / "sac.csv")
    evaluated = returns[returns.variant == "sac_continuous_action"]
    assert len(evaluated) == 6 and (evaluated.eval_episodes_min == 3).all()
    assert evaluated.eval_return_mean.notna().all()
    # One video: InvertedPendulum-v4's final evaluation, filmed in its run.
    videos = sorted(path.relative_to(results) for path in results.glob("videos/**/*.*"))
    assert [str(path) for path in videos] == [
        "videos/sac_continuous_action/InvertedPendulum-v4.html",
        "videos/sac_continuous_action/InvertedPendulum-v4.mp4",
    ]
    filmed = results / "runs" / "sac_continuous_action" / "InvertedPendulum-v4" / "1"
    assert (results / videos[1]).read_bytes() == (filmed / "videos" / "final.mp4").read_bytes()


def test_status_after_the_smoke_preset_shows_six_finished_runs(smoke: Path):
    output = verbatim(smoke, "python -m sacbench.status --configfile config/smoke.yaml").stdout
    rows = [line for line in output.splitlines() if "sac_continuous_action" in line]
    assert len(rows) == 6 and all(" done " in f" {row} " for row in rows), output


def test_report_after_the_smoke_preset(smoke: Path):
    verbatim(smoke, f"{SMOKE} --report results/smoke/report.html")
    report = (smoke / "results" / "smoke" / "report.html").read_text(errors="replace")
    assert "sac_runtimes.md" in report and "sac.png" in report and "sac-eval.png" in report
    assert "InvertedPendulum-v4.html" in report and "Videos" in report


def test_status_watch_reprints_until_interrupted(tmp_path: Path):
    workdir = default_config_copy(tmp_path)
    process = subprocess.Popen(
        ["python", "-m", "sacbench.status", "--watch", "60"],
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=venv_environment(),
        preexec_fn=interruptible,
    )
    assert process.stdout is not None
    printed = []
    # Interrupt once the first table is out, however slowly a loaded machine starts Python.
    for line in process.stdout:
        printed.append(line)
        if line.startswith("total:"):
            break
    process.send_signal(signal.SIGINT)
    rest, stderr = process.communicate(timeout=30)
    stdout = "".join(printed) + rest
    assert process.returncode == 0, stderr
    rows = [line for line in stdout.splitlines() if "sac_continuous_action" in line]
    assert len(rows) == 18 and all("pending" in row for row in rows), stdout


def test_tensorboard_serves_the_runs(tmp_path: Path):
    workdir = default_config_copy(tmp_path)
    (workdir / "results" / "runs").mkdir(parents=True)
    process = subprocess.Popen(
        ["tensorboard", "--logdir", "results/runs"],
        cwd=workdir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=venv_environment(),
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen("http://localhost:6006/", timeout=2) as response:
                    assert response.status == 200
                    break
            except OSError:
                assert process.poll() is None, "tensorboard exited"
                assert time.monotonic() < deadline, "tensorboard did not answer on port 6006"
                time.sleep(1)
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_dry_run_lists_the_full_benchmark(tmp_path: Path):
    workdir = default_config_copy(tmp_path)
    output = verbatim(workdir, "snakemake -n").stdout
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", output, flags=re.MULTILINE))
    assert counts["train"] == "18" and counts["extract"] == "18", output[-2000:]


def test_one_run_then_the_benchmark_then_its_report(tmp_path: Path):
    config = {
        "env_ids": ["Hopper-v4"],
        "seeds": [1],
        "train": {"total_timesteps": 500, "learning_starts": 100, "batch_size": 32,
                  "buffer_size": 500, "checkpoint_interval": 250},
    }  # fmt: skip
    workdir = workflow_copy(tmp_path, config)

    verbatim(workdir, f"snakemake {HOPPER_RUN}")
    assert (workdir / HOPPER_RUN).is_file()
    assert not (workdir / "results" / "sac.md").exists()

    verbatim(workdir, "snakemake --cores 18")
    assert (workdir / "results" / "sac.md").is_file()

    verbatim(workdir, "snakemake --report results/report.html")
    assert (workdir / "results" / "report.html").stat().st_size > 0


def test_trainer_command_starts_and_stops_cleanly(tmp_path: Path):
    """The README's trainer command trains 1M steps; started here, it must get going, and stop
    on SIGTERM with a checkpoint to resume from."""
    returncode, output = stop_once_it_prints(
        ["python", "-m", "sacbench.train", "--env-id", "Hopper-v4", "--seed", "1", "--run-dir",
         "runs/hopper-1"],
        line_prefix="global_step=",
        cwd=tmp_path,
        env=venv_environment(),
    )  # fmt: skip
    assert returncode == 128 + signal.SIGTERM, output
    assert (tmp_path / "runs" / "hopper-1" / "checkpoint" / "state.pt").is_file()
    assert "rerun to resume" in output


def test_evaluated_run_films_its_evaluations(tmp_path: Path):
    """The README's evaluated run trains 20,000 steps; started here, it must evaluate and film
    after its first 5,000 steps, then stop on SIGTERM with that evaluation kept."""
    returncode, output = stop_once_it_prints(
        shlex.split(EVALUATED_RUN),
        line_prefix="evaluation after 5000 steps",
        cwd=tmp_path,
        env=venv_environment(),
    )
    assert returncode == 128 + signal.SIGTERM, output
    run_dir = tmp_path / "runs" / "pendulum-1"
    scalars = read_run_scalars(run_dir)
    returns = scalars[scalars.tag == "eval/episodic_return"]
    assert list(returns.step) == [5000] * 10
    with imageio.get_reader(run_dir / "videos" / "step-5000.mp4", "ffmpeg") as reader:
        assert sum(1 for _ in reader) > 1


def test_evaluate_command_replays_the_final_evaluation(tmp_path: Path):
    run_dir = tmp_path / "runs" / "pendulum-1"
    assert train_in_process(run_dir, "--env-id", "InvertedPendulum-v4", "--total-timesteps",
                            "1200", "--learning-starts", "1000", "--batch-size", "64",
                            "--save-model") == 0  # fmt: skip

    printed = verbatim(tmp_path, EVALUATE).stdout

    scalars = read_run_scalars(run_dir)
    final = scalars[scalars.tag == "eval/episodic_return"].value.tolist()
    episodes = [line for line in printed.splitlines() if line.startswith("episode ")]
    returns = [float(line.split("return ")[1].split(",")[0]) for line in episodes]
    assert returns == pytest.approx(final, abs=1e-3) and len(returns) == 10
    assert (run_dir / "videos" / "evaluate-seed1.mp4").stat().st_size > 0


def test_v5_tasks_preset_trains_tasks_pr424_did_not_run(tmp_path: Path):
    """The README's command as written, over a config.yaml with a tiny budget that still reaches
    the update and finishes an episode (HalfCheetah's last 1,000 steps)."""
    config = {
        "seeds": [1],
        # One evaluation episode, not ten: HalfCheetah's and Ant's last up to 1,000 steps each.
        "train": {"total_timesteps": 1300, "learning_starts": 1000, "batch_size": 64,
                  "buffer_size": 1300, "checkpoint_interval": 0, "eval_episodes": 1},
    }  # fmt: skip
    workdir = workflow_copy(tmp_path, config)
    verbatim(workdir, V5_TASKS)
    results = workdir / "results" / "v5-tasks"
    for env_id in ("HalfCheetah-v5", "Ant-v5"):
        extracted = (results / "extracted" / "sac_continuous_action" / env_id / "1.csv").read_text()
        assert "losses/qf1_loss," in extracted, env_id  # the update ran
    returns = (results / "sac.md").read_text()
    for env_id in ("HalfCheetah-v5", "Ant-v5"):
        row = next(line for line in returns.splitlines() if line.startswith(f"| {env_id} |"))
        published = re.fullmatch(r".*\| \u2013 (\[\d+\]) \|", row)
        assert published, row
        assert f"- {published.group(1)} \u2013: no published pr-424 number" in returns
    aggregate = (results / "sac_aggregate.md").read_text()
    assert "Left out: HalfCheetah-v5, Ant-v5." in aggregate
    assert not (workdir / "results" / "sac.md").exists()  # the benchmark's folder is untouched
