// A command's source that includes the memory's own header: the layer check must refuse it (the
// command reaches the memory through include/agentkv/ and the engine, as the server does).
#include "memory/kv_cache.h"
