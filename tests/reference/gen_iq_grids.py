# Writes src/kernels/iq_grids.h from llama.cpp's ggml-common.h: the i-quant codebooks, which are
# format constants (docs/quant-types.md, "i-quants").
#   python3 tests/reference/gen_iq_grids.py LLAMA_CPP/ggml/src/ggml-common.h src/kernels/iq_grids.h
import re
import sys
src = open(sys.argv[1]).read()
tables = [('uint8_t','kmask_iq2xs','kIQ2KMask',8), ('uint8_t','ksigns_iq2xs','kIQ2KSigns',128),
          ('uint64_t','iq2xxs_grid','kIQ2XXSGrid',256), ('uint64_t','iq2xs_grid','kIQ2XSGrid',512),
          ('uint64_t','iq2s_grid','kIQ2SGrid',1024), ('uint32_t','iq3xxs_grid','kIQ3XXSGrid',256),
          ('uint32_t','iq3s_grid','kIQ3SGrid',512)]
out = []
out.append('''// The codebooks of ggml's i-quant weight types (iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s), as
// ggml-common.h (llama.cpp d32676d7, MIT licence, Copyright (c) 2023-2026 The ggml authors)
// defines them. They are FORMAT CONSTANTS, not code: a block stores indices into these tables, so
// a GGUF file of these types means something only with exactly these values (docs/quant-types.md,
// "i-quants"). Generated from ggml-common.h by tests/reference/gen_iq_grids.py; do not edit by hand.
//
// Grid entries pack 8 (iq2) or 4 (iq3) unsigned magnitudes, element j in byte j (little-endian).
// kIQ2KSigns[i]: 7 sign bits i plus an 8th bit that makes the count of set bits even.
// kIQ2KMask[j]: the bit of element j in a sign byte.
#pragma once
#include <cstdint>

namespace agentkv {
''')
for ctype, gname, name, size in tables:
    m = re.search(r'GGML_TABLE_BEGIN\(%s, %s, (\w+)\)(.*?)GGML_TABLE_END\(\)' % (ctype, gname), src, re.S)
    assert m, gname
    body = m.group(2)
    vals = [v.strip() for v in body.replace('\n', ' ').split(',') if v.strip()]
    assert len(vals) == size, (gname, len(vals))
    per = 8 if ctype == 'uint64_t' else (8 if ctype=='uint32_t' else 16)
    out.append('// ggml-common.h: %s\ninline constexpr %s %s[%d] = {' % (gname, ctype, name, size))
    for i in range(0, size, per):
        out.append('    ' + ', '.join(vals[i:i+per]) + ',')
    out.append('};\n')
out.append('}  // namespace agentkv')
open(sys.argv[2],'w').write('\n'.join(out) + '\n')
