// What a speculative pass fed the recurrent layers of a sequence, token by token: each layer's
// conv inputs and gates, recorded by the forward pass while the sequence's tape is armed. A
// recurrent state cannot drop a suffix, but the state after any accepted prefix of the pass is the
// state before it plus those tokens' recurrence alone (no matmul): the model recomputes it from the
// tape (ArchModel::replay_recurrent), so a rejected draft costs no second pass over the accepted
// tokens. The recurrence is the step form at draft sizes, so the recomputed state is the pass's.
#pragma once
#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "agentkv/memory.h"

namespace agentkv::memory {

struct RecurrentTape {
  struct Layer {
    std::vector<float> x;     // conv inputs, x_width floats per token
    std::vector<float> gate;  // gates and betas, n_heads floats per token each
    std::vector<float> beta;
    int64_t n_tokens = 0;
  };
  std::vector<Layer> layers;  // by model layer (empty for the attention layers)

  // Appends n tokens of layer il: rows of x_width conv inputs, of n_heads gates and betas.
  void record(int il, const float* x, int64_t x_width, const float* gate, const float* beta, int64_t n_heads,
              int64_t n) {
    if (static_cast<size_t>(il) >= layers.size()) layers.resize(static_cast<size_t>(il) + 1);
    Layer& l = layers[static_cast<size_t>(il)];
    l.x.insert(l.x.end(), x, x + n * x_width);
    l.gate.insert(l.gate.end(), gate, gate + n * n_heads);
    l.beta.insert(l.beta.end(), beta, beta + n * n_heads);
    l.n_tokens += n;
  }
  // The tokens every layer in `recurrent` recorded (the fewest of them).
  int64_t recorded(const std::vector<bool>& recurrent) const {
    int64_t n = INT64_MAX;
    for (size_t il = 0; il < recurrent.size(); ++il)
      if (recurrent[il]) n = std::min(n, il < layers.size() ? layers[il].n_tokens : 0);
    return n == INT64_MAX ? 0 : n;
  }
};

// The armed tapes of a memory's sequences (those in a speculative pass).
class RecurrentTapes {
 public:
  void arm(SeqId seq) { tapes_[seq] = RecurrentTape{}; }
  void disarm(SeqId seq) { tapes_.erase(seq); }
  // seq's tape while armed, else null.
  RecurrentTape* find(SeqId seq) {
    auto it = tapes_.find(seq);
    return it == tapes_.end() ? nullptr : &it->second;
  }
  bool empty() const { return tapes_.empty(); }

 private:
  std::map<SeqId, RecurrentTape> tapes_;
};

}  // namespace agentkv::memory
