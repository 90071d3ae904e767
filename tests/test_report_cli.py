"""The CLI the pipeline calls: extract, runtimes, returns, aggregate, plots."""

from __future__ import annotations

import json
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pandas.testing as pdt
import pytest
from synthetic_runs import (
    GOLDEN_ENV_IDS,
    GOLDEN_SEEDS,
    GOLDEN_VARIANTS,
    SyntheticRun,
    write_extracted,
    write_golden_set,
    write_run_dir,
)

from sacbench.results.cli import main
from sacbench.results.runs import read_extracted_csv


@pytest.fixture(scope="module")
def extracted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_golden_set(tmp_path_factory.mktemp("cli"))


def selection_flags(extracted: Path) -> list[str]:
    return [
        "--extracted-dir", str(extracted),
        "--variants", *GOLDEN_VARIANTS,
        "--env-ids", *GOLDEN_ENV_IDS,
        "--seeds", *map(str, GOLDEN_SEEDS),
    ]  # fmt: skip


def test_extract_writes_the_scalar_table_and_the_run_summary(tmp_path: Path) -> None:
    run = SyntheticRun(resume_at=(1200,))
    run_dir = write_run_dir(tmp_path / "run", run)
    output = tmp_path / "out" / "1.csv"
    completed = subprocess.run(
        [sys.executable, "-m", "sacbench.report", "extract", "--run-dir", str(run_dir),
         "--output", str(output)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    # Every float comes back bit for bit.
    pdt.assert_frame_equal(read_extracted_csv(output), run.expected_frame())
    summary = json.loads(output.with_suffix(".json").read_text())
    metadata = json.loads((run_dir / "metadata.json").read_text())
    complete = json.loads((run_dir / "complete.json").read_text())
    assert {key: summary[key] for key in metadata} == metadata
    assert {key: summary[key] for key in complete} == complete
    assert len(summary["extraction"]["event_files"]) == 2
    assert summary["extraction"]["scalar_points"] == len(run.expected_frame())
    assert sorted(p.name for p in output.parent.iterdir()) == ["1.csv", "1.json"]  # no temp left


def test_extract_carries_the_evaluations_into_csv_and_json(tmp_path: Path) -> None:
    run = SyntheticRun(eval_frequency=1000, eval_episodes=4)
    run_dir = write_run_dir(tmp_path / "run", run)
    output = tmp_path / "out" / "1.csv"
    assert main(["extract", "--run-dir", str(run_dir), "--output", str(output)]) == 0
    scalars = read_extracted_csv(output)
    pdt.assert_frame_equal(scalars, run.expected_frame())
    for tag in ("eval/episodic_return", "eval/episodic_length"):
        assert scalars[scalars.tag == tag].step.tolist() == [1000] * 4 + [2000] * 4
    summary = json.loads(output.with_suffix(".json").read_text())
    assert summary["extraction"]["evaluations"] == [
        {"step": step, "episodes": 4, "mean_return": 100.0 + 0.1 * step + 10.0}
        for step in (1000, 2000)
    ]
    assert summary["args"]["eval_episodes"] == 4


def test_extract_errors_name_the_file_and_keep_good_outputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = write_run_dir(tmp_path / "run", SyntheticRun())
    output = tmp_path / "1.csv"
    assert main(["extract", "--run-dir", str(run_dir), "--output", str(output)]) == 0
    good = output.read_text()
    (run_dir / "complete.json").unlink()
    assert main(["extract", "--run-dir", str(run_dir), "--output", str(output)]) == 1
    assert f"{run_dir / 'complete.json'} not found" in capsys.readouterr().err
    (run_dir / "complete.json").write_text(json.dumps(SyntheticRun().complete()))
    event_file = next(run_dir.glob("*tfevents*"))
    event_file.write_bytes(event_file.read_bytes()[:-3])
    assert main(["extract", "--run-dir", str(run_dir), "--output", str(output)]) == 1
    assert f"{event_file}: truncated record" in capsys.readouterr().err
    assert output.read_text() == good


def test_extract_with_tensorboards_accumulator_gives_the_same_csv(tmp_path: Path) -> None:
    run_dir = write_run_dir(tmp_path / "run", SyntheticRun(resume_at=(900,)))
    for reader in ("records", "event-accumulator"):
        out = tmp_path / reader / "1.csv"
        assert (
            main(["extract", "--run-dir", str(run_dir), "--output", str(out), "--reader", reader])
            == 0
        )
    assert (tmp_path / "records" / "1.csv").read_text() == (
        tmp_path / "event-accumulator" / "1.csv"
    ).read_text()


def markdown_cells(markdown: str) -> list[list[str]]:
    """Every row of every pipe table in ``markdown`` as its text shows (no code or bold marks),
    header rows included, rule rows not."""
    rows = []
    for line in markdown.splitlines():
        if line.startswith("| ") and not line.startswith("| ---"):
            cells = line.strip("|").split(" | ")
            rows.append([cell.strip().replace("`", "").replace("**", "") for cell in cells])
    return rows


class _CellParser(HTMLParser):
    """The text of each <th>/<td>, row by row."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def html_cells(page: str) -> list[list[str]]:
    parser = _CellParser()
    parser.feed(page)
    return parser.rows


def test_table_commands_write_an_html_page_with_every_cell(extracted: Path, tmp_path: Path) -> None:
    flags = selection_flags(extracted)
    for command, stem in (
        ("runtimes", "sac_runtimes"),
        ("returns", "sac"),
        ("aggregate", "sac_aggregate"),
    ):
        md, csv, page = (tmp_path / f"{stem}.{ext}" for ext in ("md", "csv", "html"))
        assert main([command, *flags, "--md", str(md), "--csv", str(csv), "--html", str(page)]) == 0
        golden = (Path(__file__).parent / "golden" / f"{stem}.md").read_text()
        assert md.read_text() == golden  # the page changes nothing else
        text = page.read_text()
        assert html_cells(text) == markdown_cells(golden)
        assert len(html_cells(text)) > 10
        title = golden.splitlines()[0].removeprefix("# ")
        assert f"<title>{title}</title>" in text and f"<h1>{title}</h1>" in text
        assert "<h2>Provenance</h2>" in text and "Definitions and units" in text


def test_table_commands_write_markdown_and_csv(extracted: Path, tmp_path: Path) -> None:
    flags = selection_flags(extracted)
    for command, stem in (
        ("runtimes", "sac_runtimes"),
        ("returns", "sac"),
        ("aggregate", "sac_aggregate"),
    ):
        md, csv = tmp_path / f"{stem}.md", tmp_path / f"{stem}.csv"
        assert main([command, *flags, "--md", str(md), "--csv", str(csv)]) == 0
        golden = Path(__file__).parent / "golden"
        assert md.read_text() == (golden / f"{stem}.md").read_text()
        assert csv.read_text() == (golden / f"{stem}.csv").read_text()


def test_plots_command_writes_png_and_svg(extracted: Path, tmp_path: Path) -> None:
    out = tmp_path / "plots"
    assert main(["plots", *selection_flags(extracted), "--out-dir", str(out)]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(
        f"{stem}.{ext}"
        for stem in ("sac", "sac-time", "sac-sps", "sac-eval", "sac-aggregate", "sac-profile")
        for ext in ("png", "svg")
    )
    assert (out / "sac.png").read_bytes().startswith(b"\x89PNG")
    assert (out / "sac-profile.png").read_bytes().startswith(b"\x89PNG")
    first = {name: (out / name).read_bytes() for name in ("sac.svg", "sac-aggregate.svg")}
    assert main(["plots", *selection_flags(extracted), "--out-dir", str(out)]) == 0
    for name, content in first.items():
        assert (out / name).read_bytes() == content, name  # reruns are byte-identical


def test_the_evaluation_figure_is_drawn_only_from_runs_that_evaluated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import matplotlib.image

    from sacbench.results import cli, plots

    assert tuple(plots.FIGURES) == cli.FIGURE_NAMES
    extracted = tmp_path / "extracted"
    for variant, run in (("a", SyntheticRun(seed=1)), ("b", SyntheticRun(seed=1))):
        write_extracted(extracted, tmp_path / "runs", run, variant=variant)
    flags = ["--extracted-dir", str(extracted), "--variants", "a", "b"]
    flags += ["--env-ids", "Hopper-v4", "--seeds", "1"]
    # No evaluations: by default the figure is left out; asked for, it is an error.
    assert main(["plots", *flags, "--out-dir", str(tmp_path / "all")]) == 0
    assert sorted(p.stem for p in (tmp_path / "all").glob("*.png")) == [
        "sac",
        "sac-aggregate",
        "sac-profile",
        "sac-sps",
        "sac-time",
    ]
    assert (
        main(["plots", *flags, "--out-dir", str(tmp_path / "eval"), "--figures", "sac-eval"]) == 1
    )
    assert "--figures sac-eval: none of the runs logged" in capsys.readouterr().err
    assert not (tmp_path / "eval").exists()
    # One variant evaluated: only the evaluation figure, a real rendered image with its curve.
    write_extracted(extracted, tmp_path / "rerun", SyntheticRun(seed=1, eval_frequency=500,
                    eval_episodes=3), variant="b")  # fmt: skip
    assert (
        main(["plots", *flags, "--out-dir", str(tmp_path / "eval"), "--figures", "sac-eval"]) == 0
    )
    assert sorted(p.name for p in (tmp_path / "eval").iterdir()) == ["sac-eval.png", "sac-eval.svg"]
    image = matplotlib.image.imread(tmp_path / "eval" / "sac-eval.png")
    assert image.ndim == 3 and min(image.shape[:2]) > 200
    assert len(np.unique(image.reshape(-1, image.shape[2]), axis=0)) > 20  # not a blank canvas
    svg = (tmp_path / "eval" / "sac-eval.svg").read_text()
    assert 'id="eval:b"' in svg and 'id="eval:a"' not in svg


def test_a_failed_table_never_replaces_a_good_one(
    extracted: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    md, csv = tmp_path / "sac.md", tmp_path / "sac.csv"
    flags = selection_flags(extracted)
    assert main(["returns", *flags, "--md", str(md), "--csv", str(csv)]) == 0
    good = md.read_text(), csv.read_text()
    more_seeds = [*flags, "4"]  # a seed no variant has
    assert main(["returns", *more_seeds, "--md", str(md), "--csv", str(csv)]) == 1
    error = capsys.readouterr().err
    assert "fast/Hopper-v4/seed 4" in error and "4.csv not found" in error
    assert (md.read_text(), csv.read_text()) == good
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sac.csv", "sac.md"]


def test_allow_missing_turns_missing_seeds_into_footnotes(extracted: Path, tmp_path: Path) -> None:
    md, csv = tmp_path / "sac_runtimes.md", tmp_path / "sac_runtimes.csv"
    flags = [*selection_flags(extracted), "4", "--allow-missing"]
    assert main(["runtimes", *flags, "--md", str(md), "--csv", str(csv)]) == 0
    assert "3 of 4 requested seeds" in md.read_text()
    table = pd.read_csv(csv)
    assert set(table[table.variant != "pr-424"].n_seeds) == {3}
    assert set(table[table.variant != "pr-424"].seeds_requested) == {4}


# aggregate takes the same statistics flags as returns; there --last-episodes 0 used to average
# every episode (pandas' iloc[-0:]) instead of failing.
@pytest.mark.parametrize("command", ["returns", "aggregate"])
@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--bootstrap-resamples", "100"], "at least 2000"),
        (["--last-episodes", "0"], "--last-episodes must be positive"),
    ],
)
def test_bad_arguments_are_rejected_before_any_work(
    extracted: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    command: str,
    arguments: list[str],
    message: str,
) -> None:
    md = tmp_path / "sac.md"
    assert main([command, *selection_flags(extracted), "--md", str(md), "--csv",
                 str(tmp_path / "sac.csv"), *arguments]) == 1  # fmt: skip
    assert message in capsys.readouterr().err
    assert not md.exists()


def test_wrong_output_suffix_is_rejected(extracted: Path, tmp_path: Path, capsys) -> None:
    assert main(["runtimes", *selection_flags(extracted), "--md", str(tmp_path / "x.txt"),
                 "--csv", str(tmp_path / "x.csv")]) == 1  # fmt: skip
    assert "--md must end in .md" in capsys.readouterr().err


def test_the_aggregate_figures_need_a_task_pr_424_ran(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    extracted = tmp_path / "extracted"
    write_extracted(extracted, tmp_path / "runs", SyntheticRun(env_id="Ant-v5"), variant="a")
    flags = ["--extracted-dir", str(extracted), "--variants", "a", "--env-ids", "Ant-v5"]
    flags += ["--seeds", "1"]
    out = tmp_path / "profile"
    assert main(["plots", *flags, "--out-dir", str(out), "--figures", "sac-profile"]) == 1
    assert "--figures sac-profile: no selected task has a published pr-424 return" in (
        capsys.readouterr().err
    )
    assert not out.exists()
