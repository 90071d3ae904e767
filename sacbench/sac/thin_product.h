// The update's thin matrix products (one side as short as the observation or the action) as a
// register-blocked loop, for fused_update.cpp and benchmarks/thin_products.py.
//
// MKL packs both operands into its own layout on every call, which pays off for 256^3 products
// but not when the inner side is 6-23 terms long. This loop reads the operands where they are:
// 6 rows x 2 vectors of sums (12 registers, more than an FMA's latency x throughput needs), one
// FMA per vector and row for each term, and it writes a forward layer's start (its bias, or a
// partial product computed earlier) and ReLU in the same pass. Each sum adds its terms in order.
#pragma once

#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <cstdint>

namespace sacbench {

using ThinVec = at::vec::Vectorized<float>;

// What a product's sums start from: nothing, one row added to every row (a bias), or a matrix
// with `row_stride` (a partial product of the same layer).
struct ProductStart {
  const float* values = nullptr;
  int64_t row_stride = 0;  // 0: the same row for every row
};

constexpr int64_t kThinRows = 6;
constexpr int64_t kThinColumns = 2 * ThinVec::size();

// Columns a thin product can write: whole blocks of kThinColumns.
inline bool thin_product_fits(int64_t columns) { return columns % kThinColumns == 0; }

template <int64_t Rows>
inline void thin_block(const float* a, int64_t a_row, int64_t a_col, const float* b,
                       int64_t b_row, float* c, int64_t c_row, int64_t k, ProductStart start,
                       bool relu) {
  constexpr int64_t lanes = ThinVec::size();
  ThinVec sums[Rows][2];
#pragma GCC unroll 8
  for (int64_t r = 0; r < Rows; ++r) {
    if (start.values == nullptr) {
      sums[r][0] = sums[r][1] = ThinVec(0.f);
    } else {
      const float* row = start.values + r * start.row_stride;
      sums[r][0] = ThinVec::loadu(row);
      sums[r][1] = ThinVec::loadu(row + lanes);
    }
  }
  for (int64_t p = 0; p < k; ++p) {
    const ThinVec left = ThinVec::loadu(b + p * b_row);
    const ThinVec right = ThinVec::loadu(b + p * b_row + lanes);
#pragma GCC unroll 8
    for (int64_t r = 0; r < Rows; ++r) {
      const ThinVec term(a[r * a_row + p * a_col]);
      sums[r][0] = at::vec::fmadd(term, left, sums[r][0]);
      sums[r][1] = at::vec::fmadd(term, right, sums[r][1]);
    }
  }
#pragma GCC unroll 8
  for (int64_t r = 0; r < Rows; ++r) {
    ThinVec left = sums[r][0], right = sums[r][1];
    if (relu) {
      left = at::vec::maximum(left, ThinVec(0.f));
      right = at::vec::maximum(right, ThinVec(0.f));
    }
    left.store(c + r * c_row);
    right.store(c + r * c_row + lanes);
  }
}

// The rows [i, i + Rows) of c's columns [j, j + kThinColumns), over the terms [p, p + count).
template <int64_t Rows>
inline void thin_rows(const float* a, int64_t a_row, int64_t a_col, const float* b, float* c,
                      int64_t n, ProductStart start, bool relu, int64_t i, int64_t j, int64_t p,
                      int64_t count) {
  if (start.values != nullptr) start.values += i * start.row_stride + j;
  thin_block<Rows>(a + i * a_row + p * a_col, a_row, a_col, b + p * n + j, n, c + i * n + j, n,
                   count, start, relu);
}

// The rows [i, i + rows) for every block of columns, over the terms [p, p + count).
inline void thin_rows_across(const float* a, int64_t a_row, int64_t a_col, const float* b,
                             float* c, int64_t n, ProductStart start, bool relu, int64_t i,
                             int64_t rows, int64_t p, int64_t count) {
  for (int64_t j = 0; j < n; j += kThinColumns) {
    switch (rows) {
      case 6: thin_rows<6>(a, a_row, a_col, b, c, n, start, relu, i, j, p, count); break;
      case 5: thin_rows<5>(a, a_row, a_col, b, c, n, start, relu, i, j, p, count); break;
      case 4: thin_rows<4>(a, a_row, a_col, b, c, n, start, relu, i, j, p, count); break;
      case 3: thin_rows<3>(a, a_row, a_col, b, c, n, start, relu, i, j, p, count); break;
      case 2: thin_rows<2>(a, a_row, a_col, b, c, n, start, relu, i, j, p, count); break;
      default: thin_rows<1>(a, a_row, a_col, b, c, n, start, relu, i, j, p, count); break;
    }
  }
}

// Terms per pass over c: b's rows for one pass (at most 32 KiB at 256 columns) stay in the L1
// cache while every block of columns reads them.
constexpr int64_t kThinTerms = 32;

// c [m, n] (row-major) = start + A B, then ReLU when `relu`, where A(i, p) = a[i * a_row + p *
// a_col] (m x k: strides let A be a matrix or a transposed one) and b is [k, n] row-major; n
// must satisfy thin_product_fits.
//
// Rows outside, so that c is written row after row. Up to kThinTerms terms in one pass (the first
// layers: b, their weight, stays in L1 throughout); more (a weight gradient, b a [rows, 256]
// activation) in passes of kThinTerms rows of b, each adding to what the last one wrote.
inline void thin_product(const float* a, int64_t a_row, int64_t a_col, const float* b, float* c,
                         int64_t m, int64_t n, int64_t k, ProductStart start, bool relu) {
  for (int64_t i = 0; i < m; i += kThinRows) {
    const int64_t rows = std::min(kThinRows, m - i);
    for (int64_t p = 0; p < k; p += kThinTerms) {
      const int64_t count = std::min(kThinTerms, k - p);
      const ProductStart from = p == 0 ? start : ProductStart{c, n};
      const bool last = p + count >= k;
      thin_rows_across(a, a_row, a_col, b, c, n, from, relu && last, i, rows, p, count);
    }
  }
}

}  // namespace sacbench
