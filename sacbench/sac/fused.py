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
rounding; tests/test_fused.py), and the Adam steps take subnormal floats as zero, which changes
moments below 1.2e-38 and no parameter larger than 1e-24 (adam_subnormals_as_zero). With
`bf16_products` (--precision bf16) its long products round their operands to bfloat16 where
HandwrittenFormulation(torch.bfloat16) rounds them (sacbench.sac.products), and nothing else.

The C++ is compiled for the CPU it runs on, on first use (torch.utils.cpp_extension, which needs
a C++ compiler, and ninja: the lock's PyPI wheel; 20-40 seconds), and kept under
$TORCH_EXTENSIONS_DIR (by default ~/.cache/torch_extensions), one build per CPU kind, checkout,
version of the source, and Python and torch installation (a venv of its own); once torch has
built and imported it there, later starts import it directly (loaded_before). Processes that
build it at once take turns, on one host or on the hosts of a cluster that share the folder (a
lock around the build, `exclusive_build`), and a build killed halfway leaves nothing that stops
the next one.
CPU tensors only.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import os
import platform
import shutil
import sys
import sysconfig
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from sacbench.atomic import write_atomically, write_json_atomically
from sacbench.private_api import torch_extensions_root
from sacbench.run_lock import RunDirBusy, RunDirLock
from sacbench.sac.algorithm import LOG_STD_MIN, Actor
from sacbench.sac.cpu_features import (
    MKL_AVX2_FLAGS,
    cpu_flags,
    mkl_avx2_kernels_apply,
    mkl_code_path,
    mkl_runs_avx512,
    onednn_matmul_missing,
    read_cpuinfo,
)
from sacbench.sac.policy import LOG_STD_HALF_RANGE

# Resolved, links included: a tree whose source is a link to another's shares that tree's build.
SOURCE = (Path(__file__).parent / "fused_update.cpp").resolve()


class FusedUpdateUnavailable(RuntimeError):
    """The C++ update cannot be built here (no C++ compiler or ninja, or the build failed)."""


def ninja_directory() -> str | None:
    """The folder of the ninja that builds the C++: the lock's `ninja` wheel's (its BIN_DIR: the
    interpreter's own scripts folder, found even when a trainer runs without its venv on PATH,
    as under Snakemake), else the first on PATH; None where there is neither."""
    try:
        import ninja  # the PyPI wheel of requirements.lock
    except ImportError:
        ninja = None
    if ninja is not None and Path(ninja.BIN_DIR, "ninja").is_file():
        return str(ninja.BIN_DIR)
    found = shutil.which("ninja")
    return None if found is None else str(Path(found).parent)


def missing_build_tools() -> list[str]:
    """What torch.utils.cpp_extension needs to build the C++ that this machine lacks."""
    compiler = shutil.which("c++") or shutil.which("g++")
    missing = []
    if not compiler:
        missing.append("a C++ compiler (c++ or g++) on PATH (Debian: apt-get install g++)")
    if ninja_directory() is None:
        missing.append(f"ninja (pip install -r requirements.lock installs it into {sys.prefix})")
    return missing


def build_directory(name: str) -> Path:
    """Where the build called `name` is kept: $TORCH_EXTENSIONS_DIR/name, or torch's default root
    (~/.cache/torch_extensions)/name. Chosen here, not by torch, so that exclusive_build can lock
    it; Python's and torch's versions are in the name instead of torch's own folder for them."""
    return Path(os.environ.get("TORCH_EXTENSIONS_DIR") or torch_extensions_root()) / name


# What torch.utils.cpp_extension.load creates in a build directory while it builds there (its
# FileBaton), and removes when done, whether the build worked or not.
TORCH_BATON = "lock"


# How often a process waiting for another's build asks again.
BUILD_WAIT_SECONDS = 0.5


@contextlib.contextmanager
def exclusive_build(directory: Path) -> Iterator[None]:
    """One process at a time builds or loads in `directory`, on every host that shares it; the
    others wait their turn, then load what the first built. torch's own baton (TORCH_BATON)
    already keeps two builds apart, but a build killed before it removes that file leaves every
    later load waiting forever. This lock is the one that keeps a run dir to one trainer
    (sacbench.run_lock): flock where the file system locks across hosts, else (Lustre without
    `flock`, BeeGFS, NFS with node-local locks) a record created with O_EXCL, whose holder is
    judged by its pid or, on another host, by its lease. A holder that dies, however it dies,
    stops nobody for long, so while it is held no other process of this module is building
    here, and a baton found then is a killed build's: it is removed, and the build goes on
    (ninja rebuilds whatever that build left half done)."""
    lock = RunDirLock(directory, program="the fused update's build", folder="build folder")
    while True:
        try:
            lock.acquire()
            break
        except RunDirBusy:
            time.sleep(BUILD_WAIT_SECONDS)
    try:
        (directory / TORCH_BATON).unlink(missing_ok=True)
        yield
    finally:
        lock.release()


@contextlib.contextmanager
def ninja_on_path() -> Iterator[None]:
    """PATH with ninja_directory() first, for the block: torch.utils.cpp_extension runs `ninja`
    from PATH, which may not hold the interpreter's scripts folder (a trainer started by its
    venv's python without the venv activated)."""
    directory, before = ninja_directory(), os.environ.get("PATH")
    if directory is not None:
        os.environ["PATH"] = os.pathsep.join(filter(None, [directory, before]))
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PATH", None)
        else:
            os.environ["PATH"] = before


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


def compiler_flags() -> list[str]:
    """fused_update.cpp's flags. -fno-trapping-math lets GCC vectorize the loops that select
    between computed values (a ReLU mask after a multiply); it changes no result, only whether a
    floating-point exception could trap, and none is enabled. Where torch's own kernels run AVX2
    code (AVX2 or AVX-512 CPUs), CPU_CAPABILITY_AVX2 gives ATen's vectors their AVX2 form, whose
    exp, tanh and log are the Sleef functions torch's kernels call (linked from libtorch)."""
    flags = ["-O3", "-march=native", "-fno-trapping-math"]
    if torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512"):
        flags += ["-DCPU_CAPABILITY=AVX2", "-DCPU_CAPABILITY_AVX2"]
    return flags


def compiled_against() -> tuple[str, str]:
    """Where the build's headers and libraries come from: torch's installation (its include and
    lib folders) and this Python's headers. torch writes them into the build's compile and link
    commands, so a build made for one venv or Python installation is rebuilt by another."""
    # The Python headers as torch.utils.cpp_extension finds them (its POSIX scheme).
    return str(Path(torch.__file__).parent), sysconfig.get_path("include", scheme="posix_prefix")


def build_name(
    source: Path,
    flags: list[str],
    *,
    against: tuple[str, ...] | None = None,
) -> str:
    """The build's name: the CPU kind, and a digest of the source's path and text, the flags and
    the Python and torch it is built for and against (`against`: compiled_against()). torch keeps
    one build per name and rebuilds it whenever its source, its path or its compile command
    changes, so two checkouts on one machine (a worktree beside the main checkout, a CI clone),
    or two venvs of one checkout, would otherwise rebuild each other's, for 20-40 seconds at
    every switch, even at the same version; and a build for another Python or torch does not
    load."""
    against = compiled_against() if against is None else against
    built_for = f"{sys.version_info[:2]} {torch.__version__} {against}".encode()
    built_from = str(source).encode() + b"\0" + source.read_bytes() + " ".join(flags).encode()
    built_from += b"\0" + built_for
    digest = hashlib.sha256(built_from).hexdigest()[:8]
    return f"sacbench_fused_update_{cpu_signature()}_{digest}"


def kept_mkl_code_path(
    directory: Path,
    *,
    environ: Mapping[str, str] | None = None,
    report: Callable[[], str | None] = mkl_code_path,
) -> str | None:
    """MKL's report of its code path (cpu_features.mkl_code_path), kept in the build's folder
    `directory`: asking MKL costs 0.3-0.4 s of CPU in every process (it times the CPU's clock for
    that report), and the build's name already pins what the answer depends on, the CPU kind and
    torch's MKL. MKL's own settings ($MKL_*) can change its code path, so each set of them has its
    own file. An empty file keeps a report of None."""
    environ = os.environ if environ is None else environ
    settings = sorted((key, value) for key, value in environ.items() if key.startswith("MKL_"))
    digest = hashlib.sha256(repr(settings).encode()).hexdigest()[:8]
    kept = directory / f"mkl-code-path-{digest}.txt"
    try:
        return kept.read_text() or None
    except OSError:  # not asked yet, or a folder that cannot hold the answer
        pass
    answer = report()
    # Kept to save the next process the question; a folder that cannot be written keeps
    # nothing, and the build (which cannot be made there either) says why.
    with contextlib.suppress(OSError):
        write_atomically(kept, answer or "")
    return answer


FLOAT32_PRODUCTS_VARIABLE = "SACBENCH_FLOAT32_PRODUCTS"
FLOAT32_PRODUCTS_LIBRARIES = ("aten", "onednn")


def float32_products_library(
    *,
    cpuinfo: str | None = None,
    environ: Mapping[str, str] | None = None,
    mkl_report: Callable[[], str | None] = mkl_code_path,
) -> str:
    """Which library multiplies the fused update's float32 products: "aten" (ATen's, MKL's on
    x86, as on the eager path) or "onednn" (oneDNN's matmul primitive, through libtorch).
    - Where the CPU's flags do not let oneDNN's matmul run (AVX2-only CPUs): ATen's.
    - Where MKL runs its AVX-512 kernels (it says so in `mkl_report()`, cpu_features.mkl_code_path;
      Intel's AVX-512 CPUs): ATen's. On an Intel Xeon (Ice Lake) MKL's products made the fused
      update 1.16x-1.18x as fast as oneDNN's.
    - Elsewhere (AVX-512 CPUs where MKL keeps to its AVX2 kernels: AMD's Zen 4 and Zen 5):
      oneDNN's. On Zen 5 they made it 1.73x-1.81x as fast as MKL's.
    $SACBENCH_FLOAT32_PRODUCTS chooses instead where it is set (benchmarks time one against the
    other); a library this CPU cannot run is refused, naming the flags it lacks. Only the order
    of the products' sums differs between the two (float32 rounding)."""
    environ = os.environ if environ is None else environ
    flags = cpu_flags(read_cpuinfo() if cpuinfo is None else cpuinfo)
    missing = onednn_matmul_missing(flags)
    chosen = environ.get(FLOAT32_PRODUCTS_VARIABLE)
    if chosen is None:
        return "aten" if missing or mkl_runs_avx512(mkl_report()) else "onednn"
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


MKL_KERNELS_VARIABLE = "SACBENCH_MKL_KERNELS"
MKL_KERNELS_CHOICES = ("avx2", "own")


def mkl_avx2_kernels_wanted(
    *, cpuinfo: str | None = None, environ: Mapping[str, str] | None = None
) -> bool:
    """Whether the fused update answers MKL's vendor checks "Intel", so that MKL runs its AVX2
    kernels: where cpu_features.mkl_avx2_kernels_apply says so by the CPU's flags (on Zen 3 they
    made training 1.04-1.07x as fast, docs/performance.md). $SACBENCH_MKL_KERNELS chooses instead
    where it is set: "own" leaves MKL to its own choice (benchmarks time one against the other);
    "avx2" on a CPU whose flags do not call for them is refused, saying why."""
    environ = os.environ if environ is None else environ
    flags = cpu_flags(read_cpuinfo() if cpuinfo is None else cpuinfo)
    applies = mkl_avx2_kernels_apply(flags)
    chosen = environ.get(MKL_KERNELS_VARIABLE)
    if chosen is None:
        return applies
    if chosen not in MKL_KERNELS_CHOICES:
        raise ValueError(
            f"${MKL_KERNELS_VARIABLE} is {chosen!r}; it must be one of "
            f"{', '.join(MKL_KERNELS_CHOICES)} (or unset: chosen by the CPU)"
        )
    if chosen == "avx2" and not applies:
        lacking = sorted(MKL_AVX2_FLAGS - flags)
        why = f"its flags lack {' and '.join(lacking)}" if lacking else "oneDNN's matmul runs here"
        raise ValueError(
            f"${MKL_KERNELS_VARIABLE} is 'avx2', but this CPU does not call for MKL's AVX2 "
            f"kernels ({why}); unset it or set it to 'own'"
        )
    return chosen == "avx2"


def answer_mkl_vendor_checks(extension: Any) -> bool:
    """Have MKL run its AVX2 kernels in this process (fused_update.cpp, answer_mkl_vendor_checks),
    then call it once, so that it chooses its code path now: True where it asked and was told
    "Intel"; False where it had chosen before (an earlier product in the process), which leaves
    its choice as it was."""
    extension.answer_mkl_vendor_checks()
    torch.mm(torch.ones(8, 8), torch.ones(8, 8))
    return mkl_avx2_kernels_answered(extension)


def mkl_avx2_kernels_answered(extension: Any) -> bool:
    """Whether MKL runs its AVX2 kernels in this process because the extension told it the CPU
    is Intel's."""
    return extension.mkl_vendor_questions_answered() > 0


ADAM_SUBNORMALS_VARIABLE = "SACBENCH_ADAM_SUBNORMALS"
ADAM_SUBNORMALS_CHOICES = ("zero", "keep")


def adam_subnormals_as_zero(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the fused update's Adam steps treat subnormal floats (below 1.2e-38) as zero: yes,
    unless $SACBENCH_ADAM_SUBNORMALS is "keep" (benchmarks time one against the other). The
    first moments of a dead ReLU unit's weights decay through the subnormal range, where x86
    arithmetic is slow; their Adam steps (below 1e-31) are far below a float32 parameter's
    resolution, so the parameters are the same either way (fused_update.cpp,
    adam_subnormals_as_zero)."""
    environ = os.environ if environ is None else environ
    chosen = environ.get(ADAM_SUBNORMALS_VARIABLE, "zero")
    if chosen not in ADAM_SUBNORMALS_CHOICES:
        raise ValueError(
            f"${ADAM_SUBNORMALS_VARIABLE} is {chosen!r}; it must be one of "
            f"{', '.join(ADAM_SUBNORMALS_CHOICES)} (or unset: zero)"
        )
    return chosen == "zero"


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


# Written in a build folder once torch's load() has built and imported its library there: the
# library's size and modification time.
LOADED_RECORD = "loaded.json"


def _library_identity(library: Path) -> dict[str, int]:
    found = library.stat()
    return {"size": found.st_size, "mtime_ns": found.st_mtime_ns}


def record_loaded(directory: Path, name: str) -> None:
    """Record that torch built and imported the library called `name` in `directory`."""
    record = {"library": f"{name}.so", **_library_identity(directory / f"{name}.so")}
    write_json_atomically(directory / LOADED_RECORD, record)


def loaded_before(directory: Path, name: str) -> Any | None:
    """The library called `name` that torch's load() built and imported before in `directory`,
    imported as load() imports it but without importing torch.utils.cpp_extension (its
    setuptools costs 0.1 s of CPU, at every trainer start); None where no such load is recorded
    for the library as it is now (record_loaded), or where it does not import. Its name carries
    a digest of the source, the flags, Python and torch (build_name), so a library recorded
    under it is the one load() would build now."""
    library = directory / f"{name}.so"
    try:
        recorded = json.loads((directory / LOADED_RECORD).read_text())
        if recorded != {"library": library.name, **_library_identity(library)}:
            return None
        spec = importlib.util.spec_from_file_location(name, library)
        if spec is None or spec.loader is None:
            return None
        extension = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(extension)
    except (OSError, ValueError, ImportError):
        return None
    return extension


@functools.cache
def fused_update_extension() -> Any:
    """fused_update.cpp compiled for this CPU, or FusedUpdateUnavailable saying why not."""
    flags = compiler_flags()
    name = build_name(SOURCE, flags)
    directory = build_directory(name)
    # A refused $SACBENCH_FLOAT32_PRODUCTS, $SACBENCH_ADAM_SUBNORMALS or $SACBENCH_MKL_KERNELS
    # stops here.
    library = float32_products_library(mkl_report=functools.partial(kept_mkl_code_path, directory))
    subnormals_as_zero = adam_subnormals_as_zero()
    mkl_avx2_kernels = mkl_avx2_kernels_wanted()
    missing = missing_build_tools()
    if missing:
        raise FusedUpdateUnavailable(
            f"the fused update compiles {SOURCE.name} on first use and needs "
            f"{' and '.join(missing)}"
        )
    try:
        with exclusive_build(directory):
            extension = loaded_before(directory, name)
            if extension is None:
                from torch.utils.cpp_extension import load

                with ninja_on_path():
                    extension = load(
                        name,
                        sources=[str(SOURCE)],
                        extra_cflags=flags,
                        build_directory=str(directory),
                    )
                record_loaded(directory, name)
    except (RuntimeError, OSError, ImportError) as error:
        raise FusedUpdateUnavailable(f"building {SOURCE.name} failed: {error}") from error
    extension.set_float32_products(library)
    extension.set_adam_subnormals_as_zero(subnormals_as_zero)
    if mkl_avx2_kernels:
        answer_mkl_vendor_checks(extension)
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
