// The model layer may include memory headers.
#include "memory/kv_cache.h"
