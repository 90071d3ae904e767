"""The private APIs sacbench relies on still exist and behave as sacbench uses them.

A failure here after an upgrade of torch, gymnasium or tensorboard names the API, the installed
versions and the callers; the fix belongs in sacbench/private_api.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.tensorboard import SummaryWriter

from sacbench import private_api
from sacbench.training.envs import make_env


def test_every_private_api_is_still_there():
    problems = private_api.missing()
    assert not problems, "\n".join(problems)


def test_a_dropped_api_is_reported_with_the_package_version(monkeypatch):
    monkeypatch.delattr(torch, "_fused_adam_")
    (problem,) = private_api.missing()
    assert problem.startswith("torch._fused_adam_")
    assert f"torch {torch.__version__}" in problem
    assert "sacbench.sac.adam" in problem and "sacbench.private_api.fused_adam_" in problem


def test_a_cpp_function_torch_no_longer_exports_is_reported(monkeypatch):
    monkeypatch.setattr(private_api, "MKLDNN_MATMUL_SYMBOL", "_ZN2at6native14mkldnn_matmulxEv")
    (problem,) = private_api.missing()
    assert problem.startswith("at::native::mkldnn_matmul")
    assert "libtorch_cpu lacks _ZN2at6native14mkldnn_matmulxEv" in problem
    assert "sacbench/sac/fused_update.cpp" in problem


def test_fused_adam_matches_torch_fused_adam_over_several_steps():
    torch.manual_seed(0)
    ours = [torch.randn(4, 3), torch.randn(3)]
    theirs = [tensor.clone().requires_grad_() for tensor in ours]
    optimizer = torch.optim.Adam(theirs, lr=1e-2, fused=True)
    states = [private_api.fused_adam_state(tensor) for tensor in ours]
    for _ in range(3):
        gradients = [torch.randn_like(tensor) for tensor in ours]
        for tensor, gradient in zip(theirs, gradients, strict=True):
            tensor.grad = gradient.clone()
        optimizer.step()
        steps = [state["step"] for state in states]
        private_api.foreach_add_(steps, 1)
        private_api.fused_adam_(
            ours,
            gradients,
            [state["exp_avg"] for state in states],
            [state["exp_avg_sq"] for state in states],
            steps,
            lr=1e-2,
            beta1=0.9,
            beta2=0.999,
            weight_decay=0.0,
            eps=1e-8,
        )
    for mine, torchs, state in zip(ours, theirs, states, strict=True):
        assert torch.equal(mine, torchs.detach())
        for key, value in optimizer.state[torchs].items():
            assert torch.equal(state[key], value), key


def test_foreach_lerp_moves_each_target_towards_its_source():
    targets = [torch.zeros(2), torch.full((3,), 4.0)]
    private_api.foreach_lerp_(targets, [torch.ones(2), torch.zeros(3)], 0.25)
    assert [target.tolist() for target in targets] == [[0.25, 0.25], [3.0, 3.0, 3.0]]


def test_relu_backward_zeroes_the_gradient_where_the_relu_was_inactive():
    activation = torch.tensor([[0.0, 1.5, 0.0, 2.0]])
    gradient = torch.tensor([[3.0, -4.0, 5.0, 6.0]])
    fresh = private_api.relu_backward(gradient, activation)
    assert gradient.tolist() == [[3.0, -4.0, 5.0, 6.0]]
    result = private_api.relu_backward_(gradient, activation)
    assert result.data_ptr() == gradient.data_ptr()
    assert gradient.tolist() == fresh.tolist() == [[0.0, -4.0, 0.0, 6.0]]


def test_time_limit_steps_round_trip_moves_the_truncation():
    env = make_env("Pusher-v4", seed=1)  # 100-step limit; a Pusher episode never terminates
    env.reset(seed=1)
    action = np.zeros(env.action_space.shape, dtype=np.float32)
    for _ in range(5):
        env.step(action)
    assert private_api.time_limit_steps(env) == 5
    private_api.set_time_limit_steps(env, 2)
    truncations = [env.step(action)[3] for _ in range(98)]
    env.close()
    assert truncations == [False] * 97 + [True]


def test_time_limit_steps_needs_a_time_limit():
    env = make_env("Pusher-v4", seed=1).unwrapped
    with pytest.raises(RuntimeError, match="no TimeLimit wrapper"):
        private_api.time_limit_steps(env)


def test_event_file_path_is_the_file_the_writer_writes(tmp_path: Path):
    writer = SummaryWriter(str(tmp_path))
    path = private_api.event_file_path(writer)  # the writer forgets it once closed
    writer.add_scalar("x", 1.0, 0)
    writer.close()
    assert list(tmp_path.iterdir()) == [path]


# A whole fast-path training run (checkpoints and the final evaluation included), then a learner's
# state saved and loaded as a resume loads it, all in one process that reports its modules.
TRAIN_THEN_RELOAD = """
import sys
import numpy as np
import torch
from sacbench.sac.args import Args
from sacbench.sac.learners import make_learner
from sacbench.training.cli import main

status = main(sys.argv[1:])
bounds = np.ones(1, dtype=np.float32)
learner = make_learner(
    args=Args(), obs_dim=4, action_low=-bounds, action_high=bounds, device=torch.device("cpu")
)
learner.load_state_dict(learner.state_dict())
print(status, "torch._dynamo" in sys.modules)
"""


def test_a_fast_path_training_process_never_imports_torch_dynamo(tmp_path: Path):
    """Importing torch._dynamo costs a trainer 1-2 s at start, which every smoke run and test pays:
    AdamWithoutDynamoImport keeps the optimizers' set-up, checkpoints and resume from doing it."""
    args = ["--env-id", "InvertedPendulum-v4", "--run-dir", str(tmp_path / "run")]
    args += ["--total-timesteps", "300", "--learning-starts", "200", "--batch-size", "32"]
    args += ["--checkpoint-interval", "100", "--eval-episodes", "2"]
    finished = subprocess.run(
        [sys.executable, "-c", TRAIN_THEN_RELOAD, *args], capture_output=True, text=True
    )
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.split()[-2:] == ["0", "False"], finished.stdout
    assert (tmp_path / "run" / "complete.json").is_file()
