"""The order in which the test files run.

CI runs the suite in three pytest-xdist workers with `--dist loadfile --no-loadscope-reorder`:
each file goes whole to the next free worker, in collection order. The files below run real
workflows for minutes each; started first, heaviest first, they keep the workers busy to the end
instead of leaving one to finish a long file alone while the others idle (worker seconds per file
from a quiet two-worker run on 2026-12-03, AMD EPYC Zen 3). The order changes no result: every
test is independent of the others. A name that no longer matches a file stops the collection, so
the list cannot go stale.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest
from torch.utils.cpp_extension import get_default_build_root

# The trainer's default update on a CPU compiles its C++ on first use (20-40 s) into a build
# directory under $TORCH_EXTENSIONS_DIR, by default under ~/.cache. Fixed here, for the whole
# session and every process it starts, to the folder a trainer picks anyway, so that the
# trainers of tests that give them another HOME (W&B's tests), Snakemake's jobs and Slurm's load
# the one build that the first of them made (the others wait for it: sacbench.sac.fused).
os.environ.setdefault("TORCH_EXTENSIONS_DIR", get_default_build_root())

# Which kernels MKL runs is chosen once per process, at its first call: told the CPU is Intel's by
# the fused update, on AVX2-only CPUs, it runs its AVX2 kernels, whose sums round otherwise. A test
# process that loads the fused update (as the fixture below does) and a reference-path trainer it
# starts would then multiply alike only by chance, and runs that tests compare across processes
# must round alike. So every process of the session keeps MKL's own choice, except where a test
# unsets this for a process of its own (tests/test_fused.py, the default's kernels).
os.environ.setdefault("SACBENCH_MKL_KERNELS", "own")


@pytest.fixture(scope="session", autouse=True)
def fused_update_built() -> None:
    """The fused update built (or loaded) before any test starts a trainer, so that no trainer
    spends a test's time limit (a step awaited for 120 s) compiling it. Two workers take turns;
    where it cannot be built, trainers fall back to the eager update, as tests/test_fused.py
    checks, and so does this."""
    from sacbench.sac.fused import FusedUpdateUnavailable, fused_update_extension

    with contextlib.suppress(FusedUpdateUnavailable):
        fused_update_extension()


HEAVIEST_FIRST = (
    "test_slurm.py",  # 469 s, one Slurm cluster for the file
    "test_rerun_safety.py",  # 353 s
    "test_pipeline.py",  # 322 s
    "test_train_run.py",  # 251 s
    "test_faults.py",  # 174 s (alone, on a shared 2-core VM, 2026-12-03)
    "test_readme.py",  # 158 s
    "test_tracking.py",  # 101 s
    "test_benchmarks.py",  # 96 s
    "test_evaluation.py",  # 92 s
    "test_fused.py",  # 87 s
    "test_external_command.py",  # 87 s
    "test_commands.py",  # 60 s
    # The update paths' tests as each other CPU kind this machine can present (a build each):
    # about 75 s on an Intel Xeon with AMX, 2026-12-05; nothing to present on Zen 3.
    "test_cpu_features.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tests = Path(__file__).parent
    missing = [name for name in HEAVIEST_FIRST if not (tests / name).is_file()]
    if missing:
        raise pytest.UsageError(f"tests/conftest.py HEAVIEST_FIRST names no file: {missing}")
    rank = {name: position for position, name in enumerate(HEAVIEST_FIRST)}
    # Stable: each file's tests keep their order, and the other files theirs, after these.
    items.sort(key=lambda item: rank.get(item.path.name, len(HEAVIEST_FIRST)))
