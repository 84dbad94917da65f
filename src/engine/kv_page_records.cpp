#include "agentkv/kv_page_records.h"

#include "agentkv/error.h"
#include "engine/context_impl.h"
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
  std::vector<uint32_t> cell_of(static_cast<size_t>(n_pos));
  const memory::KvCells& cells = kv_of(ctx).cells(0);
  for (uint32_t i = 0; i < cells.size(); ++i)
    if (!cells.is_empty(i) && cells.pos(i) < n_pos) cell_of[static_cast<size_t>(cells.pos(i))] = i;
  return cell_of;
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
