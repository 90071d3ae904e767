"""The fused update (the fast path's default on a CPU): the hand-written update computed by
sacbench/sac/fused_update.cpp, compiled here.

Whole one-call updates against the hand-written path on the same state and draws (against the
reference path: tests/test_sac.py), its refusals, the build (two trainers at once, a killed
build's leftovers, no compiler) and the real trainer by default.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import errno
import fcntl
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from sacbench.run_lock import LOCK_FILE_NAME
from sacbench.sac.algorithm import Batch, update_schedule
from sacbench.sac.args import Args, validate_args
from sacbench.sac.cpu_features import (
    cpu_flags,
    mkl_avx2_kernels_apply,
    onednn_matmul_missing,
    read_cpuinfo,
)
from sacbench.sac.fast_learner import FastLearner
from sacbench.sac.fused import (
    ADAM_SUBNORMALS_VARIABLE,
    BUILD_WAIT_SECONDS,
    FLOAT32_PRODUCTS_LIBRARIES,
    FLOAT32_PRODUCTS_VARIABLE,
    LOADED_RECORD,
    MKL_KERNELS_VARIABLE,
    SOURCE,
    TORCH_BATON,
    FusedFormulation,
    adam_subnormals_as_zero,
    build_directory,
    build_name,
    compiled_against,
    compiler_flags,
    exclusive_build,
    float32_products_library,
    float32_products_through,
    mkl_avx2_kernels_answered,
    mkl_avx2_kernels_wanted,
    ninja_on_path,
)
from sacbench.sac.handwritten import HandwrittenFormulation
from sacbench.sac.learners import fast_gradients, make_learner
from sacbench.sac.mixed_precision import native_bf16_products
from sacbench.sac.reference_learner import ReferenceLearner
from tests.trainer_runs import (
    SHORT_RUN,
    read_scalars,
    run_trainer,
    train_command,
    train_in_process,
)

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def fused() -> FusedFormulation:
    return FusedFormulation.build()  # compiles on first use: needs g++ and the lock's ninja


# What oneDNN's matmul needs that this CPU lacks (None where it runs here).
ONEDNN_MISSING = onednn_matmul_missing(cpu_flags(read_cpuinfo()))
needs_onednn_matmul = pytest.mark.skipif(
    ONEDNN_MISSING is not None,
    reason=f"oneDNN's matmul cannot run on this CPU: its flags lack {ONEDNN_MISSING}",
)

# The Adam steps' subnormals-as-zero sets x86's MXCSR (SSE); elsewhere it is a no-op.
needs_sse = pytest.mark.skipif(
    "sse" not in cpu_flags(read_cpuinfo()),
    reason="the Adam steps take subnormals as zero through x86's MXCSR: this CPU lists no sse",
)


@pytest.fixture(
    params=[
        "aten",
        pytest.param("onednn", marks=needs_onednn_matmul),
    ]
)
def products_library(request, fused) -> Iterator[str]:
    """The fused update's float32 products through each library this CPU can run, whichever
    it would choose (fused.float32_products_library): on every CPU kind the tests exercise the
    library it runs by default."""
    with float32_products_through(fused.extension, request.param):
        yield request.param


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """torch on one thread, as the trainer runs by default, and back to the count it had."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def learner_with_shapes(obs_dim: int, action_dim: int, *, batch_size: int) -> FastLearner:
    torch.manual_seed(4)
    learner = FastLearner(
        obs_dim=obs_dim,
        action_low=-2 * np.ones(action_dim, dtype=np.float32),  # a scale other than 1
        action_high=np.ones(action_dim, dtype=np.float32),
        args=Args(batch_size=batch_size),
        device=CPU,
    )
    with torch.no_grad():  # targets apart from the critics, as after some updates
        for target in learner.target_critic.parameters():
            target.add_(0.05 * torch.randn_like(target))
    return learner


def shaped_batch(obs_dim: int, action_dim: int, batch_size: int) -> Batch:
    generator = torch.Generator().manual_seed(obs_dim)
    return Batch(
        observations=torch.randn(batch_size, obs_dim, generator=generator),
        next_observations=torch.randn(batch_size, obs_dim, generator=generator),
        actions=torch.rand(batch_size, action_dim, generator=generator) * 3 - 2,
        rewards=torch.randn(batch_size, generator=generator),
        terminations=(torch.rand(batch_size, generator=generator) < 0.3).float(),
    )


def test_a_diverged_target_critic_shows_as_nan_as_on_the_handwritten_path(fused):
    """torch.minimum propagates NaN; a C++ min that skipped it would hide a diverged critic."""
    metrics = []
    for formulation in (HandwrittenFormulation(), fused):
        learner = learner_with_shapes(11, 3, batch_size=16)
        learner.formulation = formulation
        with torch.no_grad():
            learner.target_critic.biases[2][1].fill_(float("nan"))  # member 1's output
        torch.manual_seed(2)
        schedule = update_schedule(101, learning_starts=100, policy_frequency=2,
                                   target_network_frequency=2)  # fmt: skip
        metrics.append(learner.update(shaped_batch(11, 3, 16), schedule))
    nan = [{name: bool(torch.isnan(value)) for name, value in one.items()} for one in metrics]
    assert nan[0] == nan[1]
    assert all(nan[1][name] for name in ("qf1_loss", "qf2_loss", "qf_loss"))


def fused_learner(
    *, autotune: bool, fused: FusedFormulation, bf16_products: bool = False
) -> FastLearner:
    learner = learner_with_shapes(11, 3, batch_size=BF16_BATCH if bf16_products else 32)
    precision = "bf16" if bf16_products else "fp32"
    learner.args = dataclasses.replace(
        learner.args, autotune=autotune, fused_update=True, precision=precision
    )
    if not autotune:
        learner.alpha = learner.args.alpha
    learner.formulation = FusedFormulation(fused.extension, bf16_products)
    return learner


def fused_updates(learner: FastLearner, steps: range, *, policy_frequency: int) -> list[dict]:
    rows = learner.args.batch_size
    batches = [shaped_batch(11, 3, rows), shaped_batch(11, 3, rows)]
    metrics = []
    for step in steps:
        schedule = update_schedule(step, learning_starts=100, policy_frequency=policy_frequency,
                                   target_network_frequency=2)  # fmt: skip
        update = learner.update(batches[step % 2], schedule)
        metrics.append({name: value.clone() for name, value in update.items()})
    return metrics


def learner_state_tensors(learner: FastLearner) -> list[torch.Tensor]:
    """Every network tensor, log alpha, and every optimizer state tensor, in one order."""
    state = learner.state_dict()
    tensors = [state["log_alpha"]]
    for name in ("actor", "critic", "target_critic"):
        tensors.extend(state[name].values())
    for name in ("q_optimizer", "actor_optimizer", "alpha_optimizer"):
        for parameter_state in state[name]["state"].values():
            tensors.extend(parameter_state.values())
    return tensors


def assert_same_updates(ours: list[dict], theirs: list[dict]) -> None:
    for mine, other in zip(ours, theirs, strict=True):
        assert mine.keys() == other.keys()
        for name in mine:
            torch.testing.assert_close(mine[name], other[name], rtol=0, atol=0, msg=name)


@pytest.mark.parametrize(("autotune", "policy_frequency"), [(True, 2), (False, 2), (True, 3)])
def test_one_call_per_step_updates_as_the_handwritten_loop(
    fused, products_library, autotune, policy_frequency
):
    """fused_update.cpp's `update` (one call per training step, Adam and the targets included)
    against FastLearner's own loop over the hand-written formulation: the same draws in the same
    order, so the same values to float32 rounding, over steps with and without actor and target
    updates."""
    results = []
    for formulation in (fused, HandwrittenFormulation()):
        learner = fused_learner(autotune=autotune, fused=fused)
        learner.formulation = formulation
        torch.manual_seed(6)
        metrics = fused_updates(learner, range(101, 108), policy_frequency=policy_frequency)
        results.append((metrics, learner_state_tensors(learner), learner.alpha))
    (one_call, one_call_state, one_call_alpha), (loop, loop_state, loop_alpha) = results
    for mine, other in zip(one_call, loop, strict=True):
        assert mine.keys() == other.keys()
        for name in mine:
            torch.testing.assert_close(mine[name], other[name], rtol=1e-4, atol=1e-5, msg=name)
    assert ("alpha_loss" in one_call[-1]) == autotune
    for mine, other in zip(one_call_state, loop_state, strict=True):
        torch.testing.assert_close(mine, other, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(float(one_call_alpha), float(loop_alpha), rtol=1e-5, atol=0)
    if autotune:
        assert float(one_call_alpha) != 1.0  # alpha was tuned, so the comparison covers it


def test_one_call_updates_as_the_handwritten_loop_at_humanoids_shapes(fused, products_library):
    """The same comparison with Humanoid-v4's sizes (376 observations, 17 actions): inputs wider
    than the hidden layers, and an action scale other than 1. On one thread, as the trainer runs
    by default: the products' rounding depends on how many threads share them, and so would this
    test's result on the thread count a test before it left."""
    results = []
    with one_thread():
        for formulation in (fused, HandwrittenFormulation()):
            learner = learner_with_shapes(376, 17, batch_size=48)
            learner.formulation = formulation
            batch = shaped_batch(376, 17, 48)
            torch.manual_seed(6)
            for step in range(101, 105):
                schedule = update_schedule(step, learning_starts=100, policy_frequency=2,
                                           target_network_frequency=1)  # fmt: skip
                metrics = {
                    name: value.clone() for name, value in learner.update(batch, schedule).items()
                }
            results.append((metrics, learner_state_tensors(learner)))
    (one_call, one_call_state), (loop, loop_state) = results
    assert one_call.keys() == loop.keys() and "alpha_loss" in one_call
    for name in one_call:
        torch.testing.assert_close(one_call[name], loop[name], rtol=1e-4, atol=1e-5, msg=name)
    # Adam moves a weight whose gradient is near zero by up to its learning rate whichever way
    # rounding tips it, so the state is compared by each tensor's norm. Measured on one thread:
    # 3.4e-6 (ATen's products) and 5.3e-6 (oneDNN's) where MKL runs AVX-512 (Intel's kinds),
    # 1.4e-5 and 1.2e-5 where it runs AVX2 (AMD's kinds, as scripts/as-cpu-kind.sh presents
    # them); other draws differ by 0.6.
    assert max(differences(one_call_state, loop_state)) <= 1e-4


def test_a_loaded_state_is_what_the_one_call_update_steps(fused):
    """The one-call update keeps its tensor lists between calls; load_state_dict replaces the
    optimizers' state tensors, so a learner that trained before loading must step the loaded
    ones, and continue exactly as the learner it was loaded from."""
    original = fused_learner(autotune=True, fused=fused)
    fused_updates(original, range(101, 105), policy_frequency=2)
    resumed = fused_learner(autotune=True, fused=fused)
    fused_updates(resumed, range(101, 103), policy_frequency=2)  # its lists, then replaced
    # A deep copy stands in for the checkpoint file: optimizer states would share tensors.
    resumed.load_state_dict(copy.deepcopy(original.state_dict()))
    torch.manual_seed(8)
    expected = fused_updates(original, range(105, 110), policy_frequency=2)
    torch.manual_seed(8)
    got = fused_updates(resumed, range(105, 110), policy_frequency=2)
    assert_same_updates(got, expected)
    for mine, other in zip(learner_state_tensors(resumed), learner_state_tensors(original),
                           strict=True):  # fmt: skip
        torch.testing.assert_close(mine, other, rtol=0, atol=0)


# ---- --fused-update --precision bf16 -------------------------------------------------------------
# A batch long enough (sacbench.sac.products.MIN_ROUNDED_SIDE) for the products over the batch to
# round too. bfloat16 rounding moves each rounded value by up to 2^-9 of itself, and these steps'
# long-product results by 1e-3 to 6e-2 of their norm (measured); the fused and the eager path
# round the same operands, apart from the rare value that float32 summation order puts on the
# other side of a bfloat16 rounding boundary (their difference measured at most 7e-5 of a norm).
BF16_BATCH = 96
SAME_ROUNDING = 5e-4  # of a tensor's norm
ROUNDING_SHOWS = 1e-2  # of a norm: the control, what rounding the long products changes


def relative_difference(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    assert ours.shape == theirs.shape
    norm = theirs.norm().item()
    assert norm > 0, "all zero, so the comparison would prove nothing"
    return (ours - theirs).norm().item() / norm


def differences(ours: list[torch.Tensor], theirs: list[torch.Tensor]) -> list[float]:
    return [relative_difference(*pair) for pair in zip(ours, theirs, strict=True)]


def test_with_bf16_products_one_call_updates_as_the_eager_path(fused):
    """Seven training steps with bf16 products: the one-call update within SAME_ROUNDING of the
    eager hand-written path with bf16 products, and beyond ROUNDING_SHOWS of float32 products."""
    states = {}
    for name, formulation in (
        ("one call", FusedFormulation(fused.extension, bf16_products=True)),
        ("eager", HandwrittenFormulation(torch.bfloat16)),
        ("fp32", fused),
    ):
        learner = fused_learner(autotune=True, fused=fused, bf16_products=True)
        learner.formulation = formulation
        torch.manual_seed(6)
        fused_updates(learner, range(101, 108), policy_frequency=2)
        states[name] = learner_state_tensors(learner)
    assert max(differences(states["one call"], states["eager"])) <= SAME_ROUNDING
    assert max(differences(states["one call"], states["fp32"])) >= ROUNDING_SHOWS


def trainers_learner(args: Args) -> object:
    """The learner the trainer builds for `args` (make_learner), on the CPU."""
    bounds = np.ones(3, dtype=np.float32)
    return make_learner(args=args, obs_dim=11, action_low=-bounds, action_high=bounds, device=CPU)


def test_the_trainers_default_args_choose_the_fused_update_with_bf16_products_by_precision(fused):
    for precision, rounded in (("bf16", True), ("fp32", False)):
        learner = trainers_learner(Args(precision=precision))
        assert isinstance(learner.formulation, FusedFormulation)
        assert learner.formulation.bf16_products is rounded


def test_what_the_fast_path_runs_where_the_fused_update_does_not_apply(fused):
    assert fast_gradients(Args(), CPU) == "fused"
    assert fast_gradients(Args(fused_update=False), CPU) == "handwritten"
    assert fast_gradients(Args(compile=True), CPU) == "autograd"
    # A GPU runs the autograd formulation with --compile, else the eager hand-written one.
    assert fast_gradients(Args(), torch.device("cuda")) == "handwritten"
    learner = trainers_learner(Args(fused_update=False))
    assert isinstance(learner.formulation, HandwrittenFormulation)
    # The default --fused-update applies to the fast path only: the reference path is refused
    # nothing and stays CleanRL's computation.
    assert not validate_args(Args(update_path="reference"))
    assert isinstance(trainers_learner(Args(update_path="reference")), ReferenceLearner)


@pytest.mark.parametrize(("obs_dim", "action_dim", "rows"), [(11, 3, 1), (376, 17, 1), (11, 3, 5)])
def test_fused_acting_draws_and_acts_as_the_eager_policy(
    fused, products_library, obs_dim, action_dim, rows
):
    """FastLearner.act with --fused-update (fused_update.cpp's `act`) against the eager policy's
    sample: the same draw (the generator left in the same state) and the same action to float32
    rounding, with an action scale and bias other than 1 and 0."""
    learner = learner_with_shapes(obs_dim, action_dim, batch_size=8)
    eager = copy.deepcopy(learner)
    learner.formulation = FusedFormulation(fused.extension)
    observations = torch.randn(rows, obs_dim, generator=torch.Generator().manual_seed(3))
    actions, next_draws = [], []
    for one in (learner, eager):
        torch.manual_seed(11)
        actions.append(one.act(observations))
        next_draws.append(torch.randn(2))
    assert actions[0].shape == (rows, action_dim)
    torch.testing.assert_close(actions[0], actions[1], rtol=0, atol=1e-6)
    # Acting reads the actor and writes nothing of it (a one-row head once summed into its bias).
    for mine, other in zip(learner.actor.parameters(), eager.actor.parameters(), strict=True):
        assert torch.equal(mine, other)
    torch.testing.assert_close(next_draws[0], next_draws[1], rtol=0, atol=0)
    torch.manual_seed(12)  # control: another draw is another action, beyond the tolerance
    assert (learner.act(observations) - actions[1]).abs().max() > 1e-3


def test_fused_acting_follows_the_trained_and_the_loaded_actor(fused):
    """act keeps the actor's tensors between calls: they must be the ones the update trains and
    load_state_dict writes into."""
    learner = fused_learner(autotune=True, fused=fused)
    observations = torch.randn(1, 11)
    learner.act(observations)  # its tensors collected before the updates
    fused_updates(learner, range(101, 105), policy_frequency=2)
    other = fused_learner(autotune=True, fused=fused)
    fused_updates(other, range(101, 107), policy_frequency=2)
    for source in (learner, other):
        if source is other:
            learner.load_state_dict(copy.deepcopy(other.state_dict()))
        eager = learner_with_shapes(11, 3, batch_size=32)  # the hand-written formulation's
        eager.load_state_dict(copy.deepcopy(source.state_dict()))
        results = []
        for one in (learner, eager):
            torch.manual_seed(13)
            results.append(one.act(observations))
        torch.testing.assert_close(results[0], results[1], rtol=0, atol=1e-6)


def test_the_one_call_update_refuses_a_malformed_optimizer(fused):
    learner = fused_learner(autotune=True, fused=fused)
    fused_updates(learner, range(101, 102), policy_frequency=2)
    arguments = list(learner._fused_arguments)
    arguments[3] = arguments[3][:3]  # the critic optimizer without its step tensors
    learner._fused_arguments = tuple(arguments)
    with pytest.raises(RuntimeError, match="an optimizer is 4 lists: parameters, exp_avg"):
        fused_updates(learner, range(102, 103), policy_frequency=2)


def test_the_cpp_refuses_strided_or_double_tensors_naming_them(fused):
    learner = learner_with_shapes(11, 3, batch_size=8)
    actor_tensors = [t.detach() for t in learner.actor.parameters()] + [
        learner.actor.action_scale,
        learner.actor.action_bias,
    ]
    strided = torch.randn(11, 8).t()
    with pytest.raises(RuntimeError, match="observations must be a contiguous float32 CPU tensor"):
        fused.extension.act(actor_tensors, strided, -5.0, 3.5, False)
    with pytest.raises(RuntimeError, match="observations must be a contiguous float32 CPU tensor"):
        fused.extension.act(actor_tensors, torch.randn(8, 11, dtype=torch.float64),
                            -5.0, 3.5, False)  # fmt: skip


def test_sections_are_timed_only_while_the_switch_is_on_and_the_updates_are_the_same(fused):
    """benchmarks/fused_sections.py times the trainer's own build: off (the trainer's state) its
    sections record nothing, on they record every update's sections, and either way the update
    computes the same values."""
    extension = fused.extension
    metrics = []
    extension.reset_section_times()
    try:
        for timing in (False, True):
            extension.set_section_times(timing)
            learner = fused_learner(autotune=True, fused=fused)
            metrics.append(fused_updates(learner, range(100, 104), policy_frequency=2))
            table = extension.section_times()
            if not timing:
                assert table == {}
    finally:
        extension.set_section_times(False)
        extension.reset_section_times()
    # The critics' each step; the actor's and alpha's together at each of 2 x 2 actor updates.
    assert table["optimizer: Adam steps"][1] == 4 + 2 * 2
    assert all(seconds > 0 for seconds, _ in table.values()), table
    assert_same_updates(metrics[1], metrics[0])


def test_each_checkout_and_source_version_gets_its_own_build(tmp_path):
    """torch rebuilds a named build whenever its source's path or text changes: two checkouts
    sharing one name would rebuild each other's for a minute at every switch."""
    flags = ["-O3"]
    other_checkout = tmp_path / "checkout" / SOURCE.name
    other_checkout.parent.mkdir()
    other_checkout.write_bytes(SOURCE.read_bytes())
    name = build_name(SOURCE, flags)
    assert build_name(SOURCE, flags) == name
    assert build_name(other_checkout, flags) != name  # the same text elsewhere
    assert build_name(SOURCE, ["-O2"]) != name
    before_edit = build_name(other_checkout, flags)
    other_checkout.write_bytes(SOURCE.read_bytes() + b"// edited\n")
    assert build_name(other_checkout, flags) != before_edit


def test_each_venv_and_python_installation_gets_its_own_build(fused):
    """torch writes the include and lib folders of its own installation and of the Python into a
    build's compile and link commands, and ninja rebuilds when they change: two venvs of one
    checkout (or of two Python 3.11 installations) would rebuild each other's at every start."""
    torch_dir, python_include = compiled_against()
    flags = compiler_flags()
    commands = (build_directory(build_name(SOURCE, flags)) / "build.ninja").read_text()
    assert f"-isystem {torch_dir}/include " in commands, commands
    assert f"-L{torch_dir}/lib " in commands, commands
    assert f"-isystem {python_include} " in commands, commands
    name = build_name(SOURCE, flags)
    assert build_name(SOURCE, flags, against=(torch_dir, python_include)) == name
    another_venv = "/elsewhere/.venv/lib/python3.11/site-packages/torch"
    assert build_name(SOURCE, flags, against=(another_venv, python_include)) != name
    another_python = "/usr/include/python3.11-elsewhere"
    assert build_name(SOURCE, flags, against=(torch_dir, another_python)) != name


def recorded_updates(run_dir: Path) -> list[dict]:
    """Each session's record of the update it ran, then the run's own (the latest session's)."""
    metadata = json.loads((run_dir / "metadata.json").read_text())
    return [session["update"] for session in metadata["sessions"]] + [metadata["update"]]


def test_the_fused_update_trains_a_real_run_by_default_and_is_a_session_setting(
    tmp_path, fused, capsys
):
    """A real run with the default update: the fused one, recorded with its products' library.
    Asked again with --no-fused-update, it is the same finished run (the flag changes how the
    update is computed, not what), so nothing is trained again."""
    run_dir = tmp_path / "run"
    assert train_in_process(run_dir, *SHORT_RUN, "--total-timesteps", "1200",
                            "--eval-episodes", "0") == 0  # fmt: skip
    metadata = json.loads((run_dir / "metadata.json").read_text())
    sessions = metadata["sessions"]
    assert [(s["session_args"]["fused_update"], s["exit_status"]) for s in sessions] == [
        (True, "completed")
    ]
    library = float32_products_library()
    fused_record = {"path": "fast", "gradients": "fused", "float32_products_library": library,
                    "bf16_products": False}  # fmt: skip
    if mkl_avx2_kernels_answered(fused.extension):  # this process's MKL was told "Intel"
        fused_record["mkl_kernels"] = "avx2"
    assert recorded_updates(run_dir) == [fused_record, fused_record]
    losses = dict(read_scalars(run_dir)["losses/qf_loss"])
    assert min(losses) <= 1100 and all(np.isfinite(value) for value in losses.values()), losses
    capsys.readouterr()
    assert train_in_process(run_dir, *SHORT_RUN, "--total-timesteps", "1200",
                            "--eval-episodes", "0", "--no-fused-update") == 0  # fmt: skip
    again = capsys.readouterr().out
    assert "holds a run that finished all 1200 steps" in again, again
    assert len(json.loads((run_dir / "metadata.json").read_text())["sessions"]) == 1


def test_fused_update_with_bf16_products_trains_a_real_run(tmp_path, fused):
    """--precision bf16 through the trainer's default update: 150 updates whose products over the
    batch of 64 round (MIN_ROUNDED_SIDE), recorded as a bf16 run; the trainer warns where the CPU
    has no bfloat16 units, as it does for the eager bf16 path."""
    run_dir = tmp_path / "run"
    trained = run_trainer(run_dir, *SHORT_RUN, "--total-timesteps", "1150",
                          "--precision", "bf16", "--eval-episodes", "0")  # fmt: skip
    metadata = json.loads((run_dir / "metadata.json").read_text())
    assert (metadata["args"]["precision"], metadata["args"]["batch_size"]) == ("bf16", 64)
    assert [
        (s["session_args"]["fused_update"], s["exit_status"]) for s in metadata["sessions"]
    ] == [(True, "completed")]
    assert metadata["update"]["gradients"] == "fused" and metadata["update"]["bf16_products"]
    losses = dict(read_scalars(run_dir)["losses/qf_loss"])
    assert list(losses) == [1100] and np.isfinite(losses[1100]), losses
    warned = "no bfloat16 matrix units" in trained.stderr
    assert warned == (not native_bf16_products(CPU)), trained.stderr


def train_by_default(
    run_dir: Path, environment: dict[str, str], *extra: str
) -> subprocess.CompletedProcess[str]:
    """A short `python -m sacbench.train` run with the default update, in its own process."""
    command = [sys.executable, "-m", "sacbench.train", "--run-dir", str(run_dir), *SHORT_RUN]
    return subprocess.run([*command, *extra], capture_output=True, text=True, env=environment)


FALLBACK_WARNING = "training with the eager hand-written update instead"


def test_without_a_compiler_the_trainer_warns_once_why_and_trains_the_eager_update(tmp_path):
    """No C++ compiler on PATH (the venv's folder only, which holds python and the lock's ninja):
    one warning naming what to install, then the eager hand-written update trains the run, and
    metadata.json records it and why."""
    venv_bin = str(Path(sys.executable).parent)
    environment = {**os.environ, "PATH": venv_bin}
    run_dir = tmp_path / "run"
    completed = train_by_default(run_dir, environment, "--total-timesteps", "1100",
                                 "--eval-episodes", "0")  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    assert completed.stderr.count(FALLBACK_WARNING) == 1, completed.stderr
    needs = "fused_update.cpp on first use and needs a C++ compiler (c++ or g++) on PATH"
    assert needs in completed.stderr, completed.stderr
    assert "ninja" not in completed.stderr.split(needs)[1].split("\n")[0]  # the venv's is found
    run = recorded_updates(run_dir)[-1]
    assert run["gradients"] == "handwritten" and needs in run["fused_update_unavailable"], run
    assert (run_dir / "complete.json").is_file()


def test_a_build_folder_that_cannot_be_written_sends_the_trainer_to_the_eager_update(tmp_path):
    """$TORCH_EXTENSIONS_DIR below a file (a home folder that compute nodes cannot write behaves
    alike): the run trains with the eager update after one warning naming the folder, instead
    of failing."""
    not_a_folder = tmp_path / "torch_extensions"
    not_a_folder.write_text("a file, not a folder")
    environment = {**os.environ, "TORCH_EXTENSIONS_DIR": str(not_a_folder)}
    run_dir = tmp_path / "run"
    completed = train_by_default(run_dir, environment, "--total-timesteps", "1100",
                                 "--eval-episodes", "0")  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    assert completed.stderr.count(FALLBACK_WARNING) == 1, completed.stderr
    why = f"cannot write into build folder {not_a_folder}/sacbench_fused_update_"
    assert why in completed.stderr, completed.stderr
    run = recorded_updates(run_dir)[-1]
    assert run["gradients"] == "handwritten" and why in run["fused_update_unavailable"], run
    assert (run_dir / "complete.json").is_file()


def test_the_build_runs_the_locks_ninja_without_the_venv_on_path(monkeypatch, tmp_path):
    """A trainer started by its venv's python without the venv on PATH (under Snakemake, say)
    still builds with the lock's ninja wheel: torch runs `ninja` from PATH."""
    import ninja
    from torch.utils.cpp_extension import is_ninja_available

    monkeypatch.setenv("PATH", str(tmp_path))  # neither the venv's folder nor the system's
    assert shutil.which("ninja") is None and not is_ninja_available()
    with ninja_on_path():
        found = shutil.which("ninja")
        assert is_ninja_available()
    assert found is not None and Path(found).parent == Path(ninja.BIN_DIR)
    assert os.environ["PATH"] == str(tmp_path)  # as it was


def test_builds_take_turns_where_the_file_system_refuses_locks(tmp_path, monkeypatch):
    """Lustre mounted without `flock` refuses flock(2) with ENOSYS. The build's lock is then its
    O_EXCL record: a second build waits for the first instead of failing (which would have
    sent every trainer to the eager update), and a killed build's baton is still cleared."""

    def refused(descriptor: int, operation: int) -> None:
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(fcntl, "flock", refused)
    directory = tmp_path / "build"
    directory.mkdir()
    (directory / TORCH_BATON).touch()
    entered = threading.Event()

    def second_build() -> None:
        with exclusive_build(directory):
            entered.set()

    with exclusive_build(directory):
        assert not (directory / TORCH_BATON).exists()
        record = json.loads((directory / LOCK_FILE_NAME).read_text())
        assert record["lock"] == "record" and record["pid"] == os.getpid(), record
        waiting = threading.Thread(target=second_build)
        waiting.start()
        assert not entered.wait(3 * BUILD_WAIT_SECONDS + 1), "the second build did not wait"
    waiting.join(timeout=60)
    assert entered.is_set(), "the second build never got its turn"
    assert not (directory / LOCK_FILE_NAME).exists()


def test_two_trainers_that_build_at_once_on_a_fresh_cache_both_train(tmp_path, monkeypatch):
    """Two trainers started together on an empty $TORCH_EXTENSIONS_DIR: one builds while the
    other waits, then both train the fused update. The build directory also holds the baton of a
    build that was killed (torch's lock file, which torch alone would wait on forever): it must
    stop neither."""
    extensions = tmp_path / "torch_extensions"
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(extensions))
    environment = dict(os.environ)
    killed_build = build_directory(build_name(SOURCE, compiler_flags()))
    assert killed_build.parent == extensions
    killed_build.mkdir(parents=True)
    (killed_build / TORCH_BATON).touch()
    run_dirs = [tmp_path / "first", tmp_path / "second"]
    extra = ("--total-timesteps", "1150", "--eval-episodes", "0")
    trainers = [
        subprocess.Popen(
            train_command(run_dir, *SHORT_RUN, *extra),
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for run_dir in run_dirs
    ]
    try:
        outputs = [trainer.communicate(timeout=900) for trainer in trainers]
    finally:
        for trainer in trainers:
            trainer.kill()
    for trainer, (_, stderr) in zip(trainers, outputs, strict=True):
        assert trainer.returncode == 0, stderr
        assert FALLBACK_WARNING not in stderr, stderr
    for run_dir in run_dirs:
        assert recorded_updates(run_dir)[-1]["gradients"] == "fused"
        assert dict(read_scalars(run_dir)["losses/qf_loss"]).keys() == {1100}
    assert not (killed_build / TORCH_BATON).exists()


def loads_through_cpp_extension(extensions: Path) -> bool:
    """Whether a new process that loads the fused update from the build folders under
    `extensions` imports torch.utils.cpp_extension to do it (after checking that what it loaded
    runs an update's library call)."""
    script = (
        "import sys\n"
        "from sacbench.sac.fused import fused_update_extension\n"
        "assert fused_update_extension().float32_products() in ('aten', 'onednn')\n"
        "print('torch.utils.cpp_extension' in sys.modules)\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "TORCH_EXTENSIONS_DIR": str(extensions)},
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert loaded.returncode == 0, loaded.stderr
    return {"True\n": True, "False\n": False}[loaded.stdout]


def test_a_build_that_torch_loaded_is_imported_again_without_cpp_extension(fused, tmp_path):
    """A trainer start imports the library that torch's load() built and imported before, as
    load() imports it, without importing torch.utils.cpp_extension (its setuptools costs 0.1 s of
    CPU per start). It trusts only the library recorded then: once the file changed, the load
    goes through torch again, which records it anew."""
    built = build_directory(build_name(SOURCE, compiler_flags()))
    extensions = tmp_path / "torch_extensions"
    copied = extensions / built.name
    shutil.copytree(built, copied)  # times kept: torch finds nothing to rebuild
    assert not loads_through_cpp_extension(extensions)
    library = copied / f"{built.name}.so"
    recorded = json.loads((copied / LOADED_RECORD).read_text())
    os.utime(library, ns=(recorded["mtime_ns"] + 10**9, recorded["mtime_ns"] + 10**9))
    assert loads_through_cpp_extension(extensions)
    rewritten = json.loads((copied / LOADED_RECORD).read_text())
    assert rewritten == {**recorded, "mtime_ns": library.stat().st_mtime_ns} != recorded
    assert not loads_through_cpp_extension(extensions)


def onednn_matmuls_in_one_update(fused: FusedFormulation, capfd) -> int:
    """How many oneDNN matmul primitives one float32 training step (critic, actor and alpha
    updates) executes, from oneDNN's own verbose log."""
    learner = fused_learner(autotune=True, fused=fused)
    torch.manual_seed(6)
    capfd.readouterr()
    with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
        fused_updates(learner, range(101, 102), policy_frequency=1)
    log = capfd.readouterr().out
    return sum("primitive,exec" in line and "matmul" in line for line in log.splitlines())


@needs_onednn_matmul
def test_the_chosen_library_multiplies_the_fused_updates_float32_products(fused, capfd):
    counts = {}
    for library in FLOAT32_PRODUCTS_LIBRARIES:
        with float32_products_through(fused.extension, library):
            counts[library] = onednn_matmuls_in_one_update(fused, capfd)
    assert counts["aten"] == 0
    # Every product of a step with one actor update: the critic step's 16 (8 per member: its
    # target's two layers and three weight or input gradients besides its own two forward
    # layers) and the actor's, dozens in all.
    assert counts["onednn"] >= 30, counts


def test_the_library_this_cpu_runs_by_default_is_the_one_the_build_uses(fused):
    assert fused.extension.float32_products() == float32_products_library(environ={})


@pytest.mark.skipif(
    ONEDNN_MISSING is None, reason="oneDNN's matmul runs on this CPU: nothing to refuse"
)
def test_onednn_products_on_a_cpu_that_cannot_run_them_stop_the_trainer_before_its_run_dir(
    tmp_path,
):
    run_dir = tmp_path / "run"
    environment = {**os.environ, FLOAT32_PRODUCTS_VARIABLE: "onednn"}
    completed = train_by_default(run_dir, environment)
    assert completed.returncode != 0
    assert f"${FLOAT32_PRODUCTS_VARIABLE} is 'onednn'" in completed.stderr, completed.stderr
    assert f"lack {ONEDNN_MISSING}" in completed.stderr, completed.stderr
    assert "Traceback" not in completed.stderr, completed.stderr
    assert not run_dir.exists()


@pytest.mark.parametrize(
    ("variable", "value", "choices"),
    [
        (FLOAT32_PRODUCTS_VARIABLE, "mkl", "aten, onednn"),
        (ADAM_SUBNORMALS_VARIABLE, "flush", "zero, keep"),
        (MKL_KERNELS_VARIABLE, "fast", "avx2, own"),
    ],
)
def test_an_unknown_fused_update_setting_stops_the_trainer_before_its_run_dir(
    tmp_path, variable, value, choices
):
    run_dir = tmp_path / "run"
    completed = train_by_default(run_dir, {**os.environ, variable: value})
    assert completed.returncode != 0
    assert f"${variable} is {value!r}; it must be one of {choices}" in completed.stderr, (
        completed.stderr
    )
    assert "Traceback" not in completed.stderr, completed.stderr
    assert not run_dir.exists()


def learner_with_a_dead_unit(fused: FusedFormulation, *, subnormal_moment: float) -> FastLearner:
    """A fused learner whose critics' first hidden unit 7 never opens (its bias far below any
    input's reach), after two updates, with that unit's outgoing weights' first Adam moments set
    to `subnormal_moment`: what a real run's moments become as they decay for a dead unit."""
    learner = fused_learner(autotune=True, fused=fused)
    with torch.no_grad():
        learner.critic.biases[0][:, :, 7] = -1e6
    torch.manual_seed(6)
    fused_updates(learner, range(101, 103), policy_frequency=2)
    moments = learner.q_optimizer.state[learner.critic.weights[1]]["exp_avg"]
    assert not moments[:, 7, :].any()  # a dead unit's weights get zero gradients
    moments[:, 7, :] = subnormal_moment
    return learner


@needs_sse
def test_adam_steps_take_subnormal_moments_as_zero_and_leave_every_parameter_as_it_was(fused):
    """The fused update's Adam steps treat subnormal floats as zero (by default): a dead unit's
    decaying first moments become zero instead of staying subnormal (where x86 arithmetic is
    slow), and every parameter comes out bit for bit as with IEEE subnormals. Afterwards the
    thread computes with subnormals again (the environment and acting run there)."""
    subnormal = 1e-39
    assert 0 < subnormal < torch.finfo(torch.float32).tiny
    assert fused.extension.adam_subnormals_are_zero()
    results = {}
    for as_zero in (True, False):
        learner = learner_with_a_dead_unit(fused, subnormal_moment=subnormal)
        fused.extension.set_adam_subnormals_as_zero(as_zero)
        # One thread, as the trainer runs by default: the setting is the calling thread's.
        try:
            with one_thread():
                torch.manual_seed(7)
                fused_updates(learner, range(103, 104), policy_frequency=2)
        finally:
            fused.extension.set_adam_subnormals_as_zero(True)
        results[as_zero] = learner
        assert torch.tensor([subnormal]).mul(0.5).item() != 0  # IEEE subnormals outside Adam
    flushed, kept = (
        results[as_zero].q_optimizer.state[results[as_zero].critic.weights[1]]["exp_avg"][:, 7, :]
        for as_zero in (True, False)
    )
    assert not flushed.any()
    assert ((kept > 0) & (kept < torch.finfo(torch.float32).tiny)).all()
    for name in ("actor", "critic", "target_critic"):
        for (key, mine), other in zip(
            getattr(results[True], name).state_dict().items(),
            getattr(results[False], name).state_dict().values(),
            strict=True,
        ):
            assert torch.equal(mine, other), f"{name}.{key}"
    assert torch.equal(results[True].log_alpha, results[False].log_alpha)


def test_the_adam_subnormals_setting_is_read_from_the_environment():
    assert adam_subnormals_as_zero(environ={})
    assert adam_subnormals_as_zero(environ={ADAM_SUBNORMALS_VARIABLE: "zero"})
    assert not adam_subnormals_as_zero(environ={ADAM_SUBNORMALS_VARIABLE: "keep"})


needs_mkl = pytest.mark.skipif(
    not torch.backends.mkl.is_available(), reason="this torch has no MKL, whose kernels these are"
)
RECORDED_CPUINFO = Path(__file__).parent / "cpuinfo"  # every CPU kind's (tests/cpuinfo/README.md)

# A fresh process that loads the trainer's build as the trainer does (fused_update_extension),
# then prints what MKL says of its code path, whether it was told "Intel", and how many call slots
# of libtorch_cpu lead to that answer.
MKL_KERNELS_PROBE = """
import json
import numpy as np
import torch
from sacbench.sac.args import Args
from sacbench.sac.cpu_features import mkl_code_path
from sacbench.sac.fused import fused_update_extension, mkl_avx2_kernels_answered
from sacbench.sac.learners import make_learner, update_record
extension = fused_update_extension()
bounds = {"action_low": -np.ones(2, np.float32), "action_high": np.ones(2, np.float32)}
learner = make_learner(args=Args(), obs_dim=3, device=torch.device("cpu"), **bounds)
print(json.dumps({"report": mkl_code_path(), "answered": mkl_avx2_kernels_answered(extension),
                  "record": update_record(learner)}))
"""


def mkl_kernels_in_a_fresh_trainer_process(environ: dict[str, str]) -> dict:
    completed = subprocess.run(
        [sys.executable, "-c", MKL_KERNELS_PROBE], env=environ, capture_output=True, text=True
    )
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.splitlines()[-1])


@needs_mkl
def test_mkl_runs_its_avx2_kernels_where_the_cpus_flags_call_for_them(fused):
    """Where mkl_avx2_kernels_apply holds for this CPU's flags (AVX2-only CPUs: Zen 3), the fused
    update tells MKL the CPU is Intel's before MKL's first product, and MKL then reports its AVX2
    code path; elsewhere, and with $SACBENCH_MKL_KERNELS=own, MKL is told nothing."""
    environ = {key: value for key, value in os.environ.items() if not key.startswith("MKL_")}
    environ.pop(MKL_KERNELS_VARIABLE, None)
    applies = mkl_avx2_kernels_apply(cpu_flags(read_cpuinfo()))
    default = mkl_kernels_in_a_fresh_trainer_process(environ)
    assert default["answered"] == applies, default
    assert (default["record"].get("mkl_kernels") == "avx2") == applies, default  # metadata.json's
    if applies:
        assert "Intel(R) AVX2) enabled processors" in default["report"], default
    own = mkl_kernels_in_a_fresh_trainer_process({**environ, MKL_KERNELS_VARIABLE: "own"})
    assert own["answered"] is False and "mkl_kernels" not in own["record"], own


@needs_mkl
def test_the_vendor_answer_reaches_both_of_mkls_checks_in_libtorch(fused):
    """Both call slots are found in this torch's libtorch_cpu (a torch whose MKL asks otherwise
    would find fewer and fail here, not silently in training); in a child process, since the
    answer holds for the rest of the process that gives it."""
    probe = (
        "from sacbench.sac.fused import FusedFormulation; "
        "print(FusedFormulation.build().extension.answer_mkl_vendor_checks())"
    )
    completed = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.split()[-1] == "2", completed.stdout


def test_mkls_kernels_can_be_chosen_where_the_cpu_allows():
    """$SACBENCH_MKL_KERNELS=own leaves MKL to its own choice everywhere; =avx2 runs its AVX2
    kernels where the flags call for them, and elsewhere is refused, saying why."""
    assert mkl_avx2_kernels_wanted(environ={MKL_KERNELS_VARIABLE: "own"}) is False
    zen3, zen4 = ((RECORDED_CPUINFO / f"{kind}.txt").read_text() for kind in ("zen3", "zen4"))
    assert mkl_avx2_kernels_wanted(cpuinfo=zen3, environ={MKL_KERNELS_VARIABLE: "avx2"})
    with pytest.raises(ValueError, match="does not call for MKL's AVX2 kernels \\(oneDNN's matmul"):
        mkl_avx2_kernels_wanted(cpuinfo=zen4, environ={MKL_KERNELS_VARIABLE: "avx2"})
    without_fma = zen3.replace(" fma ", " ")
    with pytest.raises(ValueError, match="its flags lack fma\\); unset it or set it to 'own'"):
        mkl_avx2_kernels_wanted(cpuinfo=without_fma, environ={MKL_KERNELS_VARIABLE: "avx2"})
