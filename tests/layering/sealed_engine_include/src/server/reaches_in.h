// Must be refused: the server sees the engine only through include/agentkv/ (the engine is sealed too).
#pragma once
#include "engine/context_impl.h"
