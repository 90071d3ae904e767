"""The committed benchmark scripts run end to end (tiny budgets: they must work, not be fast)."""

from __future__ import annotations

import re

import pytest

from benchmarks import batched_seeds, profile_step, update_throughput


def test_update_throughput_compares_all_three_paths_against_the_reference(capsys):
    status = update_throughput.main(
        [
            "--envs",
            "Hopper-v4",
            "--batch-size",
            "16",
            "--rounds",
            "2",
            "--updates",
            "3",
            "--warmup",
            "1",
        ]  # fmt: skip
    )
    assert status == 0
    table = capsys.readouterr().out
    rows = {
        cells[2]: cells
        for line in table.splitlines()
        if line.startswith("| Hopper-v4")
        for cells in [[cell.strip() for cell in line.strip("|").split("|")]]
    }
    assert set(rows) == {"reference", "fast-autograd", "fast"}
    for cells in rows.values():
        assert float(cells[3]) > 0 and float(cells[5]) > 0


def test_ratio_is_the_median_of_per_round_ratios():
    # Per-round ratios 2, 1.5 and 3: their median is 2; their mean would be 2.17 and the ratio
    # of the medians 1.5.
    assert update_throughput.median_ratio([2.0, 3.0, 12.0], [1.0, 2.0, 4.0]) == 2.0
    assert update_throughput.median_ratio([5.0], [2.0]) == 2.5
    with pytest.raises(ValueError):  # rounds are paired: a missing one is an error, not a skip
        update_throughput.median_ratio([1.0, 2.0], [1.0])


def test_profile_step_times_the_stages_of_the_handwritten_update(capsys):
    assert profile_step.main(["--env", "Hopper-v4", "--batch-size", "16", "--updates", "4"]) == 0
    out = capsys.readouterr().out
    # tabulate aligns the decimal points, so a value may be followed by more than one space.
    stages = dict(re.findall(r"^\| (\w[\w ]+?) +\| +([\d.]+) +\|", out, flags=re.MULTILINE))
    for stage in ("critic_loss_gradients", "min_critic_action_gradient", "policy_gradients",
                  "adam_step", "whole update"):  # fmt: skip
        assert float(stages.get(stage, 0)) > 0, f"{stage} missing or zero in:\n{out}"
    assert "GEMM" in out and "handwritten gradients" in out


def test_update_throughput_against_another_tree_times_both_in_workers(capsys):
    # The same tree on both sides: the workers run identical code on identical batches and draws,
    # so their parameters must agree exactly, whatever the timings.
    tree = str(update_throughput.THIS_TREE)
    status = update_throughput.main(
        [
            "--envs",
            "Hopper-v4",
            "--batch-size",
            "16",
            "--rounds",
            "2",
            "--updates",
            "3",
            "--warmup",
            "1",
            "--against",
            tree,
        ]  # fmt: skip
    )
    assert status == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| Hopper-v4")]
    assert len(rows) == 2 and all("(fast)" in row for row in rows)
    assert float(rows[1].strip("|").split("|")[5]) == 1.0  # the baseline against itself
    assert f"{tree}/sacbench/__init__.py vs {tree}/sacbench/__init__.py" in out
    assert "after 1 warmup updates differ by at most 0.00e+00" in out


def test_update_throughput_against_a_directory_without_sacbench_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        update_throughput.main(["--against", str(tmp_path)])
    assert f"--against {tmp_path}: no sacbench package there" in capsys.readouterr().err


def test_batched_seeds_times_both_sides_for_each_seed_count(capsys):
    status = batched_seeds.main(
        ["--envs", "Hopper-v4", "--seeds", "1", "3", "--batch-size", "16", "--rounds", "2",
         "--updates", "2", "--warmup", "1"]
    )  # fmt: skip
    assert status == 0
    out = capsys.readouterr().out
    rows = {
        cells[2]: cells
        for line in out.splitlines()
        if line.startswith("| Hopper-v4")
        for cells in [[cell.strip() for cell in line.strip("|").split("|")]]
    }
    assert set(rows) == {f"{side} x{count}" for side in ("fast alone", "fast-autograd alone")
                         for count in (1, 3)} | {"batched (S=1)", "batched (S=3)"}  # fmt: skip
    for cells in rows.values():
        assert float(cells[3]) > 0 and float(cells[4]) > 0
    for count in (1, 3):
        assert all(float(ratio) > 0 for ratio in rows[f"batched (S={count})"][5:9])
    assert "load average before/after" in out


def test_batched_seeds_rejects_a_seed_count_below_one(capsys):
    with pytest.raises(SystemExit):
        batched_seeds.main(["--seeds", "2", "0"])
    assert "--seeds: each S must be at least 1, got [0]" in capsys.readouterr().err
