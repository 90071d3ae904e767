"""The committed benchmarks run end to end (tiny budgets: they must work, not be fast).

Each of benchmarks/'s scripts is run here as `main([...])` with the fewest trainer starts that
reach what it prints; none of them checks a speed.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import tyro

from benchmarks import (
    common,
    fingerprint,
    fused_sections,
    learning_sanity,
    process_exit,
    train_sps,
)
from benchmarks.common import cpu_kind, shared_window_rates
from sacbench.sac.args import Args, validate_args
from sacbench.sac.cpu_features import cpu_flags, onednn_matmul_missing, read_cpuinfo
from sacbench.sac.fused import float32_products_library
from tests import cleanrl_style

REPO = Path(__file__).resolve().parents[1]


BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def test_the_benchmarks_stay_six_scripts_or_fewer_each_with_a_test():
    """benchmarks/ answers a few standing questions (its README's table); a new question joins
    the script that answers its neighbour. A test calls into every script."""
    scripts = sorted(
        path.stem for path in BENCHMARKS.glob("*.py") if path.stem not in ("__init__", "common")
    )
    assert len(scripts) <= 6, scripts
    tests = "\n".join(path.read_text() for path in Path(__file__).parent.glob("test_*.py"))
    called = [
        name
        for name in scripts
        if re.search(rf"\b{name}\.\w+\(|from benchmarks\.{name} import", tests)
    ]
    assert called == scripts
    readme = (BENCHMARKS / "README.md").read_text()
    assert [name for name in scripts if f"`{name}`" not in readme] == []


def hopper_rows(output: str) -> dict[str, list[str]]:
    """The Hopper-v4 rows of a printed table, as their cells, keyed by the third (the path)."""
    return {
        cells[2]: cells
        for line in output.splitlines()
        if line.startswith("| Hopper-v4")
        for cells in [[cell.strip() for cell in line.strip("|").split("|")]]
    }


# ---- benchmarks/fused_sections.py: where the fused update's time goes --------------------------


def test_fused_sections_accounts_for_the_update_in_place(capsys):
    """The timed learner's table: every kind present, the sections' total within the update's
    wall time (the remainder is what no section covers), each 256^3 product named, and only the
    timed learner's updates counted (the untimed one shares the build)."""
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
    # 3 Adam sections per update (the critics' each step, the actor's and alpha's twice every
    # other step): the untimed learner's would double it.
    assert re.search(r"\| optimizer: Adam steps +\| +[\d.]+ \| +3\.000 \|", out), out
    assert re.search(r"256\^3 products in place: \d+-\d+ µs per call", out), out
    assert "--precision fp32" in out and "a lone fp32 256^3 matmul" in out, out
    assert cpu_kind() in out.splitlines(), out  # every figure names the CPU kind it came from
    # The products the C++ calls, counted by the profiler, are the eager hand-written update's.
    counted = re.search(r"the update's products: ([\d.]+) MFLOP, ([\d.]+) ms in place", out)
    assert counted is not None, out
    batches = common.random_batches(batch_size=256, obs_dim=11, action_dim=3)
    eager = common.seeded_fast_learner(batch_size=256, obs_dim=11, action_dim=3)
    first = common.LEARNING_STARTS + 2
    eager_mflop = fused_sections.product_mflop_per_update(eager, batches, range(first, first + 2))
    assert abs(float(counted[1]) - eager_mflop) < 0.05 and eager_mflop > 500, (
        counted[1],
        eager_mflop,
    )
    assert 0 < float(counted[2]) < kinds["product"] + 0.01, out
    if onednn_matmul_missing(cpu_flags(read_cpuinfo())) is None:
        libraries = re.search(
            r"by float32 products' library, medians of 2 alternating rounds: aten \(MKL\) "
            r"([\d.]+), onednn ([\d.]+); aten is ([\d.]+)x as fast as onednn; chosen here: "
            r"(aten|onednn)",
            out,
        )
        assert libraries is not None, out
        aten_ms, onednn_ms, ratio = (float(libraries[group]) for group in (1, 2, 3))
        assert aten_ms > 0 and onednn_ms > 0 and abs(ratio - onednn_ms / aten_ms) < 0.02, out
        assert libraries[4] == float32_products_library(), out
    else:
        assert "library: aten (oneDNN's matmul does not run on this CPU)" in out, out


# ---- benchmarks/train_sps.py: steady training SPS against the reference path or CleanRL's script


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
    assert train_sps.main(["--envs", "Hopper-v4", "--total-timesteps", "600",
                           "--learning-starts", "100", "--buffer-size", "600",
                           "--cleanrl-checkout", str(checkout),
                           "--extra", "--batch-size", "64"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert re.search(r"\|\s+steady SPS\s+\|\s+x cleanrl\s+\|", out), out
    assert cpu_kind() in out.splitlines(), out
    rows = {cells[1]: cells for cells in hopper_rows(out).values()}  # keyed by the side
    cleanrl = rows["CleanRL's sac_continuous_action.py (commit unknown)"]
    fast = rows["fast --batch-size 64"]
    assert float(cleanrl[3]) == 1.0 and float(cleanrl[2]) > 0, out
    tolerance = printed_ratio_tolerance(float(fast[2]), float(cleanrl[2]))
    assert float(fast[3]) == pytest.approx(float(fast[2]) / float(cleanrl[2]), abs=tolerance)
    [started] = invocations.read_text().splitlines()
    assert started.startswith("OMP_NUM_THREADS=1 cwd=") and "/Hopper-v4-cleanrl-0 " in started
    budget = "--total-timesteps 600 --learning-starts 100 --buffer-size 600"
    assert started.endswith(f" --env-id Hopper-v4 --seed 1 {budget} --no-cuda"), started


def train_sps_refusal(capsys, *flags: str) -> str:
    """What train_sps prints when it refuses its flags (exit 2) before any training."""
    with pytest.raises(SystemExit) as exit_info:
        train_sps.parse_args(["--envs", "Hopper-v4", *flags])
    assert exit_info.value.code == 2
    return capsys.readouterr().err


def test_train_sps_runs_its_fast_baseline_with_the_given_environment(tmp_path, capsys):
    """--baseline-environment: the baseline is the fast path run with one more environment
    variable, which reaches its trainer (an unknown setting stops it, naming the variable);
    malformed or doubled baselines are refused before any training."""
    with pytest.raises(SystemExit) as exit_info:
        train_sps.main(["--envs", "Hopper-v4", "--total-timesteps", "600",
                        "--learning-starts", "100", "--buffer-size", "600",
                        "--baseline-environment", "SACBENCH_ADAM_SUBNORMALS=bogus"])  # fmt: skip
    message = str(exit_info.value.code)
    assert "--update-path fast" in message and "Hopper-v4-fast-baseline-0" in message, message
    assert "$SACBENCH_ADAM_SUBNORMALS is 'bogus'" in message, message

    assert "--baseline-environment must be NAME=VALUE, got 'keep'" in train_sps_refusal(
        capsys, "--baseline-environment", "keep"
    )
    checkout = cleanrl_style.write_checkout(tmp_path / "cleanrl")
    assert "choose two baselines" in train_sps_refusal(
        capsys, "--baseline-environment", "A=1", "--cleanrl-checkout", str(checkout)
    )


def test_cleanrl_windows_are_its_charts_sps_points_wall_times(tmp_path):
    """A run without charts/steady_SPS (CleanRL's script): one window per pair of consecutive
    charts/SPS points, the 100 steps between them over their event wall times."""
    script = cleanrl_style.write_script(tmp_path)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    budget = ["--total-timesteps", "700", "--learning-starts", "200"]
    subprocess.run([sys.executable, str(script), *budget], cwd=run_dir, check=True)
    windows = common.steady_windows(run_dir)
    # charts/SPS at steps 300, 400, 500, 600 (every 100 once global_step > learning_starts).
    assert len(windows) == 3
    for (start, end, rate), following in zip(windows, [*windows[1:], None], strict=True):
        assert end > start and rate * (end - start) == pytest.approx(100)
        assert following is None or following[0] == end


def test_train_sps_refuses_a_cleanrl_checkout_it_cannot_run_before_training(tmp_path, capsys):
    assert "no cleanrl/sac_continuous_action.py there" in train_sps_refusal(
        capsys, "--cleanrl-checkout", str(tmp_path)
    )
    checkout = cleanrl_style.write_checkout(tmp_path / "good")
    assert f"--cleanrl-python {tmp_path}: not an executable file" in train_sps_refusal(
        capsys, "--cleanrl-checkout", str(checkout), "--cleanrl-python", str(tmp_path)
    )
    assert "--cleanrl-python needs --cleanrl-checkout" in train_sps_refusal(
        capsys, "--cleanrl-python", sys.executable
    )
    broken = cleanrl_style.write_checkout(tmp_path / "broken", script="import not_installed\n")
    message = train_sps_refusal(capsys, "--cleanrl-checkout", str(broken))
    assert "cannot start" in message and "No module named 'not_installed'" in message
    # CleanRL's real script reads final_observation, which Gymnasium 1.x's vector envs no
    # longer write: under this project's interpreter it is refused, naming the version.
    written_for_gymnasium_0 = cleanrl_style.script_text() + (
        "# real_next_obs[idx] = infos['final_observation'][idx]\n"
    )
    old = cleanrl_style.write_checkout(tmp_path / "old", script=written_for_gymnasium_0)
    message = train_sps_refusal(capsys, "--cleanrl-checkout", str(old))
    assert f"has Gymnasium {importlib.metadata.version('gymnasium')}" in message, message


# ---- benchmarks/learning_sanity.py ---------------------------------------------------------------


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


# ---- benchmarks/train_sps.py --shared-device: N trainers sharing one device -------------------


def shared_sps_rows(out: str, env_id: str) -> dict[int, list[str]]:
    """The table's rows of `env_id` by N: [N, median, min-max, aggregate, / N=1, peak RSS,
    wall]."""
    tables = re.findall(r"(?:^\|.*\n)+", out, flags=re.MULTILINE)
    return {
        int(cells[1]): cells[1:]
        for line in tables[0].splitlines()
        for cells in [[cell.strip() for cell in line.strip("|").split("|")]]
        if cells[0] == env_id
    }


# SPS are printed to 0.1: a sum of two printed values and the printed sum may differ by three
# roundings (0.15); a ratio printed to 0.01 by its own rounding and its terms'.
SUM_OF_TENTHS = 0.151


def printed_ratio_tolerance(numerator: float, denominator: float) -> float:
    """How far a ratio printed to 0.01 may lie from the ratio of its terms printed to 0.1."""
    ratio = numerator / denominator
    return 0.005 + ratio * (0.05 / numerator + 0.05 / denominator) + 1e-9


@pytest.mark.slow
def test_train_sps_runs_one_then_two_trainers_at_once_on_the_cpu(capsys):
    tiny = ["--shared-device", "cpu", "--envs", "InvertedPendulum-v4", "--runs", "1", "2",
            "--total-timesteps", "1300", "--learning-starts", "100", "--buffer-size", "1300",
            "--extra", "--batch-size", "64"]  # fmt: skip
    assert train_sps.main(tiny) == 0
    out = capsys.readouterr().out
    rows = shared_sps_rows(out, "InvertedPendulum-v4")
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
    per_run = re.search(r"^InvertedPendulum-v4 N=2: steady SPS per run \(seed 1\.\.2\) "
                        r"([\d.]+), ([\d.]+); ", out, flags=re.MULTILINE)  # fmt: skip
    assert per_run and sorted(map(float, per_run.groups())) == [low, high], out
    assert "device: cpu (" in out and "aggregate SPS: the sum of the N per-run SPS" in out
    assert cpu_kind() in out.splitlines(), out


def test_the_cpu_line_tells_the_recorded_kinds_apart():
    """Two kinds can share a model name ("AMD EPYC", "Intel(R) Xeon(R) Processor"): the line
    that benchmarks print beside their figures names the family, the model and the flags."""
    recorded = Path(__file__).parent / "cpuinfo"
    lines = {path.stem: cpu_kind(path.read_text()) for path in sorted(recorded.glob("*.txt"))}
    assert len(set(lines.values())) == len(lines) == 5, lines
    assert "family 25 model 17" in lines["zen4"] and "avx512_bf16 yes" in lines["zen4"]
    assert "avx2 yes, avx512f no" in lines["zen3"] and "amx_bf16 yes" in lines["intel-xeon-amx"]
    assert "flags unknown" in cpu_kind("")


def test_one_core_pins_every_trainer_to_one_allowed_cpu(tmp_path):
    one_core = train_sps.parse_args(["--shared-device", "cpu", "--one-core"])
    pinned = train_sps.pinned_cpus(one_core)
    assert pinned is not None and len(pinned) == 1 and pinned <= os.sched_getaffinity(0)
    everywhere = train_sps.parse_args(["--shared-device", "cpu"])
    assert train_sps.pinned_cpus(everywhere) is None
    # The pin reaches the child: Popen returns after exec, long before the trainer is done.
    run = train_sps.run_options(one_core, seed=1)
    child = common.start_trainer(tmp_path / "run", env_id="Hopper-v4", path="fast",
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


def test_shared_device_runs_exit_with_the_failed_childs_output():
    # The trainer itself refuses batch size 0 (the benchmark passes --extra on unread).
    with pytest.raises(SystemExit) as exit_info:
        train_sps.main(["--shared-device", "cpu", "--envs", "Hopper-v4", "--runs", "2",
                        "--total-timesteps", "1600", "--learning-starts", "1000",
                        "--extra", "--batch-size", "0"])  # fmt: skip
    message = str(exit_info.value.code)
    assert "sacbench.train --env-id Hopper-v4 --seed 1" in message and "failed (2)" in message
    assert "--batch-size must be a positive integer, got 0" in message


@pytest.mark.skipif(torch.cuda.is_available(), reason="cuda is available here")
def test_shared_device_cuda_is_refused_without_a_gpu(capsys):
    with pytest.raises(SystemExit) as exit_info:
        # docs/performance.md's command for a GPU node, as written.
        train_sps.main(["--shared-device", "cuda", "--runs", "1", "2", "4", "8"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--shared-device cuda: torch.cuda.is_available() is False" in err
    assert "pass --shared-device cpu" in err


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--runs", "0", "2"], "--runs: each number of runs must be at least 1, got 0"),
        (["--runs", "2", "2"], "--runs: each number of runs once, got 2 2"),
        (
            ["--total-timesteps", "1100", "--learning-starts", "1000"],
            "--total-timesteps 1100 must exceed --learning-starts 1000 by more than 200 steps",
        ),
        (["--envs", "NoSuchEnv-v0"], "--envs: "),
        (["--eager"], "--eager applies to --shared-device cuda only"),
        (["--paired"], "--paired compares two sides; --shared-device runs one (the fast path)"),
        (["--repeats", "3"], "--repeats compares two sides; --shared-device runs one"),
    ],
)
def test_shared_device_runs_refuse_bad_arguments_before_starting(arguments, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        train_sps.main(["--shared-device", "cpu", *arguments])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("arguments", [["--runs", "2"], ["--eager"], ["--one-core"]])
def test_shared_device_arguments_are_refused_in_a_comparison(arguments, capsys):
    with pytest.raises(SystemExit) as exit_info:
        train_sps.main(["--paired", *arguments])
    assert exit_info.value.code == 2
    assert f"{arguments[0]} applies to --shared-device only" in capsys.readouterr().err


# ---- benchmarks/fingerprint.py: this tree's training against another tree's -------------------


def test_fingerprint_finds_the_tree_whose_fast_path_changed_and_no_other(tmp_path, capsys):
    """Against a copy of sacbench whose fast path has one constant changed (its target entropy),
    the reference path is identical scalar for scalar and tensor for tensor, and the fast path
    differs, in its scalars and its final state."""
    other = tmp_path / "other"
    shutil.copytree(REPO / "sacbench", other / "sacbench",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    # The C++ source stays the same file, so the copy loads this session's build of it instead of
    # compiling its own (sacbench.sac.fused names a build by its source's resolved path).
    copied_source = other / "sacbench" / "sac" / "fused_update.cpp"
    copied_source.unlink()
    copied_source.symlink_to(REPO / "sacbench" / "sac" / "fused_update.cpp")
    learner = other / "sacbench" / "sac" / "fast_learner.py"
    constant = "self.target_entropy = -float(action_dim)"
    assert learner.read_text().count(constant) == 1
    learner.write_text(learner.read_text().replace(constant, f"{constant} + 0.5"))
    tiny = ["--against", str(other), "--total-timesteps", "300", "--learning-starts", "100",
            "--batch-size", "16"]  # fmt: skip
    assert fingerprint.main(tiny) == 1
    out = capsys.readouterr().out
    identical = re.search(r"^reference: identical: (\d+) scalars over (\d+) tags .*, (\d+) "
                          r"checkpoint entries$", out, flags=re.MULTILINE)  # fmt: skip
    assert identical and all(int(count) > 0 for count in identical.groups()), out
    assert re.search(r"^fast: DIFFERENT, \d+ items; the first:$", out, flags=re.MULTILINE), out
    differing = re.search(r"^  differing tags: (.*); differing checkpoint entries: (\d+)$", out,
                          flags=re.MULTILINE)  # fmt: skip
    assert differing and "losses/alpha_loss" in differing[1].split(", "), out
    assert int(differing[2]) > 0, out


def test_fingerprint_refuses_a_tree_without_sacbench(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        fingerprint.parse_args(["--against", str(tmp_path)])
    assert exit_info.value.code == 2
    assert f"--against {tmp_path}: no sacbench/train.py there" in capsys.readouterr().err


# ---- benchmarks/process_exit.py: what a command's exit costs ------------------------------------


def test_process_exit_times_snakemake_with_and_without_the_workflows_freeze(capsys):
    """Both sides run and are told apart: the shipped workflow freezes once Snakemake has read it
    (the benchmark stops otherwise), the other side's gc.freeze does nothing."""
    assert process_exit.main(["--commands", "snakemake-dry-run", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert re.search(
        r"^snakemake-dry-run: no freeze \d+\.\d\d s \(\d+\.\d\d\); as shipped \d+\.\d\d s "
        r"\(\d+\.\d\d\); ratio \d+\.\d\d$",
        out,
        flags=re.MULTILINE,
    ), out
    assert cpu_kind() in out.splitlines(), out


def test_process_exit_stops_at_a_command_that_does_not_freeze(tmp_path):
    # `python -m platform` prints this machine's platform and exits without freezing anything.
    with pytest.raises(SystemExit, match="platform froze 0 objects .*: it no longer freezes"):
        process_exit.timed("platform", [], freeze=True, record=tmp_path / "count")
    process_exit.timed("platform", [], freeze=False, record=tmp_path / "count")  # no error
