// Must be refused: the command sees the engine only through include/agentkv/ (the engine is sealed too).
#include "engine/context_impl.h"
