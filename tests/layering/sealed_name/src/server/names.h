// A server header that names a memory type it got through some other header: refused too.
#include "agentkv/context.h"
inline int cells(const agentkv::memory::KvCache* kv);
