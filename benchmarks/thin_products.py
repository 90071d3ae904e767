"""The update's matrix products: ATen's (MKL's) against kernels of our own, in one run.

    python benchmarks/thin_products.py [--env Humanoid-v4] [--rounds 9] [--calls 200]

--fused-update calls MKL for every product. Its thin ones, those with a side as short as the
observation or the action (17 and 6 on HalfCheetah-v4), run well below the rate of its 256^3
ones, and docs/performance.md named "kernels of our own for the thin ones" as a lever left on
Zen 3. This benchmark measures that lever on warm operands: a register-blocked loop (6 rows x 2
vectors of sums, one fused multiply-add per vector and row for each term; rows outside, so that
the result is written row after row), built for this CPU with torch.utils.cpp_extension and
fused_update.cpp's flags (ATen's vectors in their AVX2 form). A forward product writes its bias
and ReLU in the same pass; the ATen side does as fused_update.cpp does: the product, then one
bias + ReLU pass. (In place, inside the update, the same loop was commit 12ad3db's, reverted:
docs/performance.md, "What was tried".)

For each thin shape of the update (batch --batch-size, hidden 256, the task's sizes) it times
both sides in alternating rounds of --calls calls, each loop in C++ on the same operands, and
prints µs per call, the median of the per-round ratios ATen / ours (above 1: ours is faster)
with its quartiles, and the largest difference between the two results relative to the largest
result. A second table does the same for the hidden layer's 256^3 products, which hold most of
the update's arithmetic, against a packed kernel of our own (the right operand copied into
16-column panels once per call, each block's sums in registers over all terms): whether MKL's
rate there leaves anything to a kernel of ours. The last lines give what bounds a product on
this core: its float32 FMA peak (a loop of 12 independent vector FMAs), a lone 256^3 at::mm's
rate as a share of that peak, and the same product's µs after writing 0-64 MB of other memory
before each call (operands that the rest of a step pushed out of the caches: where that starts
is how much cache this machine really gives).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from tabulate import tabulate

from sacbench.sac.fused import compiler_flags, missing_build_tools
from sacbench.training.envs import env_spaces

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: the sibling module

from profile_step import quartiles, refuse_bad_counts_and_env  # noqa: E402

HIDDEN = 256
# Memory written between two products: from what L2 holds to far more than the L3's 32 MiB.
WRITTEN_MEGABYTES = (0, 1, 4, 8, 16, 32, 64)

SOURCE = r"""
#include <ATen/core/Tensor.h>
#include <ATen/cpu/vec/vec.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/randn.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

using at::Tensor;
using Vec = at::vec::Vectorized<float>;
constexpr int64_t kLanes = Vec::size();
constexpr int64_t kRows = 6;                // rows of sums per block: 6 x 2 vector registers
constexpr int64_t kColumns = 2 * kLanes;    // columns per block
constexpr int64_t kTerms = 32;              // terms per pass: b's rows for one pass stay in L1

// c's rows [0, Rows) and columns [0, kColumns) = start + sum over `count` terms p of
// a(r, p) * b[p, :], a(r, p) = a[r * a_row + p * a_col], b's rows b_row apart and c's n apart;
// then ReLU when `relu`. `start`: a row for every row (row_stride 0: a bias), c's own values
// (row_stride n), or none.
template <int64_t Rows>
void block(const float* a, int64_t a_row, int64_t a_col, const float* b, int64_t b_row,
           float* c, int64_t n, int64_t count, const float* start, int64_t row_stride,
           bool relu) {
  Vec sums[Rows][2];
#pragma GCC unroll 8
  for (int64_t r = 0; r < Rows; ++r) {
    sums[r][0] = start ? Vec::loadu(start + r * row_stride) : Vec(0.f);
    sums[r][1] = start ? Vec::loadu(start + r * row_stride + kLanes) : Vec(0.f);
  }
  for (int64_t p = 0; p < count; ++p) {
    const Vec left = Vec::loadu(b + p * b_row), right = Vec::loadu(b + p * b_row + kLanes);
#pragma GCC unroll 8
    for (int64_t r = 0; r < Rows; ++r) {
      const Vec term(a[r * a_row + p * a_col]);
      sums[r][0] = at::vec::fmadd(term, left, sums[r][0]);
      sums[r][1] = at::vec::fmadd(term, right, sums[r][1]);
    }
  }
#pragma GCC unroll 8
  for (int64_t r = 0; r < Rows; ++r) {
    Vec left = sums[r][0], right = sums[r][1];
    if (relu) {
      left = at::vec::maximum(left, Vec(0.f));
      right = at::vec::maximum(right, Vec(0.f));
    }
    left.store(c + r * n);
    right.store(c + r * n + kLanes);
  }
}

template <int64_t Rows>
void block_at(const float* a, int64_t a_row, int64_t a_col, const float* b, int64_t n, float* c,
              int64_t i, int64_t j, int64_t p, int64_t count, const float* start,
              int64_t row_stride, bool relu) {
  if (start) start += i * row_stride + j;
  block<Rows>(a + i * a_row + p * a_col, a_row, a_col, b + p * n + j, n, c + i * n + j, n, count,
              start, row_stride, relu);
}

using Block = void (*)(const float*, int64_t, int64_t, const float*, int64_t, float*, int64_t,
                      int64_t, int64_t, int64_t, const float*, int64_t, bool);
// blocks[rows]: a block of that many rows (the last block of an m that is no multiple of kRows).
constexpr Block blocks[kRows + 1] = {nullptr,     block_at<1>, block_at<2>, block_at<3>,
                                     block_at<4>, block_at<5>, block_at<6>};

// c [m, n] = A B (+ bias, then ReLU, when there is a bias), A(i, p) = a[i * a_row + p * a_col]
// (m x k: a matrix or a transposed one), b [k, n] row-major, n a multiple of kColumns. Rows
// outside, so that c is written row after row; the terms in passes of kTerms, each adding to
// what the last one wrote.
void thin_product(const float* a, int64_t a_row, int64_t a_col, const float* b, float* c,
                  int64_t m, int64_t n, int64_t k, const float* bias) {
  TORCH_CHECK(n % kColumns == 0, "columns must be a multiple of ", kColumns, ", got ", n);
  TORCH_CHECK(k > 0, "a product needs at least one term");
  for (int64_t i = 0; i < m; i += kRows) {
    const int64_t rows = std::min(kRows, m - i);
    for (int64_t p = 0; p < k; p += kTerms) {
      const int64_t count = std::min(kTerms, k - p);
      const float* start = p == 0 ? bias : c;
      const int64_t row_stride = p == 0 ? 0 : n;
      const bool relu = bias != nullptr && p + count >= k;
      for (int64_t j = 0; j < n; j += kColumns) {
        blocks[rows](a, a_row, a_col, b, n, c, i, j, p, count, start, row_stride, relu);
      }
    }
  }
}

// The hidden layer's products, for comparison with MKL's rate on them: b packed once per call
// into panels of kColumns columns (k x kColumns floats each, contiguous: 16 KiB in L1 for
// k = 256), and every block's sums kept in registers over all k terms, as an optimized BLAS
// kernel does (thin_product's passes of kTerms would reread and rewrite c k / kTerms times).
template <int64_t Rows>
void packed_block(const float* a, int64_t a_row, int64_t a_col, const float* panel, int64_t k,
                  float* c, int64_t n, const float* bias, bool relu) {
  block<Rows>(a, a_row, a_col, panel, kColumns, c, n, k, bias, 0, relu);
}

using PackedBlock = void (*)(const float*, int64_t, int64_t, const float*, int64_t, float*,
                             int64_t, const float*, bool);
constexpr PackedBlock packed_blocks[kRows + 1] = {
    nullptr,         packed_block<1>, packed_block<2>, packed_block<3>,
    packed_block<4>, packed_block<5>, packed_block<6>};

// thin_product's contract (bias and ReLU together), computed by packed_block: for each panel of
// b, the rows of c in blocks of kRows.
void packed_product(const float* a, int64_t a_row, int64_t a_col, const float* b, float* c,
                    int64_t m, int64_t n, int64_t k, const float* bias) {
  TORCH_CHECK(n % kColumns == 0, "columns must be a multiple of ", kColumns, ", got ", n);
  TORCH_CHECK(k > 0, "a product needs at least one term");
  thread_local std::vector<float> panels;
  panels.resize(k * n);
  for (int64_t j = 0; j < n; j += kColumns) {
    float* panel = panels.data() + j * k;
    for (int64_t p = 0; p < k; ++p) {
      Vec::loadu(b + p * n + j).store(panel + p * kColumns);
      Vec::loadu(b + p * n + j + kLanes).store(panel + p * kColumns + kLanes);
    }
  }
  for (int64_t j = 0; j < n; j += kColumns) {
    const float* panel = panels.data() + j * k;
    for (int64_t i = 0; i < m; i += kRows) {
      packed_blocks[std::min(kRows, m - i)](a + i * a_row, a_row, a_col, panel, k, c + i * n + j,
                                            n, bias ? bias + j : nullptr, bias != nullptr);
    }
  }
}

float* data(const Tensor& tensor) { return tensor.data_ptr<float>(); }

// relu(x [B, k] w [k, n] + bias) into out [B, n].
void forward_ours(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  thin_product(data(x), x.size(1), 1, data(w), data(out), x.size(0), w.size(1), x.size(1),
               data(bias));
}

void forward_aten(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  at::mm_out(out, x, w);
  float* values = data(out);
  const float* shift = data(bias);
  const int64_t rows = out.size(0), cols = out.size(1);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = values + r * cols;
    for (int64_t c = 0; c < cols; ++c) {
      const float value = row[c] + shift[c];
      row[c] = value < 0.f ? 0.f : value;
    }
  }
}

// x^T [k, B] d [B, n] into out [k, n]: a weight gradient.
void weight_gradient_ours(const Tensor& x, const Tensor& d, Tensor& out) {
  thin_product(data(x), 1, x.size(1), data(d), data(out), x.size(1), d.size(1), x.size(0),
               nullptr);
}

void weight_gradient_aten(const Tensor& x, const Tensor& d, Tensor& out) {
  at::mm_out(out, x.t(), d);
}

void forward_packed(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  packed_product(data(x), x.size(1), 1, data(w), data(out), x.size(0), w.size(1), x.size(1),
                 data(bias));
}

void weight_gradient_packed(const Tensor& x, const Tensor& d, Tensor& out) {
  packed_product(data(x), 1, x.size(1), data(d), data(out), x.size(1), d.size(1), x.size(0),
                 nullptr);
}

// Runs `which` `calls` times (once for 0) on `operands`, its inputs and then the output it
// writes; the seconds per call.
double run(const std::string& which, std::vector<Tensor> operands, int64_t calls) {
  TORCH_CHECK(operands.size() == 3 || operands.size() == 4, "2 or 3 inputs, then the output");
  auto once = [&] {
    Tensor& out = operands.back();
    if (which == "forward ours") forward_ours(operands[0], operands[1], operands[2], out);
    else if (which == "forward aten") forward_aten(operands[0], operands[1], operands[2], out);
    else if (which == "weight gradient ours") weight_gradient_ours(operands[0], operands[1], out);
    else if (which == "weight gradient aten") weight_gradient_aten(operands[0], operands[1], out);
    else if (which == "forward packed") forward_packed(operands[0], operands[1], operands[2], out);
    else if (which == "weight gradient packed")
      weight_gradient_packed(operands[0], operands[1], out);
    else TORCH_CHECK(false, "unknown product: ", which);
  };
  const auto started = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < std::max<int64_t>(calls, 1); ++i) once();
  const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - started;
  return seconds.count() / std::max<int64_t>(calls, 1);
}

// The core's float32 FMA rate: 12 independent chains of vector FMAs (more than latency x
// throughput, so the units never wait), `iterations` rounds; GFLOP/s.
double fma_peak_gflops(int64_t iterations) {
  Vec chains[12];
  for (int i = 0; i < 12; ++i) chains[i] = Vec(1.f + i * 1e-7f);
  const Vec factor(0.9999999f), addend(1e-8f);
  const auto started = std::chrono::steady_clock::now();
  for (int64_t n = 0; n < iterations; ++n) {
    for (int i = 0; i < 12; ++i) chains[i] = at::vec::fmadd(chains[i], factor, addend);
  }
  const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - started;
  float sink = 0.f;  // keeps the chains' results alive
  for (int i = 0; i < 12; ++i) {
    float lanes[kLanes];
    chains[i].store(lanes);
    sink += lanes[0];
  }
  TORCH_CHECK(sink == sink, "the FMA chains produced NaN");
  return iterations * 12.0 * kLanes * 2.0 / seconds.count() / 1e9;
}

// A lone at::mm of [size, size] x [size, size] on warm operands; GFLOP/s.
double lone_matmul_gflops(int64_t size, int64_t calls) {
  const Tensor left = at::randn({size, size}), right = at::randn({size, size});
  Tensor out = at::empty({size, size});
  for (int i = 0; i < 5; ++i) at::mm_out(out, left, right);
  const auto started = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < calls; ++i) at::mm_out(out, left, right);
  const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - started;
  return 2.0 * size * size * size * calls / seconds.count() / 1e9;
}

// The same product after writing `megabytes` of other memory before each call (not timed), as
// the rest of a training step does between two of its products: the median µs of `calls`
// calls. Once the memory written exceeds what the caches keep, the operands come from DRAM.
double matmul_after_writing_us(int64_t size, int64_t megabytes, int64_t calls) {
  const Tensor left = at::randn({size, size}), right = at::randn({size, size});
  Tensor out = at::empty({size, size});
  std::vector<float> other(megabytes * 1024 * 1024 / sizeof(float));
  std::vector<double> times;
  for (int64_t i = 0; i < calls; ++i) {
    std::fill(other.begin(), other.end(), static_cast<float>(i));
    const auto started = std::chrono::steady_clock::now();
    at::mm_out(out, left, right);
    const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - started;
    times.push_back(seconds.count() * 1e6);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}
"""

FUNCTIONS = ["run", "fma_peak_gflops", "lone_matmul_gflops", "matmul_after_writing_us"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="HalfCheetah-v4", help="its sizes shape the products")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=9, help="alternating timed rounds")
    parser.add_argument("--calls", type=int, default=200, help="calls per side per round")
    options = parser.parse_args(argv)
    refuse_bad_counts_and_env(parser, options, ("batch_size", "rounds", "calls"))
    missing = missing_build_tools()
    if missing:
        parser.error(f"the kernels are compiled here and need {' and '.join(missing)} on PATH")
    return options


def thin_shapes(*, obs: int, act: int, batch: int) -> list[tuple[str, str, int, int, int]]:
    """(product, kind, rows, inner, columns) of the update's thin products that the kernel can
    write (columns a multiple of 16): the forward ones [rows, inner] x [inner, columns] with bias
    and ReLU, the weight gradients [inner, rows]^T x [rows, columns]. The heads ([256, 256] x
    [256, act]) and the action gradient have act columns, not a shape for this kernel."""
    return [
        ("actor layer 1", "forward", batch, obs, HIDDEN),
        ("critic layer 1 (observation and action)", "forward", batch, obs + act, HIDDEN),
        ("critic layer 1, action part", "forward", batch, act, HIDDEN),
        ("critic layer 1 weight gradient", "weight gradient", batch, obs + act, HIDDEN),
        ("actor layer 1 weight gradient", "weight gradient", batch, obs, HIDDEN),
        ("actor heads weight gradient", "weight gradient", batch, act, HIDDEN),
    ]


def hidden_shapes(*, batch: int) -> list[tuple[str, str, int, int, int]]:
    """The same tuples for the hidden layer's 256^3 products (most of the update's arithmetic),
    which the comparison times against the packed kernel: MKL's rate there against what a
    register-blocked kernel of our own reaches on this core."""
    return [
        ("hidden layer", "forward", batch, HIDDEN, HIDDEN),
        ("hidden layer weight gradient", "weight gradient", batch, HIDDEN, HIDDEN),
    ]


def operands(kind: str, rows: int, inner: int, columns: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(rows * 1_000_003 + inner * 1_009 + columns)
    if kind == "forward":
        return [
            torch.randn(rows, inner, generator=generator),
            torch.randn(inner, columns, generator=generator) / inner**0.5,
            torch.randn(columns, generator=generator),
            torch.empty(rows, columns),
        ]
    return [
        torch.randn(rows, inner, generator=generator),
        torch.randn(rows, columns, generator=generator) / rows,
        torch.empty(inner, columns),
    ]


def build() -> tuple[Any, float]:
    from torch.utils.cpp_extension import load_inline

    started = time.perf_counter()
    extension = load_inline(
        "sacbench_thin_products",
        cpp_sources=SOURCE,
        functions=FUNCTIONS,
        extra_cflags=compiler_flags(),
        no_implicit_headers=True,  # the ops it calls and pybind11 only (SOURCE)
    )
    return extension, time.perf_counter() - started


def compare(
    extension: Any,
    options: argparse.Namespace,
    *,
    shapes: list[tuple[str, str, int, int, int]],
    ours: str,
) -> list[list[object]]:
    """A table row per shape: ATen against our kernel `ours` ("ours": thin_product, "packed":
    packed_product) in alternating rounds."""
    rows = []
    for name, kind, batch, inner, columns in shapes:
        ours_operands = operands(kind, batch, inner, columns)
        aten_operands = [tensor.clone() for tensor in ours_operands]
        extension.run(f"{kind} {ours}", ours_operands, 0)
        extension.run(f"{kind} aten", aten_operands, 0)
        expected = aten_operands[-1]
        difference = (ours_operands[-1] - expected).abs().max() / expected.abs().max()
        aten_us, ours_us, ratios = [], [], []
        for _ in range(options.rounds):
            aten = extension.run(f"{kind} aten", aten_operands, options.calls)
            ours_seconds = extension.run(f"{kind} {ours}", ours_operands, options.calls)
            aten_us.append(aten * 1e6)
            ours_us.append(ours_seconds * 1e6)
            ratios.append(aten / ours_seconds)
        shape = (
            f"[{batch}x{inner}] x [{inner}x{columns}]"
            if kind == "forward"
            else f"[{inner}x{batch}] x [{batch}x{columns}]"
        )
        rows.append(
            [
                name,
                shape,
                f"{2 * batch * inner * columns / 1e6:.2f}",
                f"{statistics.median(aten_us):.1f}",
                f"{statistics.median(ours_us):.1f}",
                f"{statistics.median(ratios):.2f}",
                quartiles(ratios, digits=2),
                f"{float(difference):.1e}",
            ]
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    torch.set_num_threads(1)
    extension, built_seconds = build()
    spaces = env_spaces(options.env)
    thin = thin_shapes(
        obs=spaces.observation_size, act=spaces.action_size, batch=options.batch_size
    )
    for shapes, ours in ((thin, "ours"), (hidden_shapes(batch=options.batch_size), "packed")):
        rows = compare(extension, options, shapes=shapes, ours=ours)
        headers = ["product", "shape", "MFLOP", "ATen µs", f"{ours} µs", f"ATen / {ours}"]
        headers += ["quartiles", "largest difference / largest value"]
        print(tabulate(rows, headers=headers, tablefmt="github") + "\n")
    peak = max(extension.fma_peak_gflops(20_000_000) for _ in range(3))
    lone = max(extension.lone_matmul_gflops(256, 40) for _ in range(3))
    print(
        f"this core's float32 FMA peak: {peak:.1f} GFLOP/s; a lone 256x256x256 at::mm: "
        f"{lone:.1f} GFLOP/s ({lone / peak:.0%} of the peak)"
    )
    written = {
        megabytes: extension.matmul_after_writing_us(256, megabytes, options.calls // 4 + 3)
        for megabytes in WRITTEN_MEGABYTES
    }
    print(
        "a lone 256x256x256 at::mm, µs, after writing this much other memory before each call: "
        + ", ".join(f"{megabytes} MB {us:.0f}" for megabytes, us in written.items())
    )
    print(
        f"{options.env}, batch {options.batch_size}, medians of {options.rounds} alternating "
        f"rounds of {options.calls} calls, 1 thread; built in {built_seconds:.0f} s; torch "
        f"{torch.__version__}; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
