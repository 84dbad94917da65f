// moe_ffn's gpt-oss options (model/moe_ffn.h): router bias, per-expert gate / up / down biases,
// LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT gating without renormalisation and swiglu_oai,
// against a naive double-precision expert mixture written from llama.cpp's build_moe_ffn.
#include "model/moe_ffn.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/threadpool.h"

namespace agentkv {
namespace {

struct Fixture {
  int n_expert = 5, n_used = 2;
  int64_t E = 16, Fe = 12, n = 4;
  std::vector<float> x, router, gate, up, down, router_b, gate_b, up_b, down_b;
  MoeWeights w;

  explicit Fixture(uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    auto fill = [&](std::vector<float>& v, size_t count, float s) {
      v.resize(count);
      for (auto& e : v) e = nd(rng) * s;
    };
    fill(x, static_cast<size_t>(n * E), 1.0f);
    fill(router, static_cast<size_t>(n_expert * E), 0.5f);
    fill(gate, static_cast<size_t>(n_expert * Fe * E), 0.6f);
    fill(up, static_cast<size_t>(n_expert * Fe * E), 0.6f);
    fill(down, static_cast<size_t>(n_expert * E * Fe), 0.3f);
    fill(router_b, static_cast<size_t>(n_expert), 1.0f);
    fill(gate_b, static_cast<size_t>(n_expert * Fe), 2.0f);  // pushes some gates past the limit 7
    fill(up_b, static_cast<size_t>(n_expert * Fe), 3.0f);
    fill(down_b, static_cast<size_t>(n_expert * E), 1.0f);
    w.n_expert = n_expert;
    w.n_used = n_used;
    w.router = matrix(router.data(), E, n_expert);
    for (int e = 0; e < n_expert; ++e) {
      w.gate.push_back(matrix(gate.data() + e * Fe * E, E, Fe));
      w.up.push_back(matrix(up.data() + e * Fe * E, E, Fe));
      w.down.push_back(matrix(down.data() + e * E * Fe, Fe, E));
    }
  }
  static WeightMatrix matrix(const float* data, int64_t n_in, int64_t n_out) {
    WeightMatrix m;
    m.type = GgmlType::F32;
    m.n_in = n_in;
    m.n_out = n_out;
    m.data = reinterpret_cast<const uint8_t*>(data);
    m.row_bytes = static_cast<size_t>(n_in) * sizeof(float);
    return m;
  }
  void gpt_oss_options() {
    w.router_bias = router_b.data();
    for (int e = 0; e < n_expert; ++e) {
      w.gate_bias.push_back(gate_b.data() + e * Fe);
      w.up_bias.push_back(up_b.data() + e * Fe);
      w.down_bias.push_back(down_b.data() + e * E);
    }
    w.softmax_weight = true;
    w.normalize_weights = false;
    w.swiglu_oai = true;
  }

  static double dot(const float* a, const float* b, int64_t k) {
    double s = 0;
    for (int64_t i = 0; i < k; ++i) s += static_cast<double>(a[i]) * b[i];
    return s;
  }
  // llama.cpp's build_moe_ffn in double; gpt_oss: biases, SOFTMAX_WEIGHT, no norm_w, swiglu_oai.
  std::vector<double> reference(bool gpt_oss) const {
    std::vector<double> out(static_cast<size_t>(n * E), 0.0);
    for (int64_t t = 0; t < n; ++t) {
      const float* xt = x.data() + t * E;
      std::vector<double> logits(static_cast<size_t>(n_expert));
      for (int e = 0; e < n_expert; ++e) logits[e] = dot(router.data() + e * E, xt, E) + (gpt_oss ? router_b[e] : 0.0);
      std::vector<int> order(static_cast<size_t>(n_expert));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
      std::vector<double> wts(static_cast<size_t>(n_used));
      if (gpt_oss) {  // softmax over the selected logits
        double sum = 0;
        for (int s = 0; s < n_used; ++s) sum += wts[s] = std::exp(logits[order[s]] - logits[order[0]]);
        for (double& v : wts) v /= sum;
      } else {  // softmax over all, renormalised over the selected
        double sum = 0;
        for (int s = 0; s < n_used; ++s) sum += wts[s] = std::exp(logits[order[s]] - logits[order[0]]);
        for (double& v : wts) v /= sum;  // the full softmax's denominator cancels
      }
      for (int s = 0; s < n_used; ++s) {
        const int e = order[s];
        std::vector<float> act(static_cast<size_t>(Fe));
        for (int64_t f = 0; f < Fe; ++f) {
          double g = dot(gate.data() + (e * Fe + f) * E, xt, E);
          double u = dot(up.data() + (e * Fe + f) * E, xt, E);
          if (gpt_oss) {
            g += gate_b[e * Fe + f];
            u += up_b[e * Fe + f];
            const double xg = std::min(g, 7.0), yu = std::clamp(u, -7.0, 7.0);
            act[f] = static_cast<float>(xg / (1.0 + std::exp(-1.702 * xg)) * (yu + 1.0));
          } else {
            act[f] = static_cast<float>(g / (1.0 + std::exp(-g)) * u);
          }
        }
        for (int64_t i = 0; i < E; ++i) {
          double d = dot(down.data() + (e * E + i) * Fe, act.data(), Fe);
          if (gpt_oss) d += down_b[e * E + i];
          out[t * E + i] += wts[s] * d;
        }
      }
    }
    return out;
  }
  std::vector<float> run() const {
    std::vector<float> out(static_cast<size_t>(n * E), NAN);
    Workspace ws;
    ThreadPool pool(2);
    moe_ffn(w, x.data(), n, E, out.data(), ws, pool);
    return out;
  }
};

void expect_close(const std::vector<float>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 2e-4 * (1.0 + std::abs(want[i]))) << "element " << i;
}

TEST(MoeFfn, GptOssBiasesSoftmaxWeightGatingAndSwigluOai) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    Fixture f(seed);
    f.gpt_oss_options();
    expect_close(f.run(), f.reference(true));
  }
}

TEST(MoeFfn, DefaultOptionsAreSoftmaxRenormalisedSwiglu) {
  Fixture f(7);
  expect_close(f.run(), f.reference(false));
}

}  // namespace
}  // namespace agentkv
