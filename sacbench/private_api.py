"""Every private API of torch, gymnasium and tensorboard that sacbench uses, each behind one small
function. An upgrade that drops or changes one breaks here, not across the package, and
`missing()` (run by tests/test_private_api.py) names the API, the installed versions and the
callers. Why each is used: fused Adam and the foreach ops skip torch.optim's per-call bookkeeping
(docs/performance.md); threshold_backward is autograd's own ReLU backward, in place; the rest has
no public equivalent.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


def fused_adam_(
    parameters: list[torch.Tensor],
    gradients: list[torch.Tensor],
    exp_avgs: list[torch.Tensor],
    exp_avg_sqs: list[torch.Tensor],
    steps: list[torch.Tensor],
    *,
    lr: float,
    beta1: float,
    beta2: float,
    weight_decay: float,
    eps: float,
) -> None:
    """The kernel of torch.optim.Adam(fused=True).step(), without amsgrad or grad scaling."""
    torch._fused_adam_(
        parameters,
        gradients,
        exp_avgs,
        exp_avg_sqs,
        [],
        steps,
        amsgrad=False,
        lr=lr,
        beta1=beta1,
        beta2=beta2,
        weight_decay=weight_decay,
        eps=eps,
        maximize=False,
        grad_scale=None,
        found_inf=None,
    )


def fused_adam_state(parameter: torch.Tensor) -> dict[str, torch.Tensor]:
    """The state torch.optim.Adam(fused=True) creates on a parameter's first step: torch's own
    layout, so that state_dict() and load_state_dict() keep working."""
    return {
        "step": torch.zeros((), dtype=torch.float32, device=parameter.device),
        "exp_avg": torch.zeros_like(parameter, memory_format=torch.preserve_format),
        "exp_avg_sq": torch.zeros_like(parameter, memory_format=torch.preserve_format),
    }


def _undecorated_optimizer_method(name: str) -> Callable[..., Any]:
    method = getattr(torch.optim.Optimizer, name)
    return getattr(method, "__wrapped__", method)


class AdamWithoutDynamoImport(torch.optim.Adam):
    """torch.optim.Adam whose construction, state_dict() and load_state_dict() do not import
    torch._dynamo. torch wraps those Optimizer methods in torch._disable_dynamo, which imports
    torch._dynamo on their first call (1-2 s, more than a smoke run's training) only to keep
    torch.compile from tracing them; sacbench never calls them in compiled code. The methods are
    torch's own, without that wrapper, so state dicts are torch's."""

    add_param_group = _undecorated_optimizer_method("add_param_group")
    state_dict = _undecorated_optimizer_method("state_dict")
    load_state_dict = _undecorated_optimizer_method("load_state_dict")


def foreach_add_(tensors: list[torch.Tensor], value: float) -> None:
    torch._foreach_add_(tensors, value)


def foreach_lerp_(targets: list[torch.Tensor], sources: list[torch.Tensor], weight: float) -> None:
    """targets <- targets + weight * (sources - targets), every pair in one call."""
    torch._foreach_lerp_(targets, sources, weight)


def relu_backward_(gradient: torch.Tensor, activation: torch.Tensor) -> torch.Tensor:
    """The gradient through a ReLU, in place: zero where the ReLU's output is zero."""
    return torch.ops.aten.threshold_backward.grad_input(
        gradient, activation, 0, grad_input=gradient
    )


def relu_backward(gradient: torch.Tensor, activation: torch.Tensor) -> torch.Tensor:
    """The same into a new tensor, for a gradient that is an expanded (shared) view."""
    return torch.ops.aten.threshold_backward.default(gradient, activation, 0)


def eager_random_in_compiled_code() -> None:
    """Make compiled code draw random numbers with eager randn: inductor's own random kernels
    would draw other numbers, and the run would no longer match an eager one."""
    from torch._inductor import config as inductor_config

    inductor_config.fallback_random = True


def _time_limit(env: Any) -> Any:
    from gymnasium.wrappers import TimeLimit

    layer = env
    while not isinstance(layer, TimeLimit):
        layer = getattr(layer, "env", None)
        if layer is None:
            raise RuntimeError(f"{env} has no TimeLimit wrapper, so no episode step count")
    return layer


def time_limit_steps(env: Any) -> int:
    """The steps taken in the current episode, as gymnasium's TimeLimit counts them."""
    return _time_limit(env)._elapsed_steps


def set_time_limit_steps(env: Any, steps: int) -> None:
    """Continue an episode restored mid-way: it is truncated at the same step as before."""
    _time_limit(env)._elapsed_steps = steps


def event_file_path(writer: Any) -> Path:
    """The file a torch.utils.tensorboard SummaryWriter writes to."""
    return Path(writer.file_writer.event_writer._file_name)


def torch_extensions_root() -> Path:
    """torch.utils.cpp_extension.get_default_build_root(), without importing that module: it
    imports setuptools, 0.1 s of CPU at every trainer start (Intel Xeon with AMX)."""
    from torch import _appdirs

    return Path(os.path.realpath(_appdirs.user_cache_dir(appname="torch_extensions")))


# ---- the check ---------------------------------------------------------------------------------


def _versions(*packages: str) -> str:
    return ", ".join(f"{name} {importlib.metadata.version(name)}" for name in packages)


# at::native::mkldnn_matmul(const Tensor&, const Tensor&, const Tensor&, float, float), as the C++
# compiler names it: fused_update.cpp declares it (torch installs no header for it) and calls it.
MKLDNN_MATMUL_SYMBOL = "_ZN2at6native13mkldnn_matmulERKNS_6TensorES3_S3_ff"


def libtorch_cpu_exports(symbol: str) -> bool:
    """Whether torch's CPU library exports `symbol` (a C++ name as the compiler mangles it)."""
    (library,) = (Path(torch.__file__).parent / "lib").glob("libtorch_cpu.*")
    return hasattr(ctypes.CDLL(str(library)), symbol)


def _check_fused_adam() -> None:
    parameter, gradient = torch.tensor([1.0, -2.0]), torch.tensor([0.5, 0.25])
    theirs = parameter.clone().requires_grad_()
    optimizer = torch.optim.Adam([theirs], lr=0.1, fused=True)
    theirs.grad = gradient.clone()
    optimizer.step()
    state = fused_adam_state(parameter)
    layout = {key: (value.dtype, value.shape) for key, value in state.items()}
    torchs = {key: (value.dtype, value.shape) for key, value in optimizer.state[theirs].items()}
    assert layout == torchs, f"Adam(fused=True) state is {torchs}, expected {layout}"
    foreach_add_([state["step"]], 1)
    fused_adam_(
        [parameter], [gradient], [state["exp_avg"]], [state["exp_avg_sq"]], [state["step"]],
        lr=0.1, beta1=0.9, beta2=0.999, weight_decay=0.0, eps=1e-8,
    )  # fmt: skip
    assert torch.equal(parameter, theirs.detach()), "fused_adam_ differs from Adam(fused=True)"


def _check_adam_without_dynamo_import() -> None:
    for name in ("add_param_group", "state_dict", "load_state_dict"):
        method = getattr(AdamWithoutDynamoImport, name)
        assert not hasattr(method, "__wrapped__"), f"Optimizer.{name} is wrapped twice"
    parameter = torch.tensor([1.0, -2.0], requires_grad=True)
    torchs = torch.optim.Adam([parameter], lr=0.1)
    ours = AdamWithoutDynamoImport([parameter], lr=0.1)
    assert ours.param_groups == torchs.param_groups, f"{ours.param_groups} != {torchs.param_groups}"
    parameter.grad = torch.tensor([0.5, 0.25])
    torchs.step()
    ours.load_state_dict(torchs.state_dict())
    saved, expected = ours.state_dict(), torchs.state_dict()
    assert saved["param_groups"] == expected["param_groups"], "param_groups differ after a load"
    for key, value in expected["state"][0].items():
        assert torch.equal(saved["state"][0][key], value), f"state {key!r} differs after a load"


def _check_mkldnn_matmul() -> None:
    assert libtorch_cpu_exports(MKLDNN_MATMUL_SYMBOL), f"libtorch_cpu lacks {MKLDNN_MATMUL_SYMBOL}"


def _check_foreach_lerp() -> None:
    targets = [torch.zeros(2)]
    foreach_lerp_(targets, [torch.ones(2)], 0.25)
    assert targets[0].tolist() == [0.25, 0.25], f"lerp gave {targets[0].tolist()}"


def _check_relu_backward() -> None:
    activation = torch.tensor([0.0, 1.5])
    assert relu_backward(torch.tensor([3.0, -4.0]), activation).tolist() == [0.0, -4.0]
    gradient = torch.tensor([3.0, -4.0])
    assert relu_backward_(gradient, activation).data_ptr() == gradient.data_ptr(), "not in place"
    assert gradient.tolist() == [0.0, -4.0], f"relu_backward_ gave {gradient.tolist()}"


def _check_fallback_random() -> None:
    from torch._inductor import config as inductor_config

    assert isinstance(inductor_config.fallback_random, bool), "fallback_random is not a flag"


def _check_time_limit() -> None:
    import gymnasium

    env = gymnasium.make("Pendulum-v1", max_episode_steps=10)
    env.reset(seed=0)
    env.step(env.action_space.sample())
    assert time_limit_steps(env) == 1, f"one step counted as {time_limit_steps(env)}"
    set_time_limit_steps(env, 9)
    truncated = env.step(env.action_space.sample())[3]
    env.close()
    assert truncated, "setting the step count does not move the truncation"


def _check_event_file_path() -> None:
    from torch.utils.tensorboard import SummaryWriter

    with tempfile.TemporaryDirectory() as directory:
        writer = SummaryWriter(directory)
        path = event_file_path(writer)
        writer.close()
        written = list(Path(directory).iterdir())
        assert written == [path], f"the writer wrote {written}, not {path}"


def _check_torch_extensions_root() -> None:
    from torch.utils.cpp_extension import get_default_build_root

    theirs = Path(get_default_build_root())
    assert torch_extensions_root() == theirs, f"{torch_extensions_root()} is not torch's {theirs}"


# (the API, the packages that provide it, its adapter, who uses it, a check of what sacbench needs)
CHECKS: tuple[tuple[str, tuple[str, ...], str, str, Callable[[], None]], ...] = (
    (
        "torch._fused_adam_, torch._foreach_add_ and Adam(fused=True)'s state layout",
        ("torch",),
        "fused_adam_, foreach_add_, fused_adam_state",
        "sacbench.sac.adam",
        _check_fused_adam,
    ),
    (
        "torch.optim.Optimizer's methods behind torch._disable_dynamo (__wrapped__)",
        ("torch",),
        "AdamWithoutDynamoImport",
        "sacbench.sac.adam",
        _check_adam_without_dynamo_import,
    ),
    (
        "at::native::mkldnn_matmul (a C++ function of libtorch_cpu with no installed header)",
        ("torch",),
        "MKLDNN_MATMUL_SYMBOL (and its declaration in sacbench/sac/fused_update.cpp)",
        "sacbench.sac.fused (--fused-update, where its float32 products go through oneDNN)",
        _check_mkldnn_matmul,
    ),
    (
        "torch._foreach_lerp_",
        ("torch",),
        "foreach_lerp_",
        "sacbench.sac.fast_learner",
        _check_foreach_lerp,
    ),
    (
        "torch.ops.aten.threshold_backward",
        ("torch",),
        "relu_backward_, relu_backward",
        "sacbench.sac.handwritten",
        _check_relu_backward,
    ),
    (
        "torch._inductor.config.fallback_random",
        ("torch",),
        "eager_random_in_compiled_code",
        "sacbench.sac.fast_learner (--compile)",
        _check_fallback_random,
    ),
    (
        "gymnasium TimeLimit._elapsed_steps",
        ("gymnasium",),
        "time_limit_steps, set_time_limit_steps",
        "sacbench.training.envs (checkpoints)",
        _check_time_limit,
    ),
    (
        "SummaryWriter.file_writer.event_writer._file_name",
        ("torch", "tensorboard"),
        "event_file_path",
        "sacbench.training.run_dir",
        _check_event_file_path,
    ),
    (
        "torch._appdirs.user_cache_dir, as cpp_extension.get_default_build_root calls it",
        ("torch",),
        "torch_extensions_root",
        "sacbench.sac.fused (where the fused update's build is kept)",
        _check_torch_extensions_root,
    ),
)


def missing() -> list[str]:
    """One line per private API that no longer works as sacbench uses it; empty when all do."""
    problems = []
    for api, packages, adapter, users, check in CHECKS:
        try:
            check()
        except Exception as error:  # noqa: BLE001 - any failure means the API changed
            problems.append(
                f"{api} is gone or changed in {_versions(*packages)} (used by {users}): "
                f"{type(error).__name__}: {error}; adapt sacbench.private_api.{adapter}"
            )
    return problems
