// A STREAM-style read-bandwidth probe (software prefetch 4 KiB ahead, like the decode kernels), so
// benchmarks can state decode speed as a fraction of the
// memory-bandwidth roofline of the machine they ran on.
#pragma once
#include <cstddef>

#include "agentkv/context.h"

namespace agentkv {
// Reads a buffer of `megabytes` MiB repeatedly with all of ctx's threads; returns the best GB/s.
double measure_read_bandwidth_gbs(Context& ctx, size_t megabytes = 1024, int repeats = 5);
}
