"""Compare result tables made before and after the restructure.

Mode A, same inputs, both renderers (must be byte-identical, provenance included):
    python compare_tables.py render --old OLD_TREE --new NEW_TREE \
        --extracted results/smoke/extracted --variants sac_continuous_action \
        --env-ids HalfCheetah-v4 ... --seeds 1 [--allow OLD=>NEW]
Mode B, two whole smoke pipelines (old and new code, each trained from scratch):
    python compare_tables.py results --old OLD/results/smoke --new NEW/results/smoke \
        [--allow OLD=>NEW]
  sac.md/.csv and sac_aggregate.md/.csv must be identical except the provenance `| sacbench |`
  row; in sac_runtimes.md every number in a clock-derived section is masked, in sac_runtimes.csv
  the clock-derived columns are dropped; everything else must be identical.
--allow lists deliberate text changes (e.g. the published-numbers CLI's new name), applied to
the OLD text before comparing.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

TABLES = {"runtimes": "sac_runtimes", "returns": "sac", "aggregate": "sac_aggregate"}
CLOCK_SECTIONS = (
    "## CleanRL SPS",
    "## Steady training SPS",
    "## Wall-clock minutes",
    "## openrlbenchmark-compatible minutes",
    "## Projected minutes",
)
CLOCK_COLUMNS = re.compile(
    r"^(cleanrl_sps|steady_sps|wall_clock_minutes|openrlbenchmark_minutes|"
    r"implied_sps|projected_minutes_per_1m)"
)
NUMBER = re.compile(r"-?[\d,]+\.\d+( s)?")


def allowed(text: str, allow: list[str]) -> str:
    for rule in allow:
        old, new = rule.split("=>", 1)
        text = text.replace(old, new)
    return text


def without_version_row(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.startswith("| sacbench |"))


def mask_clock(text: str) -> str:
    lines, masking = [], False
    for line in text.splitlines():
        if line.startswith("## "):
            masking = line.startswith(CLOCK_SECTIONS)
        lines.append(NUMBER.sub("#", line) if masking and line.startswith("| ") else line)
    return "\n".join(lines)


def report(name: str, old: str, new: str) -> bool:
    if old == new:
        print(f"identical: {name}")
        return True
    print(f"DIFFERS: {name}")
    sys.stdout.writelines(
        difflib.unified_diff(old.splitlines(True), new.splitlines(True), "old", "new", n=1)
    )
    return False


def compare_results(old: Path, new: Path, allow: list[str]) -> bool:
    ok = True
    for stem in ("sac", "sac_aggregate"):
        ok &= report(
            f"{stem}.md",
            without_version_row(allowed((old / f"{stem}.md").read_text(), allow)),
            without_version_row((new / f"{stem}.md").read_text()),
        )
        ok &= report(
            f"{stem}.csv", (old / f"{stem}.csv").read_text(), (new / f"{stem}.csv").read_text()
        )
    ok &= report(
        "sac_runtimes.md (clock masked)",
        mask_clock(without_version_row(allowed((old / "sac_runtimes.md").read_text(), allow))),
        mask_clock(without_version_row((new / "sac_runtimes.md").read_text())),
    )
    frames = [pd.read_csv(path / "sac_runtimes.csv") for path in (old, new)]
    frames = [f.drop(columns=[c for c in f.columns if CLOCK_COLUMNS.match(c)]) for f in frames]
    ok &= report(
        "sac_runtimes.csv (clock columns dropped)",
        frames[0].to_csv(index=False),
        frames[1].to_csv(index=False),
    )
    return ok


def render(tree: Path, out: Path, selection: list[str]) -> None:
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONWARNINGS": "ignore"}
    for command, stem in TABLES.items():
        subprocess.run(
            [
                sys.executable,
                "-m",
                "sacbench.report",
                command,
                *selection,
                "--md",
                str(out / f"{stem}.md"),
                "--csv",
                str(out / f"{stem}.csv"),
            ],
            check=True,
            env=env,
            cwd=tree,
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["render", "results"])
    parser.add_argument("--old", type=Path, required=True)
    parser.add_argument("--new", type=Path, required=True)
    parser.add_argument("--allow", action="append", default=[])
    parser.add_argument("--extracted", type=Path)
    parser.add_argument("--variants", nargs="+")
    parser.add_argument("--env-ids", nargs="+")
    parser.add_argument("--seeds", nargs="+")
    options = parser.parse_args()
    if options.mode == "results":
        sys.exit(0 if compare_results(options.old, options.new, options.allow) else 1)
    selection = [
        "--extracted-dir",
        str(options.extracted.resolve()),
        "--variants",
        *options.variants,
        "--env-ids",
        *options.env_ids,
        "--seeds",
        *options.seeds,
    ]
    with tempfile.TemporaryDirectory() as scratch:
        old_out, new_out = Path(scratch, "old"), Path(scratch, "new")
        old_out.mkdir()
        new_out.mkdir()
        render(options.old.resolve(), old_out, selection)
        render(options.new.resolve(), new_out, selection)
        ok = True
        for stem in TABLES.values():
            for suffix in (".md", ".csv"):
                name = stem + suffix
                ok &= report(
                    name,
                    allowed((old_out / name).read_text(), options.allow),
                    (new_out / name).read_text(),
                )
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
