"""The committed benchmark scripts run end to end (tiny budgets: they must work, not be fast)."""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import tyro

from benchmarks import (
    batched_seeds,
    bf16_matmul,
    fused_sections,
    learning_sanity,
    levers,
    profile_step,
    shared_device_sps,
    step_parts,
    thin_products,
    train_sps,
    update_throughput,
)
from benchmarks.train_sps import shared_window_rates
from sacbench.sac.args import Args, validate_args
from tests import cleanrl_style

# Settings that only check the timing scripts work: tiny batches, two rounds of three updates.
TINY_UPDATE_TIMING = [
    "--envs", "Hopper-v4", "--batch-size", "16", "--rounds", "2", "--updates", "3", "--warmup", "1",
]  # fmt: skip


def hopper_rows(output: str) -> dict[str, list[str]]:
    """The Hopper-v4 rows of a printed table, as their cells, keyed by the third (the path)."""
    return {
        cells[2]: cells
        for line in output.splitlines()
        if line.startswith("| Hopper-v4")
        for cells in [[cell.strip() for cell in line.strip("|").split("|")]]
    }


def test_update_throughput_compares_all_three_paths_against_the_reference(capsys):
    status = update_throughput.main(TINY_UPDATE_TIMING)
    assert status == 0
    table = capsys.readouterr().out
    rows = hopper_rows(table)
    assert set(rows) == {"reference", "fast-autograd", "fast"}
    for cells in rows.values():
        assert float(cells[3]) > 0 and float(cells[5]) > 0


def test_update_throughput_bf16_adds_both_formulations_in_bfloat16(capsys):
    assert update_throughput.main([*TINY_UPDATE_TIMING, "--bf16"]) == 0
    rows = hopper_rows(capsys.readouterr().out)
    assert set(rows) == {"reference", "fast-autograd", "fast", "fast-bf16", "fast-autograd-bf16"}
    assert all(float(cells[5]) > 0 for cells in rows.values())


def test_update_throughput_fused_adds_the_cpp_update_in_each_precision(capsys):
    assert update_throughput.main([*TINY_UPDATE_TIMING, "--fused"]) == 0
    rows = hopper_rows(capsys.readouterr().out)
    assert set(rows) == {"reference", "fast-autograd", "fast", "fast-fused"}
    assert update_throughput.main([*TINY_UPDATE_TIMING, "--fused", "--bf16"]) == 0
    rows = hopper_rows(capsys.readouterr().out)
    assert set(rows) == {"reference", "fast-autograd", "fast", "fast-fused", "fast-bf16",
                         "fast-autograd-bf16", "fast-fused-bf16"}  # fmt: skip
    assert all(float(cells[5]) > 0 for cells in rows.values())


def test_ratio_is_the_median_of_per_round_ratios():
    # Per-round ratios 2, 1.5 and 3: their median is 2; their mean would be 2.17 and the ratio
    # of the medians 1.5.
    assert update_throughput.median_ratio([2.0, 3.0, 12.0], [1.0, 2.0, 4.0]) == 2.0
    assert update_throughput.median_ratio([5.0], [2.0]) == 2.5
    with pytest.raises(ValueError):  # rounds are paired: a missing one is an error, not a skip
        update_throughput.median_ratio([1.0, 2.0], [1.0])


def test_profile_step_times_the_stages_of_the_handwritten_update(capsys):
    argv = ["--env", "Hopper-v4", "--batch-size", "16", "--updates", "4", "--warmup", "2"]
    assert profile_step.main(argv) == 0
    out = capsys.readouterr().out
    # tabulate aligns the decimal points, so a value may be followed by more than one space.
    stages = dict(re.findall(r"^\| (\w[\w ]+?) +\| +([\d.]+) +\|", out, flags=re.MULTILINE))
    for stage in ("critic_loss_gradients", "min_critic_action_gradient", "policy_gradients",
                  "adam_step", "whole update"):  # fmt: skip
        assert float(stages.get(stage, 0)) > 0, f"{stage} missing or zero in:\n{out}"
    assert "GEMM" in out and "handwritten gradients" in out
    bound = re.search(r"the update takes ([\d.]+) ms; with its products skipped ([\d.]+) ms", out)
    assert bound is not None, out
    assert float(bound[2]) > 0, out
    product_row = r"^\| (mm|bmm|addmm|baddbmm) +\| [\dx ]+\| +([\d.]+) +\| +(\d+) +\| +(\d+) +\|"
    timed = re.findall(product_row, out, re.MULTILINE)
    assert {"mm", "bmm", "addmm", "baddbmm"} <= {name for name, *_ in timed}, out
    assert all(float(calls) > 0 and int(alone) >= 0 for _, calls, _, alone in timed), out
    against = re.search(
        r"Against the reference update \(([\d.]+) ms .*\): now ([\d.]+)x; 2.5x needs ([\d.]+) ms",
        out,
    )
    assert against is not None, out
    # Both printed to 0.01: the reference's rounding moves its fifth by 0.002, the printed
    # fifth's own by 0.005 (16.2149 ms prints as 16.21, and its fifth, 6.486, as 6.49).
    assert float(against[3]) == pytest.approx(float(against[1]) / 2.5, abs=0.0071), out
    assert float(against[2]) == pytest.approx(float(against[1]) / float(bound[1]), rel=0.01), out


def test_bound_line_gives_the_ratio_now_what_2_5x_needs_and_both_ceilings():
    line = profile_step.bound_line(20.0, 10.0, 8.0, 6.0)
    assert "now 2.00x; 2.5x needs 8.00 ms" in line
    assert "2.50x at the products' rate here, 3.33x at the lone matmul's" in line
    assert "no bound to give" in profile_step.bound_line(20.0, 10.0, 0.0, 6.0)


def test_profile_step_bf16_compares_the_products_with_a_bfloat16_matmul(capsys):
    argv = ["--env", "Hopper-v4", "--batch-size", "64", "--updates", "2", "--warmup", "2",
            "--precision", "bf16"]  # fmt: skip
    assert profile_step.main(argv) == 0
    out = capsys.readouterr().out
    assert "--precision bf16" in out and "a bfloat16 one at" in out


def test_profile_step_splits_the_fused_update_into_products_and_the_rest(capsys):
    argv = ["--env", "Hopper-v4", "--batch-size", "64", "--updates", "4", "--warmup", "2",
            "--gradients", "fused"]  # fmt: skip
    assert profile_step.main(argv) == 0
    out = capsys.readouterr().out
    assert "fused gradients" in out, out
    gemm = re.search(r"^\| GEMM +\| +([\d.]+) +\| +\d+% +\| (\d+) MFLOP at", out, re.MULTILINE)
    assert gemm is not None and float(gemm[1]) > 0 and int(gemm[2]) > 0, out
    assert "Stages of the hand-written update" not in out  # those stages are Python functions


def test_bf16_matmul_prints_both_rates_their_ratio_and_the_cpus_bf16_units(capsys):
    assert bf16_matmul.main(["--rounds", "1"]) == 0
    out = capsys.readouterr().out
    rates = dict(re.findall(r"^\| (float32|bfloat16) +\| +(\d+) +\|", out, flags=re.MULTILINE))
    assert set(rates) == {"float32", "bfloat16"} and all(int(rate) > 0 for rate in rates.values())
    ratio = re.search(r"bfloat16 / float32: ([\d.]+) \(median of 1 alternating rounds\)", out)
    assert ratio is not None and float(ratio[1]) > 0, out
    assert re.search(r"bfloat16 units in /proc/cpuinfo: (yes|no)", out), out


@pytest.mark.parametrize("fused", [[], ["--fused"]])
def test_step_parts_times_each_part_of_real_training_steps_and_the_folds_ceiling(capsys, fused):
    argv = ["--envs", "Hopper-v4", "--fill", "300", "--rounds", "1", "--steps", "4",
            "--repeats", "2", *fused]  # fmt: skip
    assert step_parts.main(argv) == 0
    out = capsys.readouterr().out
    assert ("fast path with --fused-update," in out) == bool(fused), out
    parts = dict(re.findall(r"^\| Hopper-v4 +\| ([\w +]+?) +\| +([\d.]+) +\|", out, re.MULTILINE))
    assert set(parts) == {*step_parts.PARTS, "whole step"}, out
    assert all(float(parts[part]) > 0 for part in step_parts.PARTS), out
    whole = sum(float(parts[part]) for part in step_parts.PARTS)
    assert float(parts["whole step"]) == pytest.approx(whole, abs=0.005), out
    fold = re.search(r"as a 257th row (-?[\d.]+) ms +\| +(-?[\d.]+) saved +\| +([\d.]+)x", out)
    assert fold is not None and float(fold[3]) > 0, out


def test_step_parts_refuses_an_odd_step_count_and_an_unknown_task_before_any_work(capsys):
    with pytest.raises(SystemExit):
        step_parts.main(["--steps", "3"])
    assert "--steps must be even and at least 4" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        step_parts.main(["--envs", "Hopper-v4", "HalfCheetah-v99"])
    assert "--envs:" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        step_parts.main(["--fused", "--update-path", "reference"])
    assert "--fused is the fast path's" in capsys.readouterr().err


TINY_LEVER = ["--env", "Hopper-v4", "--batch-size", "16", "--rounds", "2", "--updates", "3",
              "--warmup", "1", "--check", "4"]  # fmt: skip


def test_preallocated_outputs_lever_computes_the_default_update_bit_for_bit(capsys):
    assert levers.main(["preallocated-outputs", *TINY_LEVER]) == 0
    out = capsys.readouterr().out
    buffers = re.search(r"preallocated-outputs \((\d+) buffers\)", out)
    assert buffers is not None and int(buffers[1]) > 0, out
    assert "after 4 updates from the same state and draws differ by at most 0.00e+00" in out, out
    ratio = re.search(r"default / lever: ([\d.]+) \(median of per-round ratios", out)
    assert ratio is not None and float(ratio[1]) > 0, out


def test_compiled_critic_step_lever_matches_the_default_within_rounding(capsys):
    assert levers.main(["compiled-critic-step", *TINY_LEVER]) == 0
    out = capsys.readouterr().out
    difference = re.search(r"differ by at most ([\d.e+-]+) ", out)
    assert difference is not None and float(difference[1]) < 1e-4, out
    assert re.search(r"default / lever: [\d.]+ ", out), out


@pytest.mark.parametrize("lever", ["fused-critic-step", "fused-update"])
def test_fused_levers_match_the_default_within_rounding_and_time_the_critic_step(capsys, lever):
    assert levers.main([lever, *TINY_LEVER]) == 0
    out = capsys.readouterr().out
    difference = re.search(r"differ by at most ([\d.e+-]+) ", out)
    assert difference is not None and float(difference[1]) < 1e-4, out
    critic_step = re.search(r"critic step alone, ms: default ([\d.]+), lever ([\d.]+)", out)
    assert critic_step is not None and float(critic_step[1]) > 0 and float(critic_step[2]) > 0


def test_fused_one_call_lever_computes_the_same_bits_as_the_step_by_step_loop(capsys):
    assert levers.main(["fused-one-call", *TINY_LEVER]) == 0
    out = capsys.readouterr().out
    assert "differ by at most 0.00e+00 " in out, out
    assert re.search(r"default / lever: [\d.]+ ", out), out
    assert "critic step alone" not in out  # both sides run the same critic step


def test_fused_act_lever_acts_as_the_eager_policy_and_times_both_in_place(capsys):
    assert levers.main(["fused-act", *TINY_LEVER]) == 0
    out = capsys.readouterr().out
    difference = re.search(r"from the same draws differ by at most ([\d.e+-]+)", out)
    assert difference is not None and float(difference[1]) < 1e-6, out
    times = re.search(r"eager ([\d.]+), fused ([\d.]+) .*eager / fused: ([\d.]+) ", out)
    assert times is not None and all(float(value) > 0 for value in times.groups()), out
    saving = re.search(r"update \+ eager action: ([\d.]+) ms; the saving, (-?[\d.]+) ms", out)
    assert saving is not None and float(saving[1]) > float(saving[2]), out


def test_fused_sections_accounts_for_the_update_in_place(capsys):
    """The section-timed build's table: every kind present, the sections' total within the
    update's wall time (the remainder is what no section covers), each 256^3 product named."""
    assert fused_sections.main(["--env", "Hopper-v4", "--batch-size", "256", "--rounds", "2",
                                "--updates", "4", "--warmup", "2"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    kinds = {
        cells[0]: float(cells[1])
        for line in out.splitlines()
        if line.startswith("| ")
        for cells in [[cell.strip() for cell in line.strip("|").split("|")]]
        if cells[0] in (*fused_sections.KINDS, "in no section (Python, C++ between sections)")
    }
    assert set(kinds) == {*fused_sections.KINDS, "in no section (Python, C++ between sections)"}
    assert all(kinds[kind] > 0 for kind in fused_sections.KINDS), kinds
    assert kinds["in no section (Python, C++ between sections)"] > 0, kinds
    for section in ("product: critic layer 2 (256^3)", "optimizer: Adam steps",
                    "pass: squashed sample + log-probability"):  # fmt: skip
        assert f"| {section} " in out, out
    assert re.search(r"256\^3 products in place: \d+-\d+ µs per call", out), out
    assert "--precision fp32" in out and "a lone fp32 256^3 matmul" in out, out
    # The products the C++ calls, counted by the profiler, are the eager hand-written update's.
    counted = re.search(r"the update's products: ([\d.]+) MFLOP, ([\d.]+) ms in place", out)
    assert counted is not None, out
    batches = profile_step.random_batches(batch_size=256, obs_dim=11, action_dim=3)
    eager = profile_step.seeded_fast_learner(batch_size=256, obs_dim=11, action_dim=3)
    first = profile_step.LEARNING_STARTS + 2
    eager_mflop = fused_sections.product_mflop_per_update(eager, batches, range(first, first + 2))
    assert abs(float(counted[1]) - eager_mflop) < 0.05 and eager_mflop > 500, (
        counted[1],
        eager_mflop,
    )
    assert 0 < float(counted[2]) < kinds["product"] + 0.01, out
    # --precision bf16: a batch of 64 is long enough for every 256-wide product to round.
    bf16 = ["--env", "Hopper-v4", "--batch-size", "64", "--rounds", "1", "--updates", "2",
            "--warmup", "1", "--precision", "bf16"]  # fmt: skip
    assert fused_sections.main(bf16) == 0
    out = capsys.readouterr().out
    assert "--precision bf16" in out and "a lone bf16 256^3 matmul" in out, out
    assert "| product: critic layer 2 (256^3) " in out, out


def test_python_dispatch_lever_times_the_same_ops_from_python_and_from_cpp(capsys):
    assert levers.main(["python-dispatch", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    # Cells, not spacing: tabulate pads a value like 1.6 to the column's decimal places.
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in out.splitlines()
        if line.startswith("| [")
    ]
    assert [cells[0] for cells in rows] == [str(list(s)) for s in levers.DISPATCH_SHAPES], out
    assert all(float(cells[1]) > 0 and float(cells[2]) > 0 for cells in rows), out


def test_train_sps_builds_the_fused_update_before_any_trainer_starts(monkeypatch):
    """A trainer compiling the C++ for a minute while its pair trains would leave the two no
    shared window; where the fast path runs the fused update (its default on a CPU), the
    benchmark loads (or builds) it first, through the real build function."""
    from sacbench.sac import fused

    loads = []
    real = fused.fused_update_extension
    monkeypatch.setattr(fused, "fused_update_extension", lambda: loads.append(1) or real())
    assert train_sps.build_fused_update_first(["--no-fused-update"]) is None
    assert train_sps.build_fused_update_first(["--compile"]) is None
    assert loads == []
    seconds = train_sps.build_fused_update_first(["--buffer-size", "1000"])
    assert seconds is not None and seconds >= 0 and loads == [1]


@pytest.mark.slow
def test_train_sps_times_cleanrls_script_beside_the_fast_path(tmp_path, monkeypatch, capsys):
    """--cleanrl-checkout: the other side is the checkout's cleanrl/sac_continuous_action.py (here
    tests/cleanrl_style.py's script, which logs CleanRL's tags with the real writer), run in a
    folder of its own with the run's budget on one thread, its windows read from its charts/SPS
    wall times; the table's ratio is over it."""
    checkout = cleanrl_style.write_checkout(tmp_path / "cleanrl")
    invocations = tmp_path / "invocations.txt"
    monkeypatch.setenv("FAKE_CLEANRL_INVOCATIONS", str(invocations))
    assert train_sps.main(["--envs", "Hopper-v4", "--total-timesteps", "1500",
                           "--learning-starts", "1000", "--buffer-size", "1500",
                           "--cleanrl-checkout", str(checkout),
                           "--extra", "--batch-size", "64"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert re.search(r"\|\s+steady SPS\s+\|\s+x cleanrl\s+\|", out), out
    rows = {cells[1]: cells for cells in hopper_rows(out).values()}  # keyed by the side
    cleanrl = rows["CleanRL's sac_continuous_action.py (commit unknown)"]
    fast = rows["fast --batch-size 64"]
    assert float(cleanrl[3]) == 1.0 and float(cleanrl[2]) > 0, out
    tolerance = printed_ratio_tolerance(float(fast[2]), float(cleanrl[2]))
    assert float(fast[3]) == pytest.approx(float(fast[2]) / float(cleanrl[2]), abs=tolerance)
    [started] = invocations.read_text().splitlines()
    assert started.startswith("OMP_NUM_THREADS=1 cwd=") and "/Hopper-v4-cleanrl-0 " in started
    budget = "--total-timesteps 1500 --learning-starts 1000 --buffer-size 1500"
    assert started.endswith(f" --env-id Hopper-v4 --seed 1 {budget} --no-cuda"), started


def test_cleanrl_windows_are_its_charts_sps_points_wall_times(tmp_path):
    """A run without charts/steady_SPS (CleanRL's script): one window per pair of consecutive
    charts/SPS points, the 100 steps between them over their event wall times."""
    script = cleanrl_style.write_script(tmp_path)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    budget = ["--total-timesteps", "700", "--learning-starts", "200"]
    subprocess.run([sys.executable, str(script), *budget], cwd=run_dir, check=True)
    windows = train_sps.steady_windows(run_dir)
    # charts/SPS at steps 300, 400, 500, 600 (every 100 once global_step > learning_starts).
    assert len(windows) == 3
    for (start, end, rate), following in zip(windows, [*windows[1:], None], strict=True):
        assert end > start and rate * (end - start) == pytest.approx(100)
        assert following is None or following[0] == end


def test_train_sps_refuses_a_cleanrl_checkout_it_cannot_run_before_training(tmp_path, capsys):
    def refusal(*flags: str) -> str:
        with pytest.raises(SystemExit) as exit_info:
            train_sps.parse_args(["--envs", "Hopper-v4", *flags])
        assert exit_info.value.code == 2
        return capsys.readouterr().err

    assert "no cleanrl/sac_continuous_action.py there" in refusal(
        "--cleanrl-checkout", str(tmp_path)
    )
    checkout = cleanrl_style.write_checkout(tmp_path / "good")
    assert f"--cleanrl-python {tmp_path}: not an executable file" in refusal(
        "--cleanrl-checkout", str(checkout), "--cleanrl-python", str(tmp_path)
    )
    assert "--cleanrl-python needs --cleanrl-checkout" in refusal(
        "--cleanrl-python", sys.executable
    )
    broken = cleanrl_style.write_checkout(tmp_path / "broken", script="import not_installed\n")
    message = refusal("--cleanrl-checkout", str(broken))
    assert "cannot start" in message and "No module named 'not_installed'" in message
    # CleanRL's real script reads final_observation, which Gymnasium 1.x's vector envs no
    # longer write: under this project's interpreter it is refused, naming the version.
    written_for_gymnasium_0 = cleanrl_style.script_text() + (
        "# real_next_obs[idx] = infos['final_observation'][idx]\n"
    )
    old = cleanrl_style.write_checkout(tmp_path / "old", script=written_for_gymnasium_0)
    message = refusal("--cleanrl-checkout", str(old))
    assert f"has Gymnasium {importlib.metadata.version('gymnasium')}" in message, message


def test_thin_products_times_both_kernels_on_the_updates_thin_shapes_and_they_agree(capsys):
    """Every thin product of the update is timed on both sides, and the hidden layer's 256^3 ones
    against the packed kernel; our kernels compute what ATen computes (within float32 rounding of
    a sum of up to 256 terms), and the last lines give the core's FMA peak, a lone 256^3 matmul's
    share of it, and that matmul after each amount of memory written."""
    assert thin_products.main(["--env", "Hopper-v4", "--rounds", "2", "--calls", "3"]) == 0
    out = capsys.readouterr().out
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in out.splitlines()
        if line.startswith("| ") and not line.startswith("| product")
    ]
    expected = thin_products.thin_shapes(obs=11, act=3, batch=256)
    expected += thin_products.hidden_shapes(batch=256)
    assert [cells[0] for cells in rows] == [shape[0] for shape in expected], out
    assert "ATen / packed |" in out and "| [256x256] x [256x256] " in out, out
    assert "| [256x11] x [11x256] " in out and "| [3x256] x [256x256] " in out, out
    for cells in rows:
        aten_us, ours_us, ratio, difference = (float(cells[i]) for i in (3, 4, 5, 7))
        assert aten_us > 0 and ours_us > 0 and ratio > 0, cells
        assert difference < 1e-5, cells
    peak = re.search(r"FMA peak: ([\d.]+) GFLOP/s; a lone 256x256x256 at::mm: ([\d.]+)", out)
    assert peak and float(peak[1]) > 0 and float(peak[2]) > 0, out
    written = re.search(r"after writing this much other memory before each call: (.*)", out)
    assert written, out
    sizes = [int(part.split()[0]) for part in written[1].split(", ")]
    assert sizes == list(thin_products.WRITTEN_MEGABYTES), out


def test_thin_products_refuses_bad_counts_before_building(capsys):
    with pytest.raises(SystemExit):
        thin_products.main(["--calls", "0"])
    assert "--calls must be positive, got 0" in capsys.readouterr().err


def test_levers_refuse_an_unknown_lever_and_bad_counts(capsys):
    with pytest.raises(SystemExit):
        levers.main(["fused-everything"])
    assert "invalid choice: 'fused-everything'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        levers.main(["preallocated-outputs", "--rounds", "0"])
    assert "--rounds must be positive, got 0" in capsys.readouterr().err


def test_learning_sanity_knows_each_paths_trainer_flags_and_refuses_unknown_tasks(capsys):
    assert learning_sanity.PATH_FLAGS["fast-bf16"] == (
        "--update-path", "fast", "--no-fused-update", "--precision", "bf16"
    )  # fmt: skip
    # Every path's flags are ones the trainer parses and accepts together.
    for path, flags in learning_sanity.PATH_FLAGS.items():
        args = tyro.cli(Args, args=list(flags))
        assert not validate_args(args), path
    assert not tyro.cli(Args, args=list(learning_sanity.PATH_FLAGS["fast"])).fused_update
    assert tyro.cli(Args, args=list(learning_sanity.PATH_FLAGS["fast-fused"])).fused_update
    both = tyro.cli(Args, args=list(learning_sanity.PATH_FLAGS["fast-fused-bf16"]))
    assert both.fused_update and both.precision == "bf16"
    options = learning_sanity.parse_args(["--env", "Hopper-v4", "--paths", "fast", "fast-bf16"])
    assert options.paths == ["fast", "fast-bf16"] and options.solved_return == 1000.0
    with pytest.raises(SystemExit):
        learning_sanity.parse_args(["--env", "Hoper-v4"])
    assert "--env: unknown env id 'Hoper-v4'" in capsys.readouterr().err


@pytest.mark.parametrize("fused", [[], ["--fused"]])
def test_update_throughput_against_another_tree_times_both_in_workers(capsys, fused):
    # The same tree on both sides: the workers run identical code on identical batches and draws,
    # so their parameters must agree exactly, whatever the timings.
    tree = str(update_throughput.THIS_TREE)
    status = update_throughput.main([*TINY_UPDATE_TIMING, "--against", tree, *fused])
    assert status == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| Hopper-v4")]
    path = "(fast-fused)" if fused else "(fast)"
    assert len(rows) == 2 and all(path in row for row in rows), out
    assert float(rows[1].strip("|").split("|")[5]) == 1.0  # the baseline against itself
    assert f"{tree}/sacbench/__init__.py vs {tree}/sacbench/__init__.py" in out
    assert "after 1 warmup updates differ by at most 0.00e+00" in out


def transparent_huge_pages_on_request() -> bool:
    """Whether this kernel backs memory with huge pages only where a process asks (madvise), and
    glibc can ask for its heap (glibc.malloc.hugetlb, glibc 2.35 and later)."""
    setting = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    glibc = os.confstr("CS_GNU_LIBC_VERSION") or ""  # "glibc 2.36"
    version = tuple(int(part) for part in glibc.split()[-1].split(".")[:2]) if glibc else (0, 0)
    return setting.exists() and "[madvise]" in setting.read_text() and version >= (2, 35)


def test_update_throughput_against_env_sets_the_against_workers_environment_only(capsys):
    # The same tree on both sides, the other with glibc's huge-page tunable: same parameters,
    # the setting named on its side only, and (where the kernel backs memory with huge pages
    # only on request) huge pages in that worker alone.
    tree = str(update_throughput.THIS_TREE)
    setting = "GLIBC_TUNABLES=glibc.malloc.hugetlb=1"
    status = update_throughput.main(
        [*TINY_UPDATE_TIMING, "--against", tree, "--against-env", setting]
    )
    assert status == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| Hopper-v4")]
    assert len(rows) == 2 and setting not in rows[0] and setting in rows[1], out
    assert "after 1 warmup updates differ by at most 0.00e+00" in out
    huge = re.search(r"huge pages at the last round: (\d+) MiB vs (\d+) MiB", out)
    assert huge is not None, out
    if transparent_huge_pages_on_request():
        assert int(huge[1]) == 0 and int(huge[2]) > 0, out


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--against-env", "A=1"], "--against-env sets the --against worker's environment"),
        (["--against", ".", "--against-env", "NO_VALUE"], "--against-env 'NO_VALUE': expected"),
    ],
)
def test_update_throughput_refuses_a_bad_against_env(arguments, message, capsys):
    with pytest.raises(SystemExit):
        update_throughput.main(arguments)
    assert message in capsys.readouterr().err


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
    rows = hopper_rows(out)
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


# ---- benchmarks/shared_device_sps.py: N trainers sharing one device --------------------------


def shared_sps_rows(out: str, *, table: int = 0) -> dict[int, list[str]]:
    """A table's rows by N: [N, median, min-max, aggregate, / N=1, peak RSS, wall (, batch /
    processes)]; table 0 is the processes', 1 the seed batches'."""
    tables = re.findall(r"(?:^\|.*\n)+", out, flags=re.MULTILINE)
    return {
        int(cells[0]): cells
        for line in tables[table].splitlines()
        if re.match(r"^\|\s+\d+ \|", line)
        for cells in [[cell.strip() for cell in line.strip("|").split("|")]]
    }


# SPS are printed to 0.1: a sum of two printed values and the printed sum may differ by three
# roundings (0.15); a ratio printed to 0.01 by its own rounding and its terms'.
SUM_OF_TENTHS = 0.151


def printed_ratio_tolerance(numerator: float, denominator: float) -> float:
    """How far a ratio printed to 0.01 may lie from the ratio of its terms printed to 0.1."""
    ratio = numerator / denominator
    return 0.005 + ratio * (0.05 / numerator + 0.05 / denominator) + 1e-9


@pytest.mark.slow
def test_shared_device_sps_runs_one_then_two_trainers_at_once_on_cpu(capsys):
    tiny = ["--device", "cpu", "--env", "InvertedPendulum-v4", "--runs", "1", "2",
            "--total-timesteps", "2200", "--learning-starts", "1000", "--buffer-size", "2400",
            "--seed-batch", "--extra", "--batch-size", "64"]  # fmt: skip
    assert shared_device_sps.main(tiny) == 0
    out = capsys.readouterr().out
    rows = shared_sps_rows(out)
    assert set(rows) == {1, 2}, out
    for _, median, spread, aggregate, _, rss, wall in rows.values():
        low, high = map(float, spread.split("-"))
        assert 0 < low <= float(median) <= high, out
        assert float(aggregate) > 0 and float(rss) > 100 and float(wall) > 0, out
    # N=1: the one run is the aggregate. N=2: the median of two runs is their mean, so the
    # aggregate (the sum of the per-run SPS) is min + max and twice the median.
    assert rows[1][1] == rows[1][3] and rows[1][4] == "1.00"
    _, median, spread, aggregate, ratio, _, _ = rows[2]
    low, high = map(float, spread.split("-"))
    assert float(aggregate) == pytest.approx(low + high, abs=SUM_OF_TENTHS)
    assert float(aggregate) == pytest.approx(2 * float(median), abs=SUM_OF_TENTHS)
    one_run = float(rows[1][3])
    tolerance = printed_ratio_tolerance(float(aggregate), one_run)
    assert float(ratio) == pytest.approx(float(aggregate) / one_run, abs=tolerance)
    per_run = re.search(r"^N=2: steady SPS per run \(seed 1\.\.2\) ([\d.]+), ([\d.]+); ", out,
                        flags=re.MULTILINE)  # fmt: skip
    assert per_run and sorted(map(float, per_run.groups())) == [low, high], out
    assert "device: cpu (" in out and "aggregate SPS: the sum of the N per-run SPS" in out
    # --seed-batch: each N's seeds as one process too, against that N's processes.
    batches = shared_sps_rows(out, table=1)
    assert set(batches) == {1, 2}, out
    for runs, (_, median, spread, aggregate, _, rss, wall, against) in batches.items():
        low, high = map(float, spread.split("-"))
        assert 0 < low <= float(median) <= high and float(rss) > 100 and float(wall) > 0, out
        assert float(aggregate) == pytest.approx(
            low + high if runs == 2 else low, abs=SUM_OF_TENTHS
        )
        processes = float(rows[runs][3])
        tolerance = printed_ratio_tolerance(float(aggregate), processes)
        assert float(against) == pytest.approx(float(aggregate) / processes, abs=tolerance), out
    assert "one batch: python -m sacbench.train_seeds --threads 1" in out


def test_one_core_pins_every_trainer_to_one_allowed_cpu(tmp_path):
    one_core = shared_device_sps.parse_args(["--device", "cpu", "--one-core"])
    pinned = shared_device_sps.pinned_cpus(one_core)
    assert pinned is not None and len(pinned) == 1 and pinned <= os.sched_getaffinity(0)
    everywhere = shared_device_sps.parse_args(["--device", "cpu"])
    assert shared_device_sps.pinned_cpus(everywhere) is None
    # The pin reaches the child: Popen returns after exec, long before the trainer is done.
    run = shared_device_sps.run_options(one_core, seed=1)
    child = train_sps.start_trainer(tmp_path / "run", env_id="Hopper-v4", path="fast",
                                    options=run, cpus=pinned)  # fmt: skip
    try:
        assert os.sched_getaffinity(child.pid) == pinned
    finally:
        child.kill()
        child.wait()


def test_shared_window_rates_keep_the_windows_inside_the_span_all_runs_trained():
    # Run a trains over [0, 3], run b over [1.5, 4.5]: the shared span is [1.5, 3].
    run_a = [(0.0, 1.0, 10.0), (1.0, 2.0, 11.0), (2.0, 3.0, 12.0)]
    run_b = [(1.5, 2.5, 20.0), (2.5, 3.5, 21.0), (3.5, 4.5, 22.0)]
    assert shared_window_rates([run_a, run_b]) == [[12.0], [20.0]]
    assert shared_window_rates([run_a]) == [[10.0, 11.0, 12.0]]
    # A run training over [1.2, 1.9] only: no window of run a fits in that span, so run a's
    # list is empty (which the benchmark refuses: raise --total-timesteps).
    assert shared_window_rates([run_a, [(1.2, 1.9, 5.0)]]) == [[], [5.0]]


def test_shared_device_sps_exits_with_the_failed_childs_output():
    # The trainer itself refuses batch size 0 (the benchmark passes --extra on unread).
    with pytest.raises(SystemExit) as exit_info:
        shared_device_sps.main(["--device", "cpu", "--env", "Hopper-v4", "--runs", "2",
                                "--total-timesteps", "1600", "--learning-starts", "1000",
                                "--extra", "--batch-size", "0"])  # fmt: skip
    message = str(exit_info.value.code)
    assert "sacbench.train --env-id Hopper-v4 --seed 1" in message and "failed (2)" in message
    assert "--batch-size must be a positive integer, got 0" in message


@pytest.mark.skipif(torch.cuda.is_available(), reason="cuda is available here")
def test_shared_device_sps_refuses_cuda_without_a_gpu(capsys):
    with pytest.raises(SystemExit) as exit_info:
        # README.md's command for a GPU node, as written.
        shared_device_sps.main(["--device", "cuda", "--runs", "1", "2", "4", "8"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--device cuda: torch.cuda.is_available() is False" in err
    assert "pass --device cpu" in err


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--runs", "0", "2"], "--runs: each number of runs must be at least 1, got 0"),
        (["--runs", "2", "2"], "--runs: each number of runs once, got 2 2"),
        (
            ["--total-timesteps", "1100", "--learning-starts", "1000"],
            "--total-timesteps 1100 must exceed --learning-starts 1000 by more than 200 steps",
        ),
        (["--env", "NoSuchEnv-v0"], "--env: "),
        (["--eager"], "--eager applies to --device cuda only"),
    ],
)
def test_shared_device_sps_refuses_bad_arguments_before_starting(arguments, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        shared_device_sps.main(["--device", "cpu", *arguments])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
