#include "agentkv/kv_page_records.h"

#include "agentkv/error.h"
#include "engine/context_impl.h"
#include "memory/cell_positions.h"
#include "memory/page_record.h"

namespace agentkv {
namespace {

template <typename Ctx>
auto& kv_of(Ctx& ctx) {
  auto* kv = sequence_memory(ctx).kv();
  if (!kv) throw Error("the model has no KV cache");
  return *kv;
}

}  // namespace

std::vector<uint32_t> kv_cells_of_positions(const Context& ctx, int64_t n_pos) {
  return memory::cells_holding_positions(kv_of(ctx), static_cast<memory::Pos>(n_pos));
}

std::vector<uint8_t> encode_kv_page(const Context& ctx, uint64_t hash, uint32_t first_pos,
                                    std::span<const int32_t> tokens, std::span<const uint32_t> cells) {
  return memory::encode_page(kv_of(ctx), hash, first_pos, tokens, cells);
}

bool write_kv_page(Context& ctx, std::span<const uint8_t> record, std::span<const uint32_t> cells) {
  memory::KvCache& kv = kv_of(ctx);
  const auto page = memory::decode_page(kv, record);
  if (!page) return false;
  memory::write_page_rows(kv, *page, cells);
  return true;
}

}  // namespace agentkv
