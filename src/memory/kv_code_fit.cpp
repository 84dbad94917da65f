#include "memory/kv_code_fit.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "agentkv/error.h"

namespace agentkv::memory {
namespace {

// uniform_step / uniform_distortion for widths 0..7: the optimal step of a 2^w-level midrise
// quantizer of N(0, 1) and its mean squared error (golden-section search on the exact error).
constexpr double kStep[kCodedMaxWidth + 1] = {0.0, 1.595769, 0.995653, 0.586018, 0.335182, 0.188152, 0.104057, 0.056867};
constexpr double kDistortion[kCodedMaxWidth + 1] = {1.0, 0.3633802, 0.1188461, 0.0374397, 0.0115429, 0.0034952, 0.0010400, 0.0003043};

// Coordinates by width, widest first (ties: more important first, then index): the storage order.
std::vector<int> storage_order(const std::vector<uint8_t>& widths, const std::vector<double>& importance) {
  std::vector<int> order(widths.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    if (widths[a] != widths[b]) return widths[a] > widths[b];
    return importance[a] > importance[b];
  });
  return order;
}

// A per-coordinate deviation with a floor, so that a silent coordinate that still gets bits maps finitely.
std::vector<double> deviations(const std::vector<double>& variance) {
  double top = 0;
  for (double v : variance) top = std::max(top, v);
  std::vector<double> sd(variance.size());
  for (size_t i = 0; i < variance.size(); ++i) sd[i] = std::sqrt(std::max(variance[i], top > 0 ? 1e-12 * top : 1.0));
  return sd;
}

// One side (K or V) of one KV head: its maps and its stored widths.
struct CodedSide {
  KvCodeMaps maps;
  std::vector<uint8_t> widths;  // in storage order
};

// Coordinates y = B^T x in the basis B (columns: basis[k * D + c] is component k of vector c; null:
// the coordinates themselves) get widths by `importance`, and code units of their deviation (from
// `variance`) times their width's step; stored widest first.
CodedSide code_side(const std::vector<double>* basis, const std::vector<double>& importance,
                    const std::vector<double>& variance, int64_t D) {
  const std::vector<uint8_t> widths = allocate_widths(importance, D / 32 * kCodedBitsPer32);
  const std::vector<int> order = storage_order(widths, importance);
  const std::vector<double> sd = deviations(variance);
  CodedSide side;
  side.maps.to_code.assign(static_cast<size_t>(D * D), 0.0f);
  side.maps.from_code.assign(static_cast<size_t>(D * D), 0.0f);
  side.widths.resize(static_cast<size_t>(D));
  for (int64_t i = 0; i < D; ++i) {
    const int c = order[static_cast<size_t>(i)], w = widths[static_cast<size_t>(c)];
    side.widths[static_cast<size_t>(i)] = static_cast<uint8_t>(w);
    const double unit = w > 0 ? sd[static_cast<size_t>(c)] * kStep[w] : 1.0;
    for (int64_t k = 0; k < D; ++k) {
      const double e = basis ? (*basis)[static_cast<size_t>(k * D + c)] : (k == c ? 1.0 : 0.0);
      if (e == 0.0) continue;
      side.maps.to_code[static_cast<size_t>(i * D + k)] = static_cast<float>(e / unit);
      if (w > 0) side.maps.from_code[static_cast<size_t>(k * D + i)] = static_cast<float>(e * unit);
    }
  }
  return side;
}

}  // namespace

double uniform_step(int width) { return kStep[std::clamp(width, 0, kCodedMaxWidth)]; }
double uniform_distortion(int width) { return kDistortion[std::clamp(width, 0, kCodedMaxWidth)]; }

KvMoments::KvMoments(std::vector<int> layers, int64_t head_dim, int64_t n_head, int64_t n_head_kv)
    : layers_(std::move(layers)), head_dim_(head_dim), n_head_(n_head), n_head_kv_(n_head_kv) {
  if (head_dim_ <= 0 || n_head_kv_ <= 0 || n_head_ % n_head_kv_ != 0) throw Error("KV moments: bad head shape");
  sums_.resize(layers_.size());
  for (Sums& s : sums_) {
    s.kk.assign(static_cast<size_t>(n_head_kv_ * head_dim_), 0.0);
    s.qq.assign(static_cast<size_t>(n_head_kv_ * head_dim_), 0.0);
    s.vv.assign(static_cast<size_t>(n_head_kv_ * head_dim_ * head_dim_), 0.0);
  }
}

size_t KvMoments::index(int model_layer) const {
  const auto it = std::find(layers_.begin(), layers_.end(), model_layer);
  if (it == layers_.end()) throw Error("KV moments: layer " + std::to_string(model_layer) + " does not attend");
  return static_cast<size_t>(it - layers_.begin());
}

void KvMoments::add(int model_layer, const float* q, const float* k, const float* v) {
  Sums& s = sums_[index(model_layer)];
  const int64_t D = head_dim_, group = n_head_ / n_head_kv_;
  for (int64_t g = 0; g < n_head_kv_; ++g) {
    const float* kr = k + g * D;
    const float* vr = v + g * D;
    double* kk = s.kk.data() + g * D;
    double* qq = s.qq.data() + g * D;
    double* vv = s.vv.data() + g * D * D;
    for (int64_t i = 0; i < D; ++i) {
      kk[i] += static_cast<double>(kr[i]) * kr[i];
      for (int64_t j = 0; j < D; ++j) vv[i * D + j] += static_cast<double>(vr[i]) * vr[j];
    }
    for (int64_t h = g * group; h < (g + 1) * group; ++h)
      for (int64_t i = 0; i < D; ++i) qq[i] += static_cast<double>(q[h * D + i]) * q[h * D + i];
  }
  ++s.n;
}

int64_t KvMoments::tokens(int model_layer) const { return sums_[index(model_layer)].n; }

namespace {
std::vector<double> mean_of(const std::vector<double>& sums, size_t offset, size_t count, int64_t n) {
  std::vector<double> out(sums.begin() + static_cast<std::ptrdiff_t>(offset), sums.begin() + static_cast<std::ptrdiff_t>(offset + count));
  for (double& x : out) x /= static_cast<double>(std::max<int64_t>(n, 1));
  return out;
}
}  // namespace

std::vector<double> KvMoments::k_energy(size_t li, int64_t head) const {
  return mean_of(sums_[li].kk, static_cast<size_t>(head * head_dim_), static_cast<size_t>(head_dim_), sums_[li].n);
}
std::vector<double> KvMoments::q_energy(size_t li, int64_t head) const {
  return mean_of(sums_[li].qq, static_cast<size_t>(head * head_dim_), static_cast<size_t>(head_dim_), sums_[li].n);
}
std::vector<double> KvMoments::v_moment(size_t li, int64_t head) const {
  return mean_of(sums_[li].vv, static_cast<size_t>(head * head_dim_ * head_dim_), static_cast<size_t>(head_dim_ * head_dim_), sums_[li].n);
}

std::vector<uint8_t> allocate_widths(const std::vector<double>& importance, int64_t bits) {
  std::vector<uint8_t> widths(importance.size(), 0);
  if (bits > static_cast<int64_t>(importance.size()) * kCodedMaxWidth) throw Error("KV code: more bits than coordinates can hold");
  for (int64_t spent = 0; spent < bits; ++spent) {
    size_t best = widths.size();
    double best_gain = -1;
    for (size_t i = 0; i < widths.size(); ++i) {
      if (widths[i] >= kCodedMaxWidth) continue;
      const double gain = std::max(importance[i], 0.0) * (kDistortion[widths[i]] - kDistortion[widths[i] + 1]);
      if (gain > best_gain) best_gain = gain, best = i;
    }
    ++widths[best];
  }
  return widths;
}

std::vector<double> symmetric_eigen(std::vector<double> a, int n, std::vector<double>* vectors) {
  if (vectors) {
    vectors->assign(static_cast<size_t>(n * n), 0.0);
    for (int i = 0; i < n; ++i) (*vectors)[static_cast<size_t>(i * n + i)] = 1.0;
  }
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0, total = 0;
    for (int p = 0; p < n; ++p)
      for (int q = 0; q < n; ++q) (p == q ? total : off) += a[p * n + q] * a[p * n + q];
    if (off <= 1e-28 * std::max(total, 1e-300)) break;
    for (int p = 0; p < n; ++p) {
      for (int q = p + 1; q < n; ++q) {
        const double apq = a[p * n + q];
        if (apq == 0) continue;
        const double theta = (a[q * n + q] - a[p * n + p]) / (2 * apq);
        const double t = (theta >= 0 ? 1 : -1) / (std::fabs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        const auto rotate = [&](double& x, double& y) {
          const double x0 = x, y0 = y;
          x = c * x0 - s * y0;
          y = s * x0 + c * y0;
        };
        for (int k = 0; k < n; ++k) rotate(a[k * n + p], a[k * n + q]);
        for (int k = 0; k < n; ++k) rotate(a[p * n + k], a[q * n + k]);
        if (vectors)
          for (int k = 0; k < n; ++k) rotate((*vectors)[static_cast<size_t>(k * n + p)], (*vectors)[static_cast<size_t>(k * n + q)]);
      }
    }
  }
  std::vector<double> e(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) e[static_cast<size_t>(i)] = a[i * n + i];
  return e;
}

std::shared_ptr<const KvCode> fit_kv_code(const KvMoments& m, int64_t rope_pair, int64_t n_rot) {
  const int64_t D = m.head_dim(), H = m.n_head_kv();
  std::vector<KvCodeLayer> layers;
  for (size_t li = 0; li < m.layers().size(); ++li) {
    if (m.tokens(m.layers()[li]) == 0) throw Error("KV code: no rows of layer " + std::to_string(m.layers()[li]) + " to fit");
    KvCodeLayer l;
    l.layer = m.layers()[li];
    std::vector<std::vector<uint8_t>> k_widths, v_widths;
    for (int64_t g = 0; g < H; ++g) {
      // K: coordinates in place, importance = pair-averaged variance x pair-averaged query energy.
      std::vector<double> kv = m.k_energy(li, g), qe = m.q_energy(li, g);
      const auto pair_mean = [&](std::vector<double>& x) {
        if (rope_pair <= 0) return;
        std::vector<double> y = x;
        for (int64_t i = 0; i < std::min(n_rot, D); ++i) {
          const int64_t p = i < rope_pair ? i + rope_pair : i - rope_pair;
          if (p < n_rot) y[static_cast<size_t>(i)] = 0.5 * (x[static_cast<size_t>(i)] + x[static_cast<size_t>(p)]);
        }
        x = y;
      };
      pair_mean(kv);
      pair_mean(qe);
      std::vector<double> importance(static_cast<size_t>(D));
      for (int64_t i = 0; i < D; ++i) importance[static_cast<size_t>(i)] = kv[static_cast<size_t>(i)] * qe[static_cast<size_t>(i)];
      const CodedSide k_side = code_side(nullptr, importance, kv, D);
      l.k.push_back(k_side.maps);
      k_widths.push_back(k_side.widths);

      // V: the eigenbasis of its second moment, importance = eigenvalue.
      std::vector<double> basis;
      std::vector<double> lam = symmetric_eigen(m.v_moment(li, g), static_cast<int>(D), &basis);
      for (double& x : lam) x = std::max(x, 0.0);
      const CodedSide v_side = code_side(&basis, lam, lam, D);
      l.v.push_back(v_side.maps);
      v_widths.push_back(v_side.widths);
    }
    l.k_rows = CodedHeads(D, std::move(k_widths));
    l.v_rows = CodedHeads(D, std::move(v_widths));
    layers.push_back(std::move(l));
  }
  return std::make_shared<const KvCode>(D, H, std::move(layers));
}

}  // namespace agentkv::memory
