#!/usr/bin/env bash
# Runs a command on this machine as another CPU kind presents itself to sacbench: the command sees
# a /proc/cpuinfo whose vendor, family, model, model name and flags are the kind's recorded ones
# (tests/cpuinfo/KIND.txt, or any file with such lines), and the libraries are capped to what they
# run on that kind: MKL (AVX2 kernels on AMD's CPUs, as MKL itself chooses by vendor), oneDNN and
# ATen (by the kind's flags). So the suite, or a trainer, can be run as Zen 3 on an AVX-512 machine
# and make every choice by the CPU's flags as there (sacbench/sac/cpu_features.py reads them).
#
# What it cannot change: code that asks the CPU itself (torch's CPUID checks before oneDNN's
# bfloat16 products; `-march=native`, with which the fused update is compiled for this CPU).
# This machine must have every flag of the kind that selects code here, or the kind's code could
# not run: a kind with more is refused, and so is an Intel kind with AVX-512 on another vendor's
# CPU, where MKL could not be raised to the AVX-512 kernels it runs on Intel's. Needs root, for a
# private mount of /proc/cpuinfo (sudo resets PATH: there, name the venv's python by its path).
#
# Usage: bash scripts/as-cpu-kind.sh KIND COMMAND [ARGUMENT ...]
#   KIND: zen3, zen4, zen5, intel-xeon-icelake or intel-xeon-amx, or a path to a cpuinfo file
# e.g., as root with the venv active:
#   bash scripts/as-cpu-kind.sh zen3 python -m pytest -n 3 --dist loadfile --max-worker-restart 0 tests
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
kinds=$(cd "$repo/tests/cpuinfo" && ls -- *.txt | sed 's/\.txt$//' | tr '\n' ' ')
if [[ $# -lt 2 ]]; then
  echo "usage: bash scripts/as-cpu-kind.sh KIND COMMAND [ARGUMENT ...] (KIND: ${kinds}or a cpuinfo file)" >&2
  exit 2
fi
kind=$1
shift
if [[ -f $kind ]]; then
  kind_file=$kind
elif [[ -f $repo/tests/cpuinfo/$kind.txt ]]; then
  kind_file=$repo/tests/cpuinfo/$kind.txt
else
  echo "as-cpu-kind: unknown kind '$kind' (kinds: ${kinds}or a cpuinfo file)" >&2
  exit 2
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "as-cpu-kind: needs root, to mount the kind's cpuinfo over /proc/cpuinfo for the command alone" >&2
  exit 2
fi

field() { grep -m1 -E "^$1[[:space:]]*:" "$2" | sed -E 's/^[^:]*:[[:space:]]*//' || true; }
kind_flags=" $(field flags "$kind_file") "
host_flags=" $(field flags /proc/cpuinfo) "
has() { [[ $kind_flags == *" $1 "* ]]; }

cannot_present() {
  echo "as-cpu-kind: this machine cannot present $kind: $1" >&2
  exit 2
}
# The flags by which sacbench, torch, oneDNN or MKL choose code on x86.
for flag in fma avx2 avx512f avx512bw avx512vl avx512dq avx512_vnni avx_vnni avx512_bf16 \
  avx512_fp16 avx_ne_convert amx_tile amx_bf16; do
  if has "$flag" && [[ $host_flags != *" $flag "* ]]; then
    cannot_present "it lacks $flag, which $kind has (code chosen for $kind could not run here)"
  fi
done
# MKL runs its AVX-512 kernels only on Intel's CPUs, and can be held below what it runs, not
# raised above it.
kind_vendor=$(field vendor_id "$kind_file")
host_vendor=$(field vendor_id /proc/cpuinfo)
if [[ $kind_vendor == GenuineIntel ]] && has avx512f && [[ $host_vendor != GenuineIntel ]]; then
  cannot_present "MKL runs its AVX-512 kernels only on Intel's CPUs, and this one is $host_vendor"
fi

# The kind's cpuinfo, one entry per processor of this machine, as the command will read it.
cpuinfo=$(mktemp)
trap 'rm -f "$cpuinfo"' EXIT
awk -v vendor="$kind_vendor" -v family="$(field 'cpu family' "$kind_file")" \
  -v model="$(field model "$kind_file")" -v name="$(field 'model name' "$kind_file")" \
  -v flags="$(field flags "$kind_file")" -F ':' '
  $1 ~ /^vendor_id[ \t]*$/ { print "vendor_id\t: " vendor; next }
  $1 ~ /^cpu family[ \t]*$/ { print "cpu family\t: " family; next }
  $1 ~ /^model[ \t]*$/ { print "model\t\t: " model; next }
  $1 ~ /^model name[ \t]*$/ { print "model name\t: " name; next }
  $1 ~ /^flags[ \t]*$/ { print "flags\t\t: " flags; next }
  { print }' /proc/cpuinfo >"$cpuinfo"

# MKL runs its AVX-512 kernels only on Intel's CPUs (the kind's own MKL report, where recorded, is
# tests/cpuinfo/KIND.mkl); oneDNN and ATen choose by the flags.
if [[ $kind_vendor != GenuineIntel ]] || ! has avx512f; then
  export MKL_ENABLE_INSTRUCTIONS=AVX2
elif ! has amx_bf16; then
  export MKL_ENABLE_INSTRUCTIONS=AVX512_E1
else
  unset MKL_ENABLE_INSTRUCTIONS
fi
if has amx_bf16; then
  unset ONEDNN_MAX_CPU_ISA
elif has avx512_bf16; then
  export ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16
elif has avx512_vnni; then
  export ONEDNN_MAX_CPU_ISA=AVX512_CORE_VNNI
elif has avx512f; then
  export ONEDNN_MAX_CPU_ISA=AVX512_CORE
else
  export ONEDNN_MAX_CPU_ISA=AVX2
fi
if has avx512f && has avx512bw && has avx512vl && has avx512dq; then
  export ATEN_CPU_CAPABILITY=avx512
else
  export ATEN_CPU_CAPABILITY=avx2
fi
# Inductor's cache does not key its kernels on ATen's capability: a kernel compiled for this CPU
# and run as another kind gave other numbers (tests/test_fast_compile.py): each kind gets its own.
export TORCHINDUCTOR_CACHE_DIR=${TMPDIR:-/tmp}/torchinductor_$(id -un)_as_$(basename "$kind_file" .txt)

unshare --mount --propagation private -- bash -c \
  'mount --bind "$1" /proc/cpuinfo && shift && "$@"' as-cpu-kind "$cpuinfo" "$@"
