# Fails when a file under SRC_DIR/<layer>/ includes a header of a higher layer (LAYERS: lowest first,
# ','-separated) or when a directory under SRC_DIR belongs to no layer. Run at every build
# (CMakeLists.txt) so an upward include fails the build, naming the file and the line.
# SEALED (optional, ','-separated) names the layers whose internals the layers in SEALED_FOR, and
# the command's sources in TOOLS_DIR (optional; its .h / .cpp files, not tools/train/'s Python),
# may not see: a file of those includes none of their headers and names no `memory::` or `gguf::`
# type; it reaches them through include/agentkv/ only (docs/architecture.md, "Public headers and sealed layers").
#   cmake -DSRC_DIR=src -DLAYERS=core,gguf,... [-DSEALED=core,...,engine -DSEALED_FOR=server] [-DTOOLS_DIR=tools]
#         [-DPUBLIC_DIR=include/agentkv]
#         -P cmake/check_layers.cmake
if(NOT SRC_DIR OR NOT LAYERS)
  message(FATAL_ERROR "check_layers: SRC_DIR and LAYERS are required")
endif()
string(REPLACE "," ";" LAYERS "${LAYERS}")
string(REPLACE "," ";" SEALED "${SEALED}")
string(REPLACE "," ";" SEALED_FOR "${SEALED_FOR}")
set(errors "")

# A file of a sealed user (`user`: "server", "tools"), shown as `shown`: no sealed names, no
# sealed headers. Appends to `errors`.
function(check_sealed_user f shown user)
  file(STRINGS ${f} peeks REGEX "(^|[^A-Za-z0-9_])(memory|gguf)::")
  foreach(line ${peeks})
    string(APPEND errors "\n  ${shown}: names a memory:: or gguf:: type (${user} sees the engine through include/agentkv/ only): ${line}")
  endforeach()
  file(STRINGS ${f} lines REGEX "^[ \t]*#[ \t]*include[ \t]+\"[a-z_]+/")
  foreach(line ${lines})
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]+\"([a-z_]+)/.*" "\\1" target "${line}")
    list(FIND SEALED ${target} sealed)
    if(sealed GREATER -1)
      string(APPEND errors "\n  ${shown}: ${line} (${target} is sealed from ${user}: use include/agentkv/)")
    endif()
  endforeach()
  set(errors "${errors}" PARENT_SCOPE)
endfunction()

file(GLOB dirs LIST_DIRECTORIES true RELATIVE ${SRC_DIR} ${SRC_DIR}/*)
foreach(dir ${dirs})
  if(NOT IS_DIRECTORY ${SRC_DIR}/${dir})
    continue()
  endif()
  list(FIND LAYERS ${dir} own)
  if(own LESS 0)
    string(APPEND errors "\n  src/${dir}/ belongs to no layer: add it to AGENTKV_LAYERS in CMakeLists.txt")
    continue()
  endif()
  file(GLOB_RECURSE files ${SRC_DIR}/${dir}/*.h ${SRC_DIR}/${dir}/*.cpp)
  list(FIND SEALED_FOR ${dir} sealed_user)
  foreach(f ${files})
    file(RELATIVE_PATH rel ${SRC_DIR} ${f})
    if(sealed_user GREATER -1)
      check_sealed_user(${f} "src/${rel}" ${dir})
    endif()
    file(STRINGS ${f} lines REGEX "^[ \t]*#[ \t]*include[ \t]+\"[a-z_]+/")
    foreach(line ${lines})
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]+\"([a-z_]+)/.*" "\\1" target "${line}")
      list(FIND LAYERS ${target} other)
      if(other GREATER own)
        string(APPEND errors "\n  src/${rel}: ${line} (${dir} is below ${target})")
      endif()
    endforeach()
  endforeach()
endforeach()

if(TOOLS_DIR)
  file(GLOB_RECURSE files ${TOOLS_DIR}/*.h ${TOOLS_DIR}/*.cpp)
  foreach(f ${files})
    file(RELATIVE_PATH rel ${TOOLS_DIR} ${f})
    check_sealed_user(${f} "tools/${rel}" tools)
  endforeach()
endif()

# Public headers (PUBLIC_DIR, optional: include/agentkv) include only standard headers and each
# other, so what they declare never drags an internal header into a user's build.
if(PUBLIC_DIR)
  file(GLOB_RECURSE files ${PUBLIC_DIR}/*.h)
  foreach(f ${files})
    file(RELATIVE_PATH rel ${PUBLIC_DIR} ${f})
    file(STRINGS ${f} lines REGEX "^[ \t]*#[ \t]*include[ \t]+\"")
    foreach(line ${lines})
      if(NOT line MATCHES "^[ \t]*#[ \t]*include[ \t]+\"agentkv/")
        string(APPEND errors "\n  include/agentkv/${rel}: ${line} (a public header includes only public and standard headers)")
      endif()
    endforeach()
  endforeach()
endif()

if(errors)
  set(users ${SEALED_FOR})
  if(TOOLS_DIR)
    list(APPEND users tools)
  endif()
  message(FATAL_ERROR "layering broken (data flows ${LAYERS}; sealed from ${users}: ${SEALED}):${errors}")
endif()
