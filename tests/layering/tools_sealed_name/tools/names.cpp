// A command's source that names a GGUF type it got through some other header: refused too.
#include "agentkv/context.h"
int tensors(const agentkv::gguf::Reader& r);
