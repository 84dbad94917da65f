// A server header that includes the memory's own header: the layer check must refuse it (the
// server reaches the memory through include/agentkv/ and the engine).
#include "memory/kv_cache.h"
