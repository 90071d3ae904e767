// The fast path's hand-written update (sacbench/sac/handwritten.py) in C++, for --fused-update
// (sacbench/sac/fused.py builds it for the CPU it runs on and calls it). The same products as the
// eager path (ATen's, i.e. MKL's; or oneDNN's where fused.py chooses it, `float32_product_out`
// below), but:
// - the critics one member at a time, so that each [B, 256] activation (256 KiB) is still in the
//   core's L2 cache (512 KiB on Zen 3) when the pass after its product reads it;
// - every chain of elementwise work between two products as one pass: bias and ReLU after a
//   product (for a critic's second hidden layer also its output layer's dot product); the loss
//   gradient at a critic's output with its ReLU mask and the column sums that are the bias and
//   output-weight gradients; a ReLU mask with its bias gradient; the squashed sample with its
//   log-probability, its exp, tanh and log as vectors (Sleef's, as torch's own kernels); the
//   actor's backward pass through the sample and its heads;
// - no Python between the operations of a training step: `update` runs all of a step's updates,
//   the Adam steps and the target update included, in one call; `act` gives the training loop
//   its actions in one call too.
// Float32 throughout, no -ffast-math: only the order of some sums differs from the eager path,
// and the Adam steps take subnormal floats as zero (adam_subnormals_as_zero).
// With `bf16_products` (--precision bf16) the long products round their operands to bfloat16 as
// sacbench/sac/products.py does (`product` below); everything else stays float32.
// The operators this file calls, one header each, not ATen/ATen.h: its declarations of every
// operator (ATen/Functions.h) were about a fifth of the build's time. For the same reason, no
// arithmetic operators on tensors (ATen/TensorOperators.h includes them all): tensor methods.
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <ATen/cpu/vec/vec.h>
#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_foreach_lerp.h>
#include <ATen/ops/_fused_adam.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/baddbmm.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/full.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/randn.h>
// pybind11 with ATen's tensor type caster, without the C++ frontend that torch/extension.h
// also includes (torch/all.h): that alone took half of a one-minute build.
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iterator>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#if defined(__linux__) && defined(__x86_64__)
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#endif

// Defined in libtorch_cpu (ATen/native/mkldnn/Matmul.cpp) and exported, but not among torch's
// installed headers: result = beta * result + alpha * (mat1 @ mat2), by oneDNN's matmul primitive.
// sacbench/private_api.py checks that it is still there and computes that.
namespace at::native {
void mkldnn_matmul(const at::Tensor& mat1, const at::Tensor& mat2, const at::Tensor& result,
                   float beta, float alpha);
}  // namespace at::native

namespace {

using at::Tensor;

// Where the update's time goes, measured in place (benchmarks/fused_sections.py): while
// `timing_sections` is set (set_section_times), every section below adds its wall time and call
// count to a table. A switch rather than a second build, so that the benchmark times the
// trainer's own build and compiles nothing more; while it is unset, a section costs one test.
bool timing_sections = false;
std::map<std::string, std::pair<double, int64_t>> section_table;

class Section {
 public:
  explicit Section(const char* name) : name_(timing_sections ? name : nullptr) {
    if (name_ != nullptr) {
      start_ = std::chrono::steady_clock::now();
    }
  }
  ~Section() {
    if (name_ == nullptr) {
      return;
    }
    const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start_;
    auto& entry = section_table[name_];
    entry.first += seconds.count();
    entry.second += 1;
  }
  Section(const Section&) = delete;
  Section& operator=(const Section&) = delete;

 private:
  const char* name_;
  std::chrono::steady_clock::time_point start_;
};

// Which library multiplies the float32 products. ATen's float32 products on x86 are MKL's, and MKL
// runs its AVX-512 kernels on Intel CPUs only: on AMD Zen 5, whose cores execute 512-bit FMAs at
// full width, its 256^3 product ran at half oneDNN's rate (docs/performance.md). oneDNN chooses its
// kernels by instruction set, not vendor. fused.py sets this once, at load (set_float32_products).
bool onednn_float32_products = false;

// Whether the Adam steps run with subnormal floats as zero (fused.py sets this at load; on by
// default). A hidden unit whose ReLU stays shut gets zero gradients, and its weights' first
// moments then shrink by beta1 = 0.9 each step, through the subnormal range (below 1.2e-38) for
// about 150 steps before they reach zero; a trained critic holds many such moments (28% of its
// second layer's after 3,000 updates of HalfCheetah-v4). Arithmetic on subnormals takes a slow
// path on x86 cores: with them as zero, training ran 1.26x (HalfCheetah-v4) and 1.15x
// (Humanoid-v4) as fast on an Intel Xeon with AMX. A parameter's Adam step from such a moment is
// below 1e-31 and leaves any float32 parameter larger than 1e-24 as it was, so treating them as
// zero changes no parameter, only moments that were already below 1.2e-38.
bool adam_subnormals_as_zero = true;

// x86's MXCSR flags flush-to-zero (results) and denormals-are-zero (operands), for the guard's
// lifetime on this thread, then the flags as they were: the rest of the step (the environment,
// acting) keeps IEEE subnormals. The flags are the calling thread's: with one intra-op thread
// (the trainer's default) they cover the whole Adam step; with more, the other threads' share of
// it keeps IEEE subnormals (the same parameters, more slowly). Elsewhere (no SSE) a no-op.
class SubnormalsAsZero {
 public:
  explicit SubnormalsAsZero(bool enabled) {
#if defined(__SSE__)
    if (enabled) {
      constexpr unsigned int kFlushToZero = 0x8000, kDenormalsAreZero = 0x0040;
      saved_ = _mm_getcsr();
      _mm_setcsr(saved_ | kFlushToZero | kDenormalsAreZero);
      restore_ = true;
    }
#endif
  }
  ~SubnormalsAsZero() {
#if defined(__SSE__)
    if (restore_) _mm_setcsr(saved_);
#endif
  }
  SubnormalsAsZero(const SubnormalsAsZero&) = delete;
  SubnormalsAsZero& operator=(const SubnormalsAsZero&) = delete;

 private:
  unsigned int saved_ = 0;
  bool restore_ = false;
};

// For the guard's lifetime, every ATen call goes straight to its CPU kernel, past the autograd
// and in-place-or-view layers of torch's dispatcher, as a custom operator's own kernel runs. Those
// layers record graphs and bump version counters, for autograd only; the update records none, and
// an update calls about 630 operators, so skipping them saved 1.1-1.6% of its time (Zen 3).
using BelowAutograd = at::AutoDispatchBelowADInplaceOrView;

// The row counts of the actor step's gathered products are rounded up to this multiple where
// oneDNN multiplies them (actor_step).
constexpr int64_t kGatheredRowBlock = 32;

// out = left @ right, or with `accumulate` out += left @ right: float32 matrices (views allowed;
// out dense).
void float32_product_out(Tensor& out, const Tensor& left, const Tensor& right,
                         bool accumulate = false) {
  if (!onednn_float32_products || left.numel() == 0 || right.numel() == 0) {
    if (accumulate) {
      out.addmm_(left, right);
    } else {
      at::mm_out(out, left, right);
    }
    return;
  }
  at::native::mkldnn_matmul(left, right, out, accumulate ? 1.f : 0.f, 1.f);
}

Tensor float32_product(const Tensor& left, const Tensor& right) {
  Tensor out = at::empty({left.size(0), right.size(1)}, left.options());
  float32_product_out(out, left, right);
  return out;
}

// addend + left @ right, the addend (a row vector or a matrix) broadcast over the result's rows.
Tensor affine(const Tensor& addend, const Tensor& left, const Tensor& right) {
  if (!onednn_float32_products) return at::addmm(addend, left, right);
  // A fresh tensor: expand(...).contiguous() of a one-row result would be the addend itself.
  Tensor out = at::empty({left.size(0), right.size(1)}, left.options());
  out.copy_(addend.expand({left.size(0), right.size(1)}));
  float32_product_out(out, left, right, /*accumulate=*/true);
  return out;
}

template <class Work>
auto timed(const char* name, Work&& work) {
  const Section section(name);
  if constexpr (std::is_void_v<decltype(work())>) {
    work();
  } else {
    return work();
  }
}

constexpr int64_t kLanes = 8;  // partial sums per dot product: one AVX2 register of floats

// ATen's vector of floats. fused.py defines CPU_CAPABILITY_AVX2 where torch's own kernels run
// AVX2 code: then exp, tanh and log are Sleef's vectorized functions, the ones torch.exp,
// torch.tanh and torch.log run on the eager path (a scalar libm call costs several times more per
// value); without it, ATen's generic version applies the scalar functions lane by lane.
using Vec = at::vec::Vectorized<float>;

// body(i, count) for each run of at most Vec::size() values of [0, n): count is less only in the
// last run, where Vec::loadu(pointer, count) and store(pointer, count) read and write no further.
template <class Body>
void in_vectors(int64_t n, Body&& body) {
  for (int64_t i = 0; i < n; i += Vec::size()) body(i, std::min<int64_t>(Vec::size(), n - i));
}

float* data(const Tensor& tensor) { return tensor.data_ptr<float>(); }

// sacbench.sac.products.MIN_ROUNDED_SIDE: with bf16_products, a product whose every side is at
// least this long multiplies bfloat16 operands; a thinner one stays float32 (rounding its
// operands would cost about what the product saves).
constexpr int64_t kMinRoundedSide = 64;

// Whether a [rows, inner] x [inner, columns] product rounds its operands.
bool rounds(int64_t rows, int64_t inner, int64_t columns, bool bf16_products) {
  return bf16_products && std::min({rows, inner, columns}) >= kMinRoundedSide;
}

bool rounds(const Tensor& left, const Tensor& right, bool bf16_products) {
  return rounds(left.size(-2), left.size(-1), right.size(-1), bf16_products);
}

// left @ right (matrices, or batches of them), as sacbench.sac.products.product computes it: the
// float32 product, or with bf16_products and long sides the bfloat16 product of the rounded
// operands (its result bfloat16, as torch returns it) widened to float32.
Tensor product(const Tensor& left, const Tensor& right, bool bf16_products,
               bool rounded_operands) {
  if (rounded_operands) {
    return at::matmul(left.to(at::kBFloat16), right.to(at::kBFloat16)).to(at::kFloat);
  }
  if (left.dim() == 2 && right.dim() == 2) return float32_product(left, right);
  return at::matmul(left, right);
}

Tensor product(const Tensor& left, const Tensor& right, bool bf16_products) {
  return product(left, right, bf16_products, rounds(left, right, bf16_products));
}

// product() written into `out` (a dense float32 matrix, or a view of one).
void product_out(Tensor& out, const Tensor& left, const Tensor& right, bool bf16_products) {
  if (rounds(left, right, bf16_products)) {
    out.copy_(at::mm(left.to(at::kBFloat16), right.to(at::kBFloat16)));
  } else {
    float32_product_out(out, left, right);
  }
}

// The loops below read raw float pointers: every input must be a dense float32 CPU tensor.
void check_dense(const Tensor& tensor, const char* name) {
  TORCH_CHECK(tensor.is_cpu() && tensor.scalar_type() == at::kFloat && tensor.is_contiguous(),
              name, " must be a contiguous float32 CPU tensor, got ", tensor.scalar_type(), " on ",
              tensor.device(), tensor.is_contiguous() ? "" : " (not contiguous)");
}

void check_dense(const std::vector<Tensor>& tensors, const char* name) {
  for (const Tensor& tensor : tensors) check_dense(tensor, name);
}

void check_rows(const std::vector<Tensor>& tensors, int64_t rows, const char* name) {
  for (const Tensor& tensor : tensors) {
    TORCH_CHECK(tensor.dim() >= 1 && tensor.size(0) == rows, name, " must have ", rows,
                " rows, got shape ", tensor.sizes());
  }
}

// Whether `candidate` replaces `current` as the smaller value, with NaN winning as in
// torch.minimum and torch.min (a diverged critic shows as NaN rather than being skipped).
bool smaller(float candidate, float current) {
  return !std::isnan(current) && (std::isnan(candidate) || candidate < current);
}

// max(value, 0) with NaN kept, as torch.relu keeps it.
inline float relu(float value) { return value < 0.f ? 0.f : value; }

// The loops below load every operand unconditionally and select afterwards: GCC vectorizes a
// select between computed values, not a load or a multiply that only one branch performs.

// rows x cols, row-major: x <- relu(x + bias), or relu(x) with no bias.
void add_bias_relu(float* x, const float* bias, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * cols;
    if (bias == nullptr) {
      for (int64_t c = 0; c < cols; ++c) row[c] = relu(row[c]);
    } else {
      for (int64_t c = 0; c < cols; ++c) row[c] = relu(row[c] + bias[c]);
    }
  }
}

// x <- relu(x + bias), and q[r] = x[r] . w_out + b_out (the output layer), in one pass; cols is a
// multiple of kLanes.
void add_bias_relu_output(float* x, const float* bias, const float* w_out, float b_out, float* q,
                          int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * cols;
    float partial[kLanes] = {};
    for (int64_t c0 = 0; c0 < cols; c0 += kLanes) {
      for (int64_t lane = 0; lane < kLanes; ++lane) {
        const int64_t c = c0 + lane;
        const float value = relu(row[c] + bias[c]);
        row[c] = value;
        partial[lane] += value * w_out[c];
      }
    }
    float sum = 0.f;
    for (float value : partial) sum += value;
    q[r] = sum + b_out;
  }
}

// The output layer's backward pass and the second hidden layer's ReLU mask: for each row,
// d_hidden[r] = (hidden[r] > 0) * d_q[r] * w_out; the column sums d_bias += d_hidden[r] and
// d_w_out += d_q[r] * hidden[r].
void output_backward(const float* hidden, const float* d_q, const float* w_out, float* d_hidden,
                     float* d_bias, float* d_w_out, int64_t rows, int64_t cols) {
  for (int64_t c = 0; c < cols; ++c) d_bias[c] = d_w_out[c] = 0.f;
  for (int64_t r = 0; r < rows; ++r) {
    const float* h = hidden + r * cols;
    float* d = d_hidden + r * cols;
    const float scale = d_q[r];
    for (int64_t c = 0; c < cols; ++c) {
      const float activation = h[c], through = scale * w_out[c];
      const float gradient = activation > 0.f ? through : 0.f;
      d[c] = gradient;
      d_bias[c] += gradient;
      d_w_out[c] += scale * activation;
    }
  }
}

// d <- (hidden > 0) * d, and d_bias = column sums of the result.
void relu_backward_bias(const float* hidden, float* d, float* d_bias, int64_t rows, int64_t cols) {
  for (int64_t c = 0; c < cols; ++c) d_bias[c] = 0.f;
  for (int64_t r = 0; r < rows; ++r) {
    const float* h = hidden + r * cols;
    float* row = d + r * cols;
    for (int64_t c = 0; c < cols; ++c) {
      const float gradient = h[c] > 0.f ? row[c] : 0.f;
      row[c] = gradient;
      d_bias[c] += gradient;
    }
  }
}

struct Critic {
  Tensor w1, w2, w3, b1, b2, b3;  // [M, in, out] and [M, 1, out], as EnsembleCritic stores them
};

Critic critic_of(const std::vector<Tensor>& tensors) {
  TORCH_CHECK(tensors.size() == 6, "a critic is 3 weights and 3 biases, got ", tensors.size());
  check_dense(tensors, "every critic tensor");
  return {tensors[0], tensors[1], tensors[2], tensors[3], tensors[4], tensors[5]};
}

// One member's two hidden layers and output on `inputs` [B, in]; hidden1, hidden2 [B, 256].
void member_forward(const Critic& critic, int64_t member, const Tensor& inputs, Tensor& hidden1,
                    Tensor& hidden2, float* q, bool bf16_products) {
  const int64_t rows = inputs.size(0), width = critic.w2.size(2);
  timed("product: critic layer 1 (k = obs + act)",
        [&] { product_out(hidden1, inputs, critic.w1[member], bf16_products); });
  timed("pass: bias + ReLU",
        [&] { add_bias_relu(data(hidden1), data(critic.b1[member]), rows, width); });
  timed("product: critic layer 2 (256^3)",
        [&] { product_out(hidden2, hidden1, critic.w2[member], bf16_products); });
  const Section section("pass: bias + ReLU + output layer");
  add_bias_relu_output(data(hidden2), data(critic.b2[member]), data(critic.w3[member]),
                       critic.b3[member].item<float>(), q, rows, width);
}

struct Actor {
  Tensor w1, b1, w2, b2, w_mean, b_mean, w_log_std, b_log_std, scale, shift;
};

Actor actor_of(const std::vector<Tensor>& tensors) {
  TORCH_CHECK(tensors.size() == 10,
              "actor: fc1 w, b, fc2 w, b, mean w, b, log-std w, b, action scale, action bias");
  check_dense(tensors, "every actor tensor");
  return {tensors[0], tensors[1], tensors[2], tensors[3], tensors[4],
          tensors[5], tensors[6], tensors[7], tensors[8], tensors[9]};
}

struct PolicyForward {
  Tensor hidden1, hidden2, mean, log_std_tanh, log_std;  // as sacbench.sac.policy names them
};

PolicyForward policy_forward_of(const Actor& actor, const Tensor& observations,
                                double log_std_min, double log_std_half_range,
                                bool bf16_products) {
  const int64_t rows = observations.size(0);
  const auto options = observations.options();
  PolicyForward out;
  out.hidden1 = at::empty({rows, actor.w1.size(0)}, options);
  timed("product: actor layer 1 (k = obs)",
        [&] { product_out(out.hidden1, observations, actor.w1.t(), bf16_products); });
  timed("pass: bias + ReLU",
        [&] { add_bias_relu(data(out.hidden1), data(actor.b1), rows, out.hidden1.size(1)); });
  out.hidden2 = at::empty({rows, actor.w2.size(0)}, options);
  timed("product: actor layer 2 (256^3)",
        [&] { product_out(out.hidden2, out.hidden1, actor.w2.t(), bf16_products); });
  timed("pass: bias + ReLU",
        [&] { add_bias_relu(data(out.hidden2), data(actor.b2), rows, out.hidden2.size(1)); });
  timed("product: actor heads (n = act, 2 products)", [&] {
    out.mean = affine(actor.b_mean, out.hidden2, actor.w_mean.t());
    out.log_std_tanh = affine(actor.b_log_std, out.hidden2, actor.w_log_std.t());
  });
  const Section section("pass: tanh + log-std range");
  out.log_std = at::empty_like(out.mean);
  float *tanh_out = data(out.log_std_tanh), *log_std = data(out.log_std);
  const Vec minimum(static_cast<float>(log_std_min));
  const Vec half_range(static_cast<float>(log_std_half_range)), one(1.f);
  in_vectors(out.mean.numel(), [&](int64_t i, int64_t count) {
    const Vec bounded = Vec::loadu(tanh_out + i, count).tanh();  // the log-std head in (-1, 1)
    bounded.store(tanh_out + i, count);
    (minimum + half_range * (bounded + one)).store(log_std + i, count);
  });
  return out;
}

// The squashed sample's action (into `action`, row stride `action_stride`) and log-probability
// per row, from the standard-normal draw `noise`. Its exp, tanh and log run over all rows'
// values as vectors; the per-row sums add each row's terms in column order.
void squashed_sample(const Actor& actor, const PolicyForward& policy, const Tensor& noise,
                     double half_log_2pi, float* action, int64_t action_stride, float* log_pi,
                     float* squashed_out = nullptr, float* jacobian_out = nullptr,
                     float* std_out = nullptr) {
  const Section section("pass: squashed sample + log-probability");
  const int64_t rows = noise.size(0), action_dim = noise.size(1), n = rows * action_dim;
  const float *m = data(policy.mean), *log_std = data(policy.log_std), *z = data(noise);
  const float *scale = data(actor.scale), *shift = data(actor.shift);
  // The action scale per value (row-major [rows, A]); scratch for what the caller does not keep.
  std::vector<float> tiled_scale(n), scratch(squashed_out == nullptr ? 3 * n : 0), terms(n);
  for (int64_t r = 0; r < rows; ++r) {
    std::copy(scale, scale + action_dim, tiled_scale.begin() + r * action_dim);
  }
  if (squashed_out == nullptr) {
    squashed_out = scratch.data();
    jacobian_out = scratch.data() + n;
    std_out = scratch.data() + 2 * n;
  }
  const Vec one(1.f), half(0.5f), epsilon(1e-6f);
  in_vectors(n, [&](int64_t i, int64_t count) {
    const Vec log_std_value = Vec::loadu(log_std + i, count), z_value = Vec::loadu(z + i, count);
    const Vec std_value = log_std_value.exp();
    const Vec squashed = (Vec::loadu(m + i, count) + z_value * std_value).tanh();
    const Vec jacobian = (one - squashed * squashed) * Vec::loadu(tiled_scale.data() + i, count) +
                         epsilon;
    (log_std_value + half * z_value * z_value + jacobian.log()).store(terms.data() + i, count);
    squashed.store(squashed_out + i, count);
    jacobian.store(jacobian_out + i, count);
    std_value.store(std_out + i, count);
  });
  for (int64_t r = 0; r < rows; ++r) {
    float sum = 0.f;
    for (int64_t a = 0; a < action_dim; ++a) {
      const int64_t i = r * action_dim + a;
      if (action != nullptr) action[r * action_stride + a] = shift[a] + squashed_out[i] * scale[a];
      sum += terms[i];
    }
    log_pi[r] = -sum - static_cast<float>(action_dim * half_log_2pi);
  }
}

// The actor's forward pass: hidden1, hidden2, mean, log_std_tanh, log_std.
std::vector<Tensor> policy_forward(const std::vector<Tensor>& actor_tensors,
                                   const Tensor& observations, double log_std_min,
                                   double log_std_half_range, bool bf16_products) {
  const at::NoGradGuard no_grad;
  check_dense(observations, "observations");
  const PolicyForward out = policy_forward_of(actor_of(actor_tensors), observations, log_std_min,
                                              log_std_half_range, bf16_products);
  return {out.hidden1, out.hidden2, out.mean, out.log_std_tanh, out.log_std};
}

}  // namespace

// The policy's actions [B, A] for `observations` (FastLearner.act with --fused-update): the
// forward pass, then one squashed sample drawn as sacbench.sac.policy.squashed_sample draws it
// (a standard-normal [B, A] tensor from torch's default generator, after the forward pass).
Tensor act(const std::vector<Tensor>& actor_tensors, const Tensor& observations,
           double log_std_min, double log_std_half_range, bool bf16_products) {
  const at::NoGradGuard no_grad;
  const BelowAutograd below_autograd;
  check_dense(observations, "observations");
  const Actor actor = actor_of(actor_tensors);
  const PolicyForward policy =
      policy_forward_of(actor, observations, log_std_min, log_std_half_range, bf16_products);
  const Tensor noise = at::randn(policy.mean.sizes(), policy.mean.options());
  Tensor action = at::empty_like(noise);
  std::vector<float> log_pi(noise.size(0));  // computed with the action, not returned
  squashed_sample(actor, policy, noise, 0.0, data(action), noise.size(1), log_pi.data());
  return action;
}

namespace {

// log pi [B, 1] of the squashed sample drawn with `noise` from a policy_forward's mean, log_std.
Tensor sample_log_prob(const std::vector<Tensor>& actor_tensors, const Tensor& mean,
                       const Tensor& log_std, const Tensor& noise, double half_log_2pi) {
  const at::NoGradGuard no_grad;
  check_dense({mean, log_std, noise}, "mean, log_std and noise");
  PolicyForward policy;
  policy.mean = mean;
  policy.log_std = log_std;
  Tensor log_pi = at::empty({noise.size(0), 1}, noise.options());
  squashed_sample(actor_of(actor_tensors), policy, noise, half_log_2pi, nullptr, 0, data(log_pi));
  return log_pi;
}

// Returns the critic gradients in EnsembleCritic.parameters() order (w1, w2, w3, b1, b2, b3) and
// the [5] metrics q1, q2, loss1, loss2, loss / 2 of HandwrittenFormulation.critic_gradients.
// `noise` [B, A] is the standard-normal draw of the target policy's sample.
std::vector<Tensor> critic_step(const std::vector<Tensor>& actor, const std::vector<Tensor>& online,
                                const std::vector<Tensor>& target, const Tensor& observations,
                                const Tensor& actions, const Tensor& next_observations,
                                const Tensor& rewards, const Tensor& terminations,
                                const Tensor& noise, double alpha_value, double gamma_value,
                                double log_std_min, double log_std_half_range,
                                double half_log_2pi, bool bf16_products) {
  const Critic critic = critic_of(online), target_critic = critic_of(target);
  check_dense({observations, actions, next_observations, rewards, terminations, noise},
              "every batch tensor and the noise");
  const int64_t rows = observations.size(0), action_dim = noise.size(1);
  check_rows({actions, next_observations, rewards, terminations, noise}, rows,
             "every batch tensor and the noise");
  const int64_t members = critic.w1.size(0), width = critic.w2.size(2);
  TORCH_CHECK(width % kLanes == 0, "hidden width must be a multiple of ", kLanes, ", got ", width);
  const float alpha = static_cast<float>(alpha_value), gamma = static_cast<float>(gamma_value);
  const at::NoGradGuard no_grad;
  const auto options = observations.options();

  // The target policy on the next observations, and its squashed sample.
  const Actor policy = actor_of(actor);
  const PolicyForward next_policy =
      policy_forward_of(policy, next_observations, log_std_min, log_std_half_range,
                        bf16_products);
  const int64_t obs_dim = next_observations.size(1);
  Tensor next_inputs = at::empty({rows, obs_dim + action_dim}, options);
  next_inputs.narrow(1, 0, obs_dim).copy_(next_observations);
  Tensor next_log_pi = at::empty({rows}, options);
  squashed_sample(policy, next_policy, noise, half_log_2pi, data(next_inputs) + obs_dim,
                  obs_dim + action_dim, data(next_log_pi));

  // The target critics' values on (next observation, next action): one member at a time, its
  // activations reused by the next.
  Tensor scratch1 = at::empty({rows, width}, options), scratch2 = at::empty({rows, width}, options);
  Tensor next_q = at::empty({members, rows}, options);
  for (int64_t member = 0; member < members; ++member) {
    member_forward(target_critic, member, next_inputs, scratch1, scratch2,
                   data(next_q) + member * rows, bf16_products);
  }
  Tensor targets = at::empty({rows}, options);
  {
    const float *reward = data(rewards), *terminated = data(terminations);
    const float *log_pi = data(next_log_pi), *q = data(next_q);
    float* y = data(targets);
    for (int64_t r = 0; r < rows; ++r) {
      float smallest = q[r];
      for (int64_t member = 1; member < members; ++member) {
        if (smaller(q[member * rows + r], smallest)) smallest = q[member * rows + r];
      }
      y[r] = reward[r] + (1.f - terminated[r]) * gamma * (smallest - alpha * log_pi[r]);
    }
  }

  // The critics on (observation, action), each member's backward pass right after its forward.
  const Tensor inputs = timed("other: concatenate observations and actions",
                              [&] { return at::cat({observations, actions}, 1); });
  Tensor d_w1 = at::empty_like(critic.w1), d_w2 = at::empty_like(critic.w2);
  Tensor d_w3 = at::empty_like(critic.w3), d_b1 = at::empty_like(critic.b1);
  Tensor d_b2 = at::empty_like(critic.b2), d_b3 = at::empty_like(critic.b3);
  Tensor metrics = at::empty({2 * members + 1}, options);
  Tensor q = at::empty({rows}, options), d_q = at::empty({rows}, options);
  Tensor d_hidden2 = at::empty({rows, width}, options);
  Tensor d_hidden1 = at::empty({rows, width}, options);
  float* metric = data(metrics);
  float total_loss = 0.f;
  for (int64_t member = 0; member < members; ++member) {
    member_forward(critic, member, inputs, scratch1, scratch2, data(q), bf16_products);
    float q_sum = 0.f, squared_sum = 0.f, d_q_sum = 0.f;
    const float *values = data(q), *y = data(targets);
    float* d_values = data(d_q);
    for (int64_t r = 0; r < rows; ++r) {
      const float error = values[r] - y[r];
      q_sum += values[r];
      squared_sum += error * error;
      d_values[r] = error * (2.0f / static_cast<float>(rows));
      d_q_sum += d_values[r];
    }
    metric[member] = q_sum / static_cast<float>(rows);
    metric[members + member] = squared_sum / static_cast<float>(rows);
    total_loss += metric[members + member];
    data(d_b3)[member] = d_q_sum;
    timed("pass: output layer backward + ReLU mask + bias gradients", [&] {
      output_backward(data(scratch2), data(d_q), data(critic.w3[member]), data(d_hidden2),
                      data(d_b2[member]), data(d_w3[member]), rows, width);
    });
    timed("product: critic layer 2 input gradient (256^3)",
          [&] { product_out(d_hidden1, d_hidden2, critic.w2[member].t(), bf16_products); });
    timed("pass: ReLU mask + bias gradient", [&] {
      relu_backward_bias(data(scratch1), data(d_hidden1), data(d_b1[member]), rows, width);
    });
    Tensor d_w2_member = d_w2[member], d_w1_member = d_w1[member];
    timed("product: critic layer 2 weight gradient (256^3)",
          [&] { product_out(d_w2_member, scratch1.t(), d_hidden2, bf16_products); });
    timed("product: critic layer 1 weight gradient (m = obs + act)",
          [&] { product_out(d_w1_member, inputs.t(), d_hidden1, bf16_products); });
  }
  metric[2 * members] = total_loss / 2.f;
  return {d_w1, d_w2, d_w3, d_b1, d_b2, d_b3, metrics};
}

// The actor step (HandwrittenFormulation.actor_gradients): the actor's gradients in
// actor.parameters() order, then the actor loss. `policy_tensors`: policy_forward's outputs on
// `observations`; `observation_part` [M, B, 256]: the critics' first-layer bias plus the
// observations' product (EnsembleCritic.observation_part); `noise` [B, A]: the sample's draw.
std::vector<Tensor> actor_step(const std::vector<Tensor>& actor_tensors,
                               const std::vector<Tensor>& critic_tensors,
                               const Tensor& observations,
                               const std::vector<Tensor>& policy_tensors,
                               const Tensor& observation_part, const Tensor& noise,
                               double alpha_value, double log_std_half_range,
                               double half_log_2pi, bool bf16_products) {
  const at::NoGradGuard no_grad;
  const Actor actor = actor_of(actor_tensors);
  const Critic critic = critic_of(critic_tensors);
  TORCH_CHECK(policy_tensors.size() == 5, "policy: hidden1, hidden2, mean, log_std_tanh, log_std");
  check_dense(policy_tensors, "every policy tensor");
  check_dense({observations, observation_part, noise}, "observations, observation_part and noise");
  PolicyForward policy{policy_tensors[0], policy_tensors[1], policy_tensors[2], policy_tensors[3],
                       policy_tensors[4]};
  const int64_t rows = noise.size(0), action_dim = noise.size(1);
  const int64_t members = critic.w1.size(0), width = critic.w2.size(2);
  const int64_t obs_dim = critic.w1.size(1) - action_dim;
  check_rows({observations, policy.hidden1, policy.hidden2, policy.mean, policy.log_std}, rows,
             "observations and every policy tensor");
  TORCH_CHECK(width % kLanes == 0, "hidden width must be a multiple of ", kLanes, ", got ", width);
  const float alpha = static_cast<float>(alpha_value);
  const auto options = noise.options();

  Tensor action = at::empty({rows, action_dim}, options), log_pi = at::empty({rows}, options);
  Tensor squashed = at::empty_like(action), jacobian = at::empty_like(action);
  Tensor std_values = at::empty_like(action);
  squashed_sample(actor, policy, noise, half_log_2pi, data(action), action_dim, data(log_pi),
                  data(squashed), data(jacobian), data(std_values));

  // Both critics on (observation, action), their activations kept for the backward pass.
  Tensor hidden1 = at::empty({members, rows, width}, options);
  Tensor hidden2 = at::empty({members, rows, width}, options);
  Tensor q = at::empty({members, rows}, options);
  for (int64_t member = 0; member < members; ++member) {
    Tensor first = hidden1[member], second = hidden2[member];
    timed("product: critic layer 1, action part (k = act)", [&] {
      first.copy_(observation_part[member]);
      float32_product_out(first, action, critic.w1[member].narrow(0, obs_dim, action_dim),
                          /*accumulate=*/true);
    });
    timed("pass: bias + ReLU", [&] { add_bias_relu(data(first), nullptr, rows, width); });
    timed("product: critic layer 2 (256^3)",
          [&] { product_out(second, first, critic.w2[member], bf16_products); });
    const Section section("pass: bias + ReLU + output layer");
    add_bias_relu_output(data(second), data(critic.b2[member]), data(critic.w3[member]),
                         critic.b3[member].item<float>(), data(q) + member * rows, rows, width);
  }

  // d(-mean_b min_q_b)/d action through each row's smaller critic only, its rows gathered.
  const float row_scale = -1.f / static_cast<float>(rows);
  std::vector<float> min_q(rows);
  std::vector<std::vector<int64_t>> rows_of(members);
  const float* values = data(q);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t best = 0;
    for (int64_t member = 1; member < members; ++member) {
      if (smaller(values[member * rows + r], values[best * rows + r])) best = member;
    }
    min_q[r] = values[best * rows + r];
    rows_of[best].push_back(r);
  }
  Tensor action_gradient = at::empty({rows, action_dim}, options);
  float* action_gradient_rows = data(action_gradient);
  for (int64_t member = 0; member < members; ++member) {
    const std::vector<int64_t>& picked = rows_of[member];
    const int64_t count = static_cast<int64_t>(picked.size());
    if (count == 0) continue;
    const float* w_out = data(critic.w3[member]);
    const float *h1 = data(hidden1[member]), *h2 = data(hidden2[member]);
    // oneDNN (the float32 products where chosen, the bfloat16 ones always) builds and keeps a
    // kernel for each shape it multiplies, and the gathered row count changes from update to
    // update: rounded up to a multiple of kGatheredRowBlock with zero rows (whose results nothing
    // reads), a few shapes serve every update instead of a hundred (docs/performance.md). Whether
    // the product rounds its operands still follows the gathered rows, as on the eager path.
    const int64_t padded = onednn_float32_products || bf16_products
                               ? (count + kGatheredRowBlock - 1) / kGatheredRowBlock *
                                     kGatheredRowBlock
                               : count;
    const bool rounded_operands = rounds(count, width, critic.w2.size(1), bf16_products);
    Tensor d_hidden2 = at::empty({padded, width}, options);
    d_hidden2.narrow(0, count, padded - count).zero_();
    float* d_hidden2_rows = data(d_hidden2);
    for (int64_t i = 0; i < count; ++i) {
      const float* h = h2 + picked[i] * width;
      float* d = d_hidden2_rows + i * width;
      for (int64_t c = 0; c < width; ++c) d[c] = h[c] > 0.f ? w_out[c] * row_scale : 0.f;
    }
    Tensor d_hidden1 = timed("product: critic layer 2 input gradient, smaller critic's rows",
                             [&] { return product(d_hidden2, critic.w2[member].t(),
                                                  bf16_products, rounded_operands); });
    float* d_hidden1_rows = data(d_hidden1);
    for (int64_t i = 0; i < count; ++i) {
      const float* h = h1 + picked[i] * width;
      float* d = d_hidden1_rows + i * width;
      for (int64_t c = 0; c < width; ++c) d[c] = h[c] > 0.f ? d[c] : 0.f;
    }
    // [A, rows] rather than [rows, A]: the faster orientation (handwritten.py says why).
    const Tensor transposed = timed("product: action gradient (m = act)", [&] {
      return float32_product(critic.w1[member].narrow(0, obs_dim, action_dim), d_hidden1.t());
    });
    const float* columns = data(transposed);
    for (int64_t i = 0; i < count; ++i) {
      for (int64_t a = 0; a < action_dim; ++a) {
        action_gradient_rows[picked[i] * action_dim + a] = columns[a * padded + i];
      }
    }
  }
  float loss_sum = 0.f;
  const float* log_pi_rows = data(log_pi);
  for (int64_t r = 0; r < rows; ++r) loss_sum += alpha * log_pi_rows[r] - min_q[r];
  Tensor actor_loss = at::full({}, loss_sum / static_cast<float>(rows), options);

  // The actor's backward pass (handwritten.policy_gradients), its elementwise work fused.
  const float log_prob_gradient = alpha / static_cast<float>(rows);
  const float half_range = static_cast<float>(log_std_half_range);
  Tensor d_mean = at::empty_like(action), d_head = at::empty_like(action);
  const float *scales = data(actor.scale), *y = data(squashed), *jacobians = data(jacobian);
  const float *stds = data(std_values), *z = data(noise), *t = data(policy.log_std_tanh);
  float *d_mean_out = data(d_mean), *d_head_out = data(d_head);
  timed("pass: backward through the sample and the heads' activations", [&] {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t a = 0; a < action_dim; ++a) {
        const int64_t i = r * action_dim + a;
        const float scale = scales[a];
        const float d_squashed = action_gradient_rows[i] * scale +
                                 log_prob_gradient * (2.f * scale * y[i] / jacobians[i]);
        d_mean_out[i] = d_squashed * (1.f - y[i] * y[i]);
        const float d_log_std = d_mean_out[i] * stds[i] * z[i] - log_prob_gradient;
        d_head_out[i] = d_log_std * (half_range * (1.f - t[i] * t[i]));
      }
    }
  });
  Tensor d_hidden2 = timed("product: actor heads input gradient (k = act, 2 products)", [&] {
    Tensor gradient = float32_product(d_mean, actor.w_mean);
    float32_product_out(gradient, d_head, actor.w_log_std, /*accumulate=*/true);
    return gradient;
  });
  const int64_t hidden = d_hidden2.size(1);
  Tensor d_b2 = at::empty({hidden}, options), d_b1 = at::empty({hidden}, options);
  timed("pass: ReLU mask + bias gradient", [&] {
    relu_backward_bias(data(policy.hidden2), data(d_hidden2), data(d_b2), rows, hidden);
  });
  Tensor d_hidden1 = timed("product: actor layer 2 input gradient (256^3)",
                           [&] { return product(d_hidden2, actor.w2, bf16_products); });
  timed("pass: ReLU mask + bias gradient", [&] {
    relu_backward_bias(data(policy.hidden1), data(d_hidden1), data(d_b1), rows, hidden);
  });
  const Tensor d_w1 = timed("product: actor layer 1 weight gradient (n = obs)",
                            [&] { return product(d_hidden1.t(), observations, bf16_products); });
  const Tensor d_w2 = timed("product: actor layer 2 weight gradient (256^3)",
                            [&] { return product(d_hidden2.t(), policy.hidden1, bf16_products); });
  return timed("product: actor heads weight gradients (m = act, 2 products)", [&] {
    return std::vector<Tensor>{d_w1, d_b1, d_w2, d_b2, float32_product(d_mean.t(), policy.hidden2),
                               d_mean.sum(0), float32_product(d_head.t(), policy.hidden2),
                               d_head.sum(0), actor_loss};
  });
}

// One optimizer of FastLearner as sacbench.sac.adam.adam_step reads it: its parameters, exp_avg,
// exp_avg_sq and step tensors, and its hyperparameters lr, beta1, beta2, weight_decay, eps.
struct Adam {
  std::vector<Tensor> parameters, exp_avgs, exp_avg_sqs, steps;
  double lr, beta1, beta2, weight_decay, eps;
};

Adam adam_of(const std::vector<std::vector<Tensor>>& lists, const std::vector<double>& hyper) {
  TORCH_CHECK(lists.size() == 4, "an optimizer is 4 lists: parameters, exp_avg, exp_avg_sq, step");
  TORCH_CHECK(hyper.size() == 5,
              "an optimizer's hyperparameters: lr, beta1, beta2, weight_decay, eps");
  for (const auto& list : lists) {
    TORCH_CHECK(list.size() == lists[0].size(), "an optimizer's 4 lists must be equally long");
  }
  return {lists[0], lists[1], lists[2], lists[3], hyper[0], hyper[1], hyper[2], hyper[3], hyper[4]};
}

// What adam_step does: every step count + 1, then torch.optim.Adam(fused=True)'s kernel.
void adam_step(const Adam& adam, const std::vector<Tensor>& gradients) {
  const Section section("optimizer: Adam steps");
  const SubnormalsAsZero subnormals_as_zero(adam_subnormals_as_zero);
  TORCH_CHECK(gradients.size() == adam.parameters.size(), "expected ", adam.parameters.size(),
              " gradients, got ", gradients.size());
  at::_foreach_add_(adam.steps, 1);
  at::_fused_adam_(adam.parameters, gradients, adam.exp_avgs, adam.exp_avg_sqs, {}, adam.steps,
                   adam.lr, adam.beta1, adam.beta2, adam.weight_decay, adam.eps,
                   /*amsgrad=*/false, /*maximize=*/false, std::nullopt, std::nullopt);
}

}  // namespace

// One training step's updates (FastLearner.update with --fused-update) in one call: the critic
// step and its Adam step; `actor_updates` actor steps, each with its Adam step and, when
// `autotune`, the alpha loss on the updated actor and alpha's Adam step; the target update when
// `target_update`. The same operations, draws (in the same order) and Adam kernel as
// FastLearner's loop over FusedFormulation, without Python between them.
// `actor`: actor_tensors' order; `critic`, `target`: parameters() order; each optimizer as
// adam_of reads it; `alpha_value`: alpha when it is not tuned, or its current value;
// `bf16_products`: every product as `product` computes it (--precision bf16).
// Returns the critic metrics, then the last actor loss, alpha loss and alpha (exp(log_alpha)),
// each undefined (None) when this step computed none.
std::vector<Tensor> update(const std::vector<Tensor>& actor, const std::vector<Tensor>& critic,
                           const std::vector<Tensor>& target,
                           const std::vector<std::vector<Tensor>>& critic_optimizer,
                           const std::vector<double>& critic_hyper,
                           const std::vector<std::vector<Tensor>>& actor_optimizer,
                           const std::vector<double>& actor_hyper,
                           const std::vector<std::vector<Tensor>>& alpha_optimizer,
                           const std::vector<double>& alpha_hyper, const Tensor& observations,
                           const Tensor& actions, const Tensor& next_observations,
                           const Tensor& rewards, const Tensor& terminations, double alpha_value,
                           bool autotune, double target_entropy, double gamma, double tau,
                           int64_t actor_updates, bool target_update, double log_std_min,
                           double log_std_half_range, double half_log_2pi, bool bf16_products) {
  const at::NoGradGuard no_grad;
  const BelowAutograd below_autograd;
  const Adam critic_adam = adam_of(critic_optimizer, critic_hyper);
  const Adam actor_adam = adam_of(actor_optimizer, actor_hyper);
  const Adam alpha_adam = adam_of(alpha_optimizer, alpha_hyper);
  TORCH_CHECK(actor_updates >= 0, "actor_updates must be non-negative, got ", actor_updates);
  TORCH_CHECK(alpha_adam.parameters.size() == 1, "the alpha optimizer holds log_alpha alone");
  const Critic online = critic_of(critic);
  const int64_t rows = observations.size(0), action_dim = actor[4].size(0);
  const auto options = observations.options();

  // Each a standard-normal [B, A] tensor from torch's default generator, as torch.randn draws it.
  const auto draw = [&] {
    return timed("other: standard-normal draws",
                 [&] { return at::randn({rows, action_dim}, options); });
  };
  Tensor noise = draw();
  std::vector<Tensor> critic_out =
      critic_step(actor, critic, target, observations, actions, next_observations, rewards,
                  terminations, noise, alpha_value, gamma, log_std_min, log_std_half_range,
                  half_log_2pi, bf16_products);
  const Tensor metrics = critic_out.back();
  critic_out.pop_back();
  adam_step(critic_adam, critic_out);

  Tensor actor_loss, alpha_loss, alpha;
  if (actor_updates > 0) {
    // The critics do not change during the actor updates: their observation part is computed
    // once (EnsembleCritic.observation_part: b1 + observations @ w1[:, :obs_dim], batched).
    const int64_t members = online.w1.size(0), obs_dim = observations.size(1);
    const Tensor observation_part =
        timed("product: critic layer 1, observation part (k = obs)", [&] {
          const Tensor expanded = observations.expand({members, rows, obs_dim});
          const Tensor weights = online.w1.narrow(1, 0, obs_dim);
          // As sacbench.sac.products.affine: a rounded product, then the float32 bias.
          if (rounds(expanded, weights, bf16_products)) {
            return product(expanded, weights, bf16_products).add_(online.b1);
          }
          return at::baddbmm(online.b1, expanded, weights);
        });
    std::vector<Tensor> policy = policy_forward(actor, observations, log_std_min,
                                                log_std_half_range, bf16_products);
    const Tensor& log_alpha = alpha_adam.parameters[0];
    for (int64_t step = 0; step < actor_updates; ++step) {
      noise = draw();
      std::vector<Tensor> actor_out =
          actor_step(actor, critic, observations, policy, observation_part, noise, alpha_value,
                     log_std_half_range, half_log_2pi, bf16_products);
      actor_loss = actor_out.back();
      actor_out.pop_back();
      adam_step(actor_adam, actor_out);
      const bool another_follows = step + 1 < actor_updates;
      if (!(autotune || another_follows)) break;
      // The updated actor on the same observations: the alpha loss's forward pass, and the next
      // actor update's (the actor does not change in between).
      policy = policy_forward(actor, observations, log_std_min, log_std_half_range,
                              bf16_products);
      if (autotune) {
        noise = draw();
        const Tensor log_pi = sample_log_prob(actor, policy[2], policy[4], noise, half_log_2pi);
        // alpha_loss_fn; its gradient with respect to log_alpha is the loss itself.
        alpha_loss = timed("other: alpha loss", [&] {
          return log_alpha.exp().neg().mul(log_pi.add(target_entropy)).mean();
        });
        adam_step(alpha_adam, {alpha_loss.reshape(1)});
        alpha = log_alpha.detach().exp();
        alpha_value = alpha.item<double>();
      }
    }
  }
  if (target_update) {
    const Section section("optimizer: target update");
    at::_foreach_lerp_(target, critic, tau);
  }
  return {metrics, actor_loss, alpha_loss, alpha};
}

namespace {

// MKL asks two functions of its own whether it runs on an Intel CPU, once, at its first call in a
// process; on any other vendor's CPU it then runs its generic x86 code path, not the kernels it
// has for the CPU's instruction set. On AMD's Zen 3 (AVX2 and FMA) its AVX2 kernels, the ones it
// runs on Intel's AVX2 CPUs, make the fused update's products faster, the thin ones most
// (docs/performance.md). libtorch_cpu calls both functions through its procedure linkage table:
// pointing their two slots there at `answer_intel` makes MKL choose by instruction set alone.
// sacbench.sac.fused decides where (by the CPU's flags), before MKL's first call.
int64_t mkl_vendor_questions = 0;

int answer_intel() {
  ++mkl_vendor_questions;
  return 1;
}

#if defined(__linux__) && defined(__x86_64__)
constexpr const char* kMklVendorChecks[] = {"mkl_serv_intel_cpu", "mkl_serv_intel_cpu_true"};

struct SlotSearch {
  const char* library;  // a loaded object whose path contains this
  int64_t replaced = 0;
};

// Points every jump slot of search->library that binds one of kMklVendorChecks at answer_intel.
int replace_vendor_check_slots(dl_phdr_info* info, size_t /*size*/, void* data) {
  auto* search = static_cast<SlotSearch*>(data);
  if (info->dlpi_name == nullptr || std::strstr(info->dlpi_name, search->library) == nullptr) {
    return 0;
  }
  const ElfW(Addr) base = info->dlpi_addr;
  const ElfW(Dyn)* dynamic = nullptr;
  uintptr_t read_only_start = 0, read_only_end = 0;  // RELRO: read-only once relocated
  for (ElfW(Half) i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& segment = info->dlpi_phdr[i];
    if (segment.p_type == PT_DYNAMIC) {
      dynamic = reinterpret_cast<const ElfW(Dyn)*>(base + segment.p_vaddr);
    } else if (segment.p_type == PT_GNU_RELRO) {
      read_only_start = base + segment.p_vaddr;
      read_only_end = read_only_start + segment.p_memsz;
    }
  }
  if (dynamic == nullptr) return 1;
  // glibc has relocated these entries to addresses; an unrelocated one is an offset from base.
  const auto address = [base](ElfW(Addr) value) { return value < base ? base + value : value; };
  const ElfW(Sym)* symbols = nullptr;
  const char* names = nullptr;
  const ElfW(Rela)* slots = nullptr;
  size_t slots_size = 0;
  for (const ElfW(Dyn)* entry = dynamic; entry->d_tag != DT_NULL; ++entry) {
    if (entry->d_tag == DT_SYMTAB) {
      symbols = reinterpret_cast<const ElfW(Sym)*>(address(entry->d_un.d_ptr));
    } else if (entry->d_tag == DT_STRTAB) {
      names = reinterpret_cast<const char*>(address(entry->d_un.d_ptr));
    } else if (entry->d_tag == DT_JMPREL) {
      slots = reinterpret_cast<const ElfW(Rela)*>(address(entry->d_un.d_ptr));
    } else if (entry->d_tag == DT_PLTRELSZ) {
      slots_size = entry->d_un.d_val;
    }
  }
  if (symbols == nullptr || names == nullptr || slots == nullptr) return 1;
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  for (size_t i = 0; i < slots_size / sizeof(ElfW(Rela)); ++i) {
    if (ELF64_R_TYPE(slots[i].r_info) != R_X86_64_JUMP_SLOT) continue;
    const char* name = names + symbols[ELF64_R_SYM(slots[i].r_info)].st_name;
    if (std::none_of(std::begin(kMklVendorChecks), std::end(kMklVendorChecks),
                     [name](const char* check) { return std::strcmp(name, check) == 0; })) {
      continue;
    }
    auto* slot = reinterpret_cast<void**>(base + slots[i].r_offset);
    const auto at = reinterpret_cast<uintptr_t>(slot);
    const bool read_only = at >= read_only_start && at < read_only_end;
    void* slot_page = reinterpret_cast<void*>(at & ~(page - 1));
    // A slot under RELRO (bound at load) is writable for the one store only.
    if (read_only && mprotect(slot_page, page, PROT_READ | PROT_WRITE) != 0) continue;
    *slot = reinterpret_cast<void*>(&answer_intel);
    if (read_only) mprotect(slot_page, page, PROT_READ);
    ++search->replaced;
  }
  return 1;
}
#endif

}  // namespace

// Points libtorch_cpu's calls of MKL's vendor checks at answer_intel; returns how many call
// slots now lead there (0 where none is found, or off x86-64 Linux). Only MKL's first call in
// the process reads the answer: sacbench.sac.fused calls this before any product.
int64_t answer_mkl_vendor_checks() {
#if defined(__linux__) && defined(__x86_64__)
  SlotSearch search{"libtorch_cpu"};
  dl_iterate_phdr(replace_vendor_check_slots, &search);
  return search.replaced;
#else
  return 0;
#endif
}

// How many times MKL has asked answer_intel: 0 while it has not, e.g. where it chose its code
// path before the slots led there.
int64_t mkl_vendor_questions_answered() { return mkl_vendor_questions; }

// "aten" (ATen's float32 products: MKL's on x86) or "onednn" (oneDNN's matmul primitive).
void set_float32_products(const std::string& library) {
  TORCH_CHECK(library == "aten" || library == "onednn",
              "float32 products: \"aten\" or \"onednn\", not \"", library, "\"");
  onednn_float32_products = library == "onednn";
}

std::string float32_products() { return onednn_float32_products ? "onednn" : "aten"; }

void set_adam_subnormals_as_zero(bool enabled) { adam_subnormals_as_zero = enabled; }
bool adam_subnormals_are_zero() { return adam_subnormals_as_zero; }

void set_section_times(bool enabled) { timing_sections = enabled; }
// {section: (seconds, calls)} timed since the last reset (benchmarks/fused_sections.py).
std::map<std::string, std::pair<double, int64_t>> section_times() { return section_table; }
void reset_section_times() { section_table.clear(); }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  module.def("act", &act, "the policy's actions: its forward pass and one squashed sample");
  module.def("update", &update, "one training step's updates in one call (see update)");
  module.def("answer_mkl_vendor_checks", &answer_mkl_vendor_checks,
             "MKL's vendor checks answered \"Intel\" from now on: how many call slots lead there");
  module.def("mkl_vendor_questions_answered", &mkl_vendor_questions_answered,
             "how many times MKL has asked since answer_mkl_vendor_checks");
  module.def("set_float32_products", &set_float32_products,
             "which library multiplies the float32 products: \"aten\" or \"onednn\"");
  module.def("float32_products", &float32_products, "the library set_float32_products chose");
  module.def("set_adam_subnormals_as_zero", &set_adam_subnormals_as_zero,
             "whether the Adam steps treat subnormal floats as zero");
  module.def("adam_subnormals_are_zero", &adam_subnormals_are_zero,
             "what set_adam_subnormals_as_zero set");
  module.def("set_section_times", &set_section_times,
             "whether each section adds its wall time and call count to the section table");
  module.def("section_times", &section_times, "{section: (seconds, calls)} since the reset");
  module.def("reset_section_times", &reset_section_times, "empties the section table");
}
