// Everything that exists once the model is loaded: what HttpServer::load builds, what the routes
// use, and what --sleep-idle-seconds drops.
#pragma once
#include <memory>

#include "agentkv/context.h"
#include "agentkv/draft_model.h"
#include "agentkv/model.h"
#include "agentkv/page_tiers.h"
#include "agentkv/redis_page_tier.h"
#include "agentkv/vision.h"
#include "server/chat_formatter.h"
#include "server/scheduler.h"

namespace agentkv::server {

struct Engine {
  // The page tiers outlive the scheduler, which sends pages to them (warm RAM first, then disk, then Redis).
  std::unique_ptr<RedisPageTier> redis_tier;
  std::unique_ptr<PageTiers> tiers;
  std::unique_ptr<Model> model;
  std::unique_ptr<Context> ctx;
  std::unique_ptr<ChatFormatter> chat;
  std::unique_ptr<VisionEncoder> vision;  // --mmproj: images in chat requests
  std::unique_ptr<Model> draft_model;     // -md: speculative decoding's draft model ...
  std::unique_ptr<DraftModel> drafter;    // ... and its memory of each slot's tokens
  std::unique_ptr<Scheduler> scheduler;
};

}  // namespace agentkv::server
