#!/usr/bin/env bash
# Runs a command on this machine as another CPU kind presents itself to sacbench: the command sees
# a /proc/cpuinfo whose vendor, family, model, model name and flags are the kind's recorded ones
# (tests/cpuinfo/KIND.txt, or any file with such lines), and the libraries are capped to what they
# run on that kind: MKL (AVX2 kernels on AMD's CPUs, as MKL itself chooses by vendor), oneDNN and
# ATen (by the kind's flags). So the suite, or a trainer, can be run as Zen 3 on an AVX-512 machine
# and make every choice by the CPU's flags as there (sacbench/sac/cpu_features.py reads them).
#
# C++ compiled with `-march=native` (the fused update, inductor's kernels) is compiled for the
# kind's instruction sets: CXX names a compiler wrapper that replaces -march=native by them, and
# such builds go to a folder of the kind's own. What it cannot change: code that asks the CPU
# itself (torch's CPUID checks before oneDNN's bfloat16 products), and the compiler's tuning.
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

# -march=native would compile for this CPU: the kind's instruction sets instead, as GCC options
# (cpuinfo's name:GCC's). One this machine lacks is left out (sse4a as an AMD kind on an Intel
# CPU): GCC emits it only when asked by name, and here it could not run. Inside another
# presentation /proc/cpuinfo is that kind's, so the machine's own flags are passed on.
machine_flags=${AS_CPU_KIND_MACHINE_FLAGS:-$host_flags}
export AS_CPU_KIND_MACHINE_FLAGS=$machine_flags
instruction_sets=()
for pair in pni:sse3 ssse3:ssse3 sse4_1:sse4.1 sse4_2:sse4.2 sse4a:sse4a popcnt:popcnt \
  pclmulqdq:pclmul aes:aes movbe:movbe xsave:xsave avx:avx f16c:f16c fma:fma abm:lzcnt bmi1:bmi \
  bmi2:bmi2 avx2:avx2 adx:adx sha_ni:sha avx512f:avx512f avx512dq:avx512dq avx512cd:avx512cd \
  avx512bw:avx512bw avx512vl:avx512vl avx512ifma:avx512ifma avx512vbmi:avx512vbmi \
  avx512_vbmi2:avx512vbmi2 avx512_vnni:avx512vnni avx512_bitalg:avx512bitalg \
  avx512_vpopcntdq:avx512vpopcntdq avx512_bf16:avx512bf16 avx512_fp16:avx512fp16 \
  avx_vnni:avxvnni gfni:gfni vaes:vaes vpclmulqdq:vpclmulqdq amx_tile:amx-tile \
  amx_bf16:amx-bf16 amx_int8:amx-int8; do
  if has "${pair%%:*}" && [[ $machine_flags == *" ${pair%%:*} "* ]]; then
    instruction_sets+=("-m${pair#*:}")
  fi
done
# The wrapper and the kind's builds live at fixed paths: a build's commands name the compiler, so
# a new path every time would rebuild the fused update (20-40 s) at every start.
kind_dir=${TMPDIR:-/tmp}/as-cpu-kind_$(id -un)/$(basename "$kind_file" .txt)
export TORCH_EXTENSIONS_DIR=$kind_dir/torch_extensions
# Without a compiler there is nothing to wrap (the trainer then says why it cannot build). Run
# inside another presentation, the compiler is the one that presentation wrapped.
if compiler=${AS_CPU_KIND_COMPILER:-$(command -v "${CXX:-g++}")}; then
  export AS_CPU_KIND_COMPILER=$compiler
  mkdir -p "$kind_dir/bin"
  wrapper=$(mktemp "$kind_dir/bin/.g++.XXXXXX")
  cat >"$wrapper" <<WRAPPER
#!/usr/bin/env bash
# Written by scripts/as-cpu-kind.sh: $compiler, compiling for $kind where asked for this CPU.
arguments=()
for argument in "\$@"; do
  if [[ \$argument == -march=native ]]; then
    arguments+=(-march=x86-64 ${instruction_sets[*]})
  else
    arguments+=("\$argument")
  fi
done
exec $compiler "\${arguments[@]}"
WRAPPER
  chmod +x "$wrapper"
  mv -f "$wrapper" "$kind_dir/bin/g++" # named g++, as torch checks the compiler by its name
  export CXX=$kind_dir/bin/g++
fi

unshare --mount --propagation private -- bash -c \
  'mount --bind "$1" /proc/cpuinfo && shift && "$@"' as-cpu-kind "$cpuinfo" "$@"
