// A public header that drags in an internal one: the layer check must refuse it.
#pragma once
#include "agentkv/memory.h"
#include "memory/kv_cache.h"
