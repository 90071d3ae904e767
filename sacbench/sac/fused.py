"""The hand-written update with its elementwise work fused, in C++ (`--fused-update`).

fused_update.cpp computes every step of sacbench.sac.handwritten's formulation (the critic step,
the actor's forward passes, the actor step, the alpha loss's log-probabilities) and the actions the
training loop acts with, with the same matrix products (ATen's, i.e. MKL's on a CPU, or oneDNN's
where float32_products_library chooses it), one critic member at a time so that each [B, 256]
activation is still in the core's L2 cache when the pass after its product reads it, and every
chain of elementwise work between two products fused into one pass (its exp, tanh and log
vectorized as torch's own kernels are). Each training step is one call of its `update`, which also
runs the Adam steps (torch's fused Adam kernel, on the optimizers' own state tensors) and the
target update, with the same random draws in the same order as FastLearner's loop over
HandwrittenFormulation. Only summation orders differ from the hand-written path (float32
rounding; tests/test_fused.py). With `bf16_products` (--precision bf16) its long products round
their operands to bfloat16 where HandwrittenFormulation(torch.bfloat16) rounds them
(sacbench.sac.products), and nothing else.

The C++ is compiled for the CPU it runs on, on first use (torch.utils.cpp_extension, which needs
a C++ compiler and ninja; 20-40 seconds), and kept under $TORCH_EXTENSIONS_DIR (by default
~/.cache/torch_extensions), one build per CPU kind, checkout and version of the source, until torch
changes.
CPU tensors only.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import platform
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from sacbench.sac.algorithm import LOG_STD_MIN, Actor
from sacbench.sac.cpu_features import cpu_flags, onednn_matmul_missing, read_cpuinfo
from sacbench.sac.policy import LOG_STD_HALF_RANGE

SOURCE = Path(__file__).resolve().parent / "fused_update.cpp"


class FusedUpdateUnavailable(RuntimeError):
    """The C++ update cannot be built here (no C++ compiler or ninja, or the build failed)."""


def missing_build_tools() -> list[str]:
    """The build tools torch.utils.cpp_extension needs that are not on PATH."""
    compiler = shutil.which("c++") or shutil.which("g++")
    return [name for name, found in (("a C++ compiler (c++ or g++)", compiler),
                                     ("ninja", shutil.which("ninja"))) if not found]  # fmt: skip


def cpu_signature() -> str:
    """A short digest of this CPU's model and instruction-set flags. The build is compiled with
    -march=native, so machines that share a home directory (a cluster's nodes) must not share a
    build made for another CPU kind: each kind gets its own."""
    described = platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        lines = cpuinfo.read_text().splitlines()
        wanted = ("model name", "flags", "Features", "CPU part")  # x86 and ARM spellings
        described += "".join(
            next((line for line in lines if line.startswith(key)), "") for key in wanted
        )
    return hashlib.sha256(described.encode()).hexdigest()[:12]


def compiler_flags(*, section_times: bool = False) -> list[str]:
    """fused_update.cpp's flags. -fno-trapping-math lets GCC vectorize the loops that select
    between computed values (a ReLU mask after a multiply); it changes no result, only whether a
    floating-point exception could trap, and none is enabled. Where torch's own kernels run AVX2
    code (AVX2 or AVX-512 CPUs), CPU_CAPABILITY_AVX2 gives ATen's vectors their AVX2 form, whose
    exp, tanh and log are the Sleef functions torch's kernels call (linked from libtorch)."""
    flags = ["-O3", "-march=native", "-fno-trapping-math"]
    if torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512"):
        flags += ["-DCPU_CAPABILITY=AVX2", "-DCPU_CAPABILITY_AVX2"]
    return flags + (["-DSACBENCH_SECTION_TIMES"] if section_times else [])


def build_name(source: Path, flags: list[str], *, section_times: bool = False) -> str:
    """The build's name: the CPU kind, and a digest of the source's path and text and the flags.
    torch keeps one build per name and rebuilds it whenever the source or its path changes, so
    two checkouts on one machine (a worktree beside the main checkout, a CI clone) would
    otherwise rebuild each other's, for 20-40 seconds each time, even at the same version."""
    built_from = str(source).encode() + b"\0" + source.read_bytes() + " ".join(flags).encode()
    digest = hashlib.sha256(built_from).hexdigest()[:8]
    kind = "_sections" if section_times else ""
    return f"sacbench_fused_update{kind}_{cpu_signature()}_{digest}"


FLOAT32_PRODUCTS_VARIABLE = "SACBENCH_FLOAT32_PRODUCTS"
FLOAT32_PRODUCTS_LIBRARIES = ("aten", "onednn")


def float32_products_library(
    *, cpuinfo: str | None = None, environ: Mapping[str, str] | None = None
) -> str:
    """Which library multiplies the fused update's float32 products: "onednn" (oneDNN's matmul
    primitive, through libtorch) wherever the CPU's flags let it run, else "aten" (ATen's, MKL's
    on x86, as on the eager path). On AMD Zen 5 oneDNN's products ran at twice MKL's rate, MKL
    keeping its AVX-512 kernels for Intel's CPUs; on an AVX2-only CPU oneDNN's matmul does not
    run at all. $SACBENCH_FLOAT32_PRODUCTS chooses instead where it is set (benchmarks time one
    against the other); a library this CPU cannot run is refused, naming the flags it lacks.
    Only the order of the products' sums differs between the two (float32 rounding)."""
    environ = os.environ if environ is None else environ
    flags = cpu_flags(read_cpuinfo() if cpuinfo is None else cpuinfo)
    missing = onednn_matmul_missing(flags)
    chosen = environ.get(FLOAT32_PRODUCTS_VARIABLE)
    if chosen is None:
        return "aten" if missing else "onednn"
    if chosen not in FLOAT32_PRODUCTS_LIBRARIES:
        raise ValueError(
            f"${FLOAT32_PRODUCTS_VARIABLE} is {chosen!r}; it must be one of "
            f"{', '.join(FLOAT32_PRODUCTS_LIBRARIES)} (or unset: chosen by the CPU)"
        )
    if chosen == "onednn" and missing:
        raise ValueError(
            f"${FLOAT32_PRODUCTS_VARIABLE} is 'onednn', but oneDNN's matmul cannot run on this "
            f"CPU: its /proc/cpuinfo flags lack {missing}; unset it or set it to 'aten'"
        )
    return chosen


@contextlib.contextmanager
def float32_products_through(extension: Any, library: str) -> Iterator[None]:
    """The extension's float32 products through `library` ("aten" or "onednn") in the block, then
    through the library chosen before (tests and benchmarks compare or profile the two)."""
    chosen = extension.float32_products()
    extension.set_float32_products(library)
    try:
        yield
    finally:
        extension.set_float32_products(chosen)


@functools.cache
def fused_update_extension(*, section_times: bool = False) -> Any:
    """fused_update.cpp compiled for this CPU, or FusedUpdateUnavailable saying why not. With
    `section_times`, a separate build that also times each of its sections in place
    (benchmarks/fused_sections.py reads them)."""
    missing = missing_build_tools()
    if missing:
        raise FusedUpdateUnavailable(
            f"--fused-update compiles {SOURCE.name} on first use and needs {' and '.join(missing)}"
            " on PATH (Debian: apt-get install g++; ninja: pip install ninja)"
        )
    from torch.utils.cpp_extension import load

    library = float32_products_library()
    flags = compiler_flags(section_times=section_times)
    try:
        extension = load(
            build_name(SOURCE, flags, section_times=section_times),
            sources=[str(SOURCE)],
            extra_cflags=flags,
        )
    except (RuntimeError, OSError) as error:
        raise FusedUpdateUnavailable(f"building {SOURCE.name} failed: {error}") from error
    extension.set_float32_products(library)
    return extension


def actor_tensors(actor: Actor) -> list[torch.Tensor]:
    """The actor's weights and biases, then its action scale and bias, as the C++ reads them."""
    layers = (actor.fc1, actor.fc2, actor.fc_mean, actor.fc_logstd)
    return [tensor.detach() for layer in layers for tensor in (layer.weight, layer.bias)] + [
        actor.action_scale,
        actor.action_bias,
    ]


def detached(module: torch.nn.Module) -> list[torch.Tensor]:
    return [tensor.detach() for tensor in module.parameters()]


ADAM_STATE = ("exp_avg", "exp_avg_sq", "step")  # after the parameters, in adam_of's order


def adam_arguments(optimizer: torch.optim.Adam) -> tuple[list[list[torch.Tensor]], list[float]]:
    """An optimizer as fused_update.cpp's update reads it (adam_of): its parameters, exp_avg,
    exp_avg_sq and step tensors, and lr, beta1, beta2, weight_decay, eps."""
    (group,) = optimizer.param_groups
    parameters = list(group["params"])
    states = [optimizer.state[parameter] for parameter in parameters]
    lists = [parameters, *([state[key] for state in states] for key in ADAM_STATE)]
    beta1, beta2 = group["betas"]
    return lists, [group["lr"], beta1, beta2, group["weight_decay"], group["eps"]]


@dataclass(frozen=True)
class FusedFormulation:
    """The fused update as FastLearner runs it: each training step's updates in one call of
    fused_update.cpp's `update` (FastLearner._fused_update), which also steps the optimizers and
    the targets, and the training loop's actions through its `act`. The same draws, in the same
    order, as FastLearner's loop over HandwrittenFormulation. With `bf16_products`, the products
    that HandwrittenFormulation(torch.bfloat16) rounds (--precision bf16) run in bfloat16 here
    too.
    """

    extension: Any
    bf16_products: bool = False

    @classmethod
    def build(cls, *, bf16_products: bool = False) -> FusedFormulation:
        return cls(fused_update_extension(), bf16_products)

    @torch.no_grad()
    def act(self, actor: list[torch.Tensor], observations: torch.Tensor) -> torch.Tensor:
        """The policy's actions for `observations` (`actor`: actor_tensors(actor)), the same draw
        and values as sacbench.sac.policy.sample_action_fast, without its log-probability's
        tensors."""
        return self.extension.act(
            actor, observations.contiguous(), LOG_STD_MIN, LOG_STD_HALF_RANGE, self.bf16_products
        )
