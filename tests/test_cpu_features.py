"""The choices made from CPU flags, against the recorded /proc/cpuinfo of every CPU kind the
project has run on (tests/cpuinfo/): which library multiplies the fused update's float32
products, whether oneDNN's matmul can run at all, and whether bfloat16 products run in hardware;
and MKL's report of its code path, which that choice also reads.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sacbench.sac.cpu_features import (
    cpu_flags,
    has_native_bf16,
    mkl_avx2_kernels_apply,
    mkl_runs_avx512,
    onednn_matmul_missing,
    read_cpuinfo,
)
from sacbench.sac.fused import (
    FLOAT32_PRODUCTS_VARIABLE,
    float32_products_library,
    kept_mkl_code_path,
    mkl_avx2_kernels_wanted,
)
from sacbench.sac.mixed_precision import native_bf16_products
from tests.workflow_copies import REPO

CPUINFO = Path(__file__).parent / "cpuinfo"

# MKL's report of its code path (the first line of its verbose mode), as MKL chooses it itself.
# The Intel kinds' and Zen 3's are recorded (tests/cpuinfo/*.mkl): on Zen 3 MKL runs its generic
# x86 path, its AVX2 kernels being for Intel's CPUs. Zen 4's and Zen 5's are taken as MKL's AVX2
# wording: like the generic one, it names no AVX-512 kernels, which is all the choice reads.
MKL_AVX2 = (
    "MKL_VERBOSE oneMKL 2024.0 Update 2 Product build 20240605 for Intel(R) 64 architecture "
    "Intel(R) Advanced Vector Extensions 2 (Intel(R) AVX2) enabled processors, Lnx 2.45GHz lp64 "
    "gnu_thread"
)


def recorded_mkl_report(kind: str) -> str:
    return (CPUINFO / f"{kind}.mkl").read_text().strip()


MKL_INTEL_AMX = recorded_mkl_report("intel-xeon-amx")

# kind: (MKL's report, the float32 products' library by default, bfloat16 products in hardware)
EXPECTED = {
    "zen3": (recorded_mkl_report("zen3"), "aten", False),  # AVX2 only: oneDNN's matmul does not run
    "zen4": (MKL_AVX2, "onednn", True),  # AVX-512 at 256-bit width, AVX512-BF16
    "zen5": (MKL_AVX2, "onednn", True),  # AVX-512 at full width, AVX512-BF16
    # AVX-512, AMX-BF16; MKL runs AVX-512 and AMX
    "intel-xeon-amx": (MKL_INTEL_AMX, "aten", True),
    # AVX-512 without BF16 (emulated); MKL runs AVX-512
    "intel-xeon-icelake": (recorded_mkl_report("intel-xeon-icelake"), "aten", False),
}


def recorded(kind: str) -> str:
    return (CPUINFO / f"{kind}.txt").read_text()


def mkl_report(kind: str):
    return lambda: EXPECTED[kind][0]


def test_every_recorded_kind_has_an_expectation():
    assert sorted(path.stem for path in CPUINFO.glob("*.txt")) == sorted(EXPECTED)


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_each_cpu_kind_chooses_by_its_flags_and_mkls_code_path(kind: str):
    report, library, native_bf16 = EXPECTED[kind]
    flags = cpu_flags(recorded(kind))
    assert "avx2" in flags and "fma" in flags  # the line was read, not an empty set
    chosen = float32_products_library(cpuinfo=recorded(kind), environ={}, mkl_report=lambda: report)
    assert chosen == library
    onednn_runs = onednn_matmul_missing(flags) is None
    assert onednn_runs == (kind != "zen3")
    assert (library == "onednn") == (onednn_runs and not mkl_runs_avx512(report))
    assert has_native_bf16(flags) == native_bf16
    assert native_bf16_products(torch.device("cpu"), cpuinfo=CPUINFO / f"{kind}.txt") == (
        native_bf16
    )


# The kinds on which the fused update tells MKL the CPU is Intel's, so that MKL runs its AVX2
# kernels: the AVX2-only ones, whose every float32 product is MKL's.
MKL_TOLD_INTEL = {"zen3"}


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_mkls_avx2_kernels_are_chosen_by_the_cpus_flags(kind: str):
    flags = cpu_flags(recorded(kind))
    assert mkl_avx2_kernels_apply(flags) == (kind in MKL_TOLD_INTEL)
    assert mkl_avx2_kernels_wanted(cpuinfo=recorded(kind), environ={}) == (kind in MKL_TOLD_INTEL)
    # Without one of the AVX2 code path's instruction sets, MKL keeps its own choice.
    assert not mkl_avx2_kernels_apply(flags - {"fma"})


def test_mkls_report_is_read_for_its_avx512_kernels():
    assert mkl_runs_avx512(EXPECTED["intel-xeon-icelake"][0])
    assert mkl_runs_avx512(MKL_INTEL_AMX)
    assert not mkl_runs_avx512(MKL_AVX2)
    assert not mkl_runs_avx512(None)
    # Without a report (no MKL), oneDNN's products wherever they run.
    assert float32_products_library(cpuinfo=recorded("intel-xeon-icelake"), environ={},
                                    mkl_report=lambda: None) == "onednn"  # fmt: skip


@pytest.mark.skipif(not torch.backends.mkl.is_available(), reason="this torch has no MKL")
def test_mkl_reports_its_code_path_here_without_printing_it():
    """In a fresh process: the report is MKL's header line, read once (MKL prints it only on
    its first verbose call), and nothing of it reaches the process's standard output."""
    code = (
        "from sacbench.sac.cpu_features import mkl_code_path; import torch\n"
        "print('before', flush=True)\n"
        "report = mkl_code_path()\n"
        "print('after', flush=True)\n"
        "assert mkl_code_path() is report  # asked once per process\n"
        "print(repr(report))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == ["before", "after"] and len(lines) == 3, done.stdout
    report = ast.literal_eval(lines[2])
    assert report.startswith("MKL_VERBOSE") and " architecture " in report
    assert mkl_runs_avx512(report) == ("AVX-512" in report)


def test_mkls_report_is_asked_once_per_build_folder_and_mkl_setting(tmp_path: Path):
    asked: list[str | None] = []

    def report(answer: str | None):
        return lambda: asked.append(answer) or answer

    build = tmp_path / "build"
    plain = {"PATH": "/usr/bin"}
    assert kept_mkl_code_path(build, environ=plain, report=report(MKL_INTEL_AMX)) == MKL_INTEL_AMX
    # Kept: a later process reads the file and does not ask MKL again.
    assert kept_mkl_code_path(build, environ=plain, report=report(MKL_AVX2)) == MKL_INTEL_AMX
    assert asked == [MKL_INTEL_AMX]
    # MKL's own settings can change its code path: they are asked for apart.
    avx2_only = {**plain, "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
    assert kept_mkl_code_path(build, environ=avx2_only, report=report(MKL_AVX2)) == MKL_AVX2
    # No report (no MKL, or its verbose mode already on) is kept as no report.
    verbose = {**plain, "MKL_VERBOSE": "1"}
    assert kept_mkl_code_path(build, environ=verbose, report=report(None)) is None
    assert kept_mkl_code_path(build, environ=verbose, report=report(MKL_INTEL_AMX)) is None
    assert asked == [MKL_INTEL_AMX, MKL_AVX2, None]
    # Another build (another CPU kind, torch or checkout) asks for its own.
    assert (
        kept_mkl_code_path(tmp_path / "other", environ=plain, report=report(MKL_AVX2)) == MKL_AVX2
    )


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_the_variable_chooses_any_library_the_cpu_can_run(kind: str):
    cpuinfo = recorded(kind)
    chosen = float32_products_library(
        cpuinfo=cpuinfo, environ={FLOAT32_PRODUCTS_VARIABLE: "aten"}, mkl_report=mkl_report(kind)
    )
    assert chosen == "aten"
    can_run_onednn = kind != "zen3"
    environ = {FLOAT32_PRODUCTS_VARIABLE: "onednn"}
    if can_run_onednn:
        assert float32_products_library(cpuinfo=cpuinfo, environ=environ) == "onednn"
    else:
        with pytest.raises(ValueError) as refused:
            float32_products_library(cpuinfo=cpuinfo, environ=environ)
        message = str(refused.value)
        assert f"${FLOAT32_PRODUCTS_VARIABLE} is 'onednn'" in message
        assert "lack avx512bw and avx512dq and avx512vl (or avx_ne_convert)" in message


def test_an_unknown_library_is_refused_by_name():
    with pytest.raises(ValueError, match=r"\$SACBENCH_FLOAT32_PRODUCTS is 'mkl'; it must be one"):
        float32_products_library(
            cpuinfo=recorded("zen5"), environ={FLOAT32_PRODUCTS_VARIABLE: "mkl"}
        )


def test_without_cpu_flags_nothing_optional_is_assumed(tmp_path: Path):
    assert float32_products_library(cpuinfo="", environ={}, mkl_report=lambda: None) == "aten"
    assert not native_bf16_products(torch.device("cpu"), cpuinfo=tmp_path / "absent")


def test_only_the_first_processors_flags_count_and_arm_features_are_read():
    two_processors = recorded("zen3") + "\nprocessor\t: 1\nflags\t\t: avx512bw avx512vl avx512dq\n"
    assert onednn_matmul_missing(cpu_flags(two_processors)) is not None
    graviton = "processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\nCPU part\t: 0xd40\n"
    assert cpu_flags(graviton) == {"fp", "asimd", "sve", "bf16", "i8mm"}


AS_CPU_KIND = REPO / "scripts" / "as-cpu-kind.sh"
# What a process that the script starts reads and chooses, as one JSON line.
CHOICES = """
import json, torch
from sacbench.sac import cpu_features
from sacbench.sac.fused import float32_products_library
info = cpu_features.read_cpuinfo()
print(json.dumps({
    "flags": sorted(cpu_features.cpu_flags(info)),
    "processors": info.count("processor\\t:"),
    "library": float32_products_library(),
    "native_bf16": cpu_features.has_native_bf16(cpu_features.cpu_flags(info)),
    "mkl_avx512": cpu_features.mkl_runs_avx512(cpu_features.mkl_code_path()),
    "aten": torch.backends.cpu.get_cpu_capability(),
}))
"""


@functools.cache
def why_no_private_mount() -> str | None:
    """Why as-cpu-kind.sh cannot mount a kind's cpuinfo here, or None where it can."""
    if os.geteuid() != 0:
        return "scripts/as-cpu-kind.sh needs root (a private mount of /proc/cpuinfo)"
    private_mount = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "true"], capture_output=True, text=True
    )
    if private_mount.returncode != 0:
        return f"no private mount namespace here (unshare --mount): {private_mount.stderr}"
    return None


def as_cpu_kind(kind: str, *command: str, timeout: int = 120) -> subprocess.CompletedProcess[str]:
    reason = why_no_private_mount()
    if reason:
        pytest.skip(reason)
    return subprocess.run(
        ["bash", str(AS_CPU_KIND), kind, *command],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )


def checked_flags() -> frozenset[str]:
    """The flags that as-cpu-kind.sh requires of this machine where a kind has them."""
    listed = re.search(r"^for flag in (.*?); do", AS_CPU_KIND.read_text(), re.M | re.S)
    assert listed, "scripts/as-cpu-kind.sh lists no flags"
    return frozenset(listed.group(1).replace("\\", " ").split())


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_a_command_run_as_a_cpu_kind_chooses_as_that_kind(kind: str):
    done = as_cpu_kind(kind, sys.executable, "-c", CHOICES)
    if done.returncode == 2 and "cannot present" in done.stderr:
        pytest.skip(done.stderr.strip())
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    report, library, native_bf16 = EXPECTED[kind]
    assert seen["flags"] == sorted(cpu_flags(recorded(kind)))
    # Every processor of this machine keeps its entry.
    assert seen["processors"] == read_cpuinfo().count("processor\t:")
    assert (seen["library"], seen["native_bf16"]) == (library, native_bf16)
    assert seen["mkl_avx512"] == mkl_runs_avx512(report)
    assert seen["aten"] == ("AVX2" if kind == "zen3" else "AVX512")


# The compiler's macros for the instruction sets that the update's C++ and inductor's kernels can
# use, and the cpuinfo flag each one follows; and SSE4a, which AMD's kinds have and Intel's CPUs
# lack.
COMPILED_FOR = {
    "__SSE4A__": "sse4a",
    "__FMA__": "fma",
    "__AVX2__": "avx2",
    "__AVX512F__": "avx512f",
    "__AVX512BW__": "avx512bw",
    "__AVX512BF16__": "avx512_bf16",
    "__AVX512FP16__": "avx512_fp16",
    "__AMX_BF16__": "amx_bf16",
}


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_native_builds_as_a_cpu_kind_are_for_that_kinds_instruction_sets(kind: str):
    """`-march=native` asks the CPU that compiles: as a kind, the fused update and inductor's
    kernels must be compiled for the kind's instruction sets, or a test as Zen 3 on an AVX-512
    machine runs code that Zen 3 cannot; and for none this machine lacks, or it could not run
    them. Inside a presentation, the machine's own flags are the ones the presentation passed on."""
    if shutil.which("g++") is None:
        pytest.skip("no g++ here: nothing is compiled with -march=native")
    done = as_cpu_kind(
        kind,
        "bash",
        "-c",
        'echo "$AS_CPU_KIND_MACHINE_FLAGS" && echo | "$CXX" -march=native -dM -E -x c++ -',
    )
    if done.returncode == 2 and "cannot present" in done.stderr:
        pytest.skip(done.stderr.strip())
    assert done.returncode == 0, done.stderr
    passed_on, macros = done.stdout.split("\n", 1)
    machine = set(os.environ.get("AS_CPU_KIND_MACHINE_FLAGS", "").split()) or cpu_flags(
        read_cpuinfo()
    )
    assert set(passed_on.split()) == machine
    defined = {macro for macro in COMPILED_FOR if f"#define {macro} 1" in macros}
    flags = cpu_flags(recorded(kind))
    assert defined == {
        macro for macro, flag in COMPILED_FOR.items() if flag in flags and flag in machine
    }


def test_a_cpu_kind_with_a_flag_this_machine_lacks_is_refused(tmp_path: Path):
    lacking = sorted(checked_flags() - cpu_flags(read_cpuinfo()))
    if not lacking:
        pytest.skip("this CPU has every flag that as-cpu-kind.sh checks for")
    kind = tmp_path / "future.txt"
    kind.write_text(recorded("zen3").replace(" avx2 ", f" avx2 {' '.join(lacking)} "))
    done = as_cpu_kind(str(kind), "true")
    assert done.returncode == 2
    named = re.search(rf"cannot present {re.escape(str(kind))}: it lacks (\S+),", done.stderr)
    assert named and named.group(1) in lacking, done.stderr


# The tests of the update paths' numbers: each path against the reference or the hand-written
# loop, through each products library, which is where the libraries' kernels (MKL's AVX2 or
# AVX-512 ones, oneDNN's) and ATen's vectors show.
PATHS_AGREE = ("tests/test_sac.py", "tests/test_fused.py", "-k",
               "not build and not trainer and not real_run and not compiler")  # fmt: skip


def choosing_flags(cpuinfo: str) -> tuple[str, frozenset[str]]:
    """The vendor and the flags by which as-cpu-kind.sh (and the code it serves) choose code."""
    vendor = re.search(r"^vendor_id\s*:\s*(\S+)", cpuinfo, re.M)
    return (vendor.group(1) if vendor else "", cpu_flags(cpuinfo) & checked_flags())


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_the_update_paths_agree_as_each_kind_this_machine_can_present(kind: str):
    """A tolerance measured on one kind can be too tight for another's kernels: the paths'
    tests again, as each other kind (the fused update compiled for its instruction sets), on one
    thread as the trainer runs."""
    here = read_cpuinfo()
    if choosing_flags(here) == choosing_flags(recorded(kind)):
        pytest.skip(f"this machine chooses code as {kind} does: the suite itself is that run")
    done = as_cpu_kind(
        kind,
        "env",
        "OMP_NUM_THREADS=1",
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        *PATHS_AGREE,
        timeout=900,
    )
    if done.returncode == 2 and "cannot present" in done.stderr:
        pytest.skip(done.stderr.strip())
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


def test_an_intel_kind_whose_mkl_runs_avx512_is_refused_on_another_vendors_cpu():
    """MKL keeps its AVX-512 kernels for Intel's CPUs: on an AMD machine the script could cap MKL
    but not raise it to what an Intel kind's MKL runs. Checked from inside a presented AMD kind."""
    done = as_cpu_kind("zen4", "bash", str(AS_CPU_KIND), "intel-xeon-icelake", "true")
    if done.returncode == 2 and "cannot present zen4" in done.stderr:
        pytest.skip(done.stderr.strip())
    assert done.returncode == 2
    assert "cannot present intel-xeon-icelake: MKL runs its AVX-512 kernels only on Intel's" in (
        done.stderr
    )
    assert "this one is AuthenticAMD" in done.stderr
