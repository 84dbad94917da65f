#include "engine/kv_footprint.h"

namespace agentkv {

KvFootprint kv_footprint(const Context& ctx) {
  const memory::KvCache* kv = ctx.memory().kv();
  if (!kv) return {};
  const memory::KvResidency res = kv->residency();
  return {res.windowed, res.hot_cells, res.hot_bytes, res.tail_bytes};
}

void prefault_kv(Context& ctx) {
  if (memory::KvCache* kv = ctx.memory().kv()) kv->prefault();
}

}  // namespace agentkv
