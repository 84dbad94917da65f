# Per-layer views of src/: build/layer_views/<layer>/ holds a link to src/<l>/ for every layer l a
# file of <layer> may include — itself and the layers below it; a sealed user (AGENTKV_SEALED_FOR,
# the server) only itself, the rest through include/agentkv/. A layer compiles with its view as
# its only path into src/, so `#include "server/scheduler.h"` in src/memory/ fails to compile, as
# does `#include "memory/kv_cache.h"` in src/server/. The regex check (cmake/check_layers.cmake)
# stays: it names the file and line before the compiler gets there, and checks tools/ too.

# Sets out_var to the view directory of `layer`, creating it.
function(agentkv_layer_view layer out_var)
  set(view ${CMAKE_BINARY_DIR}/layer_views/${layer})
  file(REMOVE_RECURSE ${view})
  file(MAKE_DIRECTORY ${view})
  string(REPLACE "," ";" sealed_for "${AGENTKV_SEALED_FOR}")
  if(layer IN_LIST sealed_for)
    set(visible ${layer})
  else()
    set(visible "")
    foreach(l ${AGENTKV_LAYERS})
      list(APPEND visible ${l})
      if(l STREQUAL layer)
        break()
      endif()
    endforeach()
  endif()
  foreach(l ${visible})
    file(CREATE_LINK ${CMAKE_SOURCE_DIR}/src/${l} ${view}/${l} SYMBOLIC)
  endforeach()
  set(${out_var} ${view} PARENT_SCOPE)
endfunction()

# ctest: a file of a layer that includes a higher layer's header, or a sealed one, does not compile
# against that layer's view; one including a lower layer's header does.
function(agentkv_layer_view_tests)
  set(probe_dir ${CMAKE_BINARY_DIR}/layer_view_probes)
  file(MAKE_DIRECTORY ${probe_dir})
  set(std -std=c++${CMAKE_CXX_STANDARD})
  macro(probe name layer header will_fail)
    file(WRITE ${probe_dir}/${name}.cpp "#include \"${header}\"\nint main() { return 0; }\n")
    add_test(NAME layer_view_${name}
             COMMAND ${CMAKE_CXX_COMPILER} ${std} -fsyntax-only -I${CMAKE_BINARY_DIR}/layer_views/${layer}
                     -I${CMAKE_SOURCE_DIR}/include ${probe_dir}/${name}.cpp)
    set_tests_properties(layer_view_${name} PROPERTIES WILL_FAIL ${will_fail} LABELS unit)
  endmacro()
  # The same self-contained headers compile where the view holds them and not where it does not.
  probe(memory_refuses_server memory server/utf8.h TRUE)
  probe(core_refuses_kernels core kernels/dispatch.h TRUE)
  probe(kernels_refuses_memory kernels memory/kv_cells.h TRUE)
  probe(server_refuses_memory_internals server memory/kv_cells.h TRUE)
  probe(server_accepts_its_own server server/utf8.h FALSE)
  probe(memory_accepts_kernels memory kernels/dispatch.h FALSE)
  probe(engine_accepts_memory engine memory/kv_cells.h FALSE)
endfunction()
