# Run by ctest after the tests (CTEST_CUSTOM_POST_TEST, written by tests/CMakeLists.txt) with
# -DFIXTURES=<the fixtures folder> -DLOG=<the run's LastTest.log>. Without the fixtures, prints one
# line: how many tests skipped for want of them and why (nothing when none did, as under ctest -N).
# Counts the reason the tests give (tests/fixtures.h, tests/server/conftest.py): once per gtest
# test; pytest's -rs summary folds the skips of one place into "SKIPPED [count] place: reason".
if(IS_DIRECTORY "${FIXTURES}")
  return()
endif()
if(EXISTS "${LOG}.tmp")  # ctest writes the log under this name until it exits
  set(LOG "${LOG}.tmp")
endif()
set(reasons "")
if(EXISTS "${LOG}")
  file(STRINGS "${LOG}" reasons REGEX "fixtures not found at ")
endif()
set(skipped 0)
foreach(line IN LISTS reasons)
  if(line MATCHES "^SKIPPED \\[([0-9]+)\\]")
    math(EXPR skipped "${skipped} + ${CMAKE_MATCH_1}")
  elseif(line MATCHES "^fixtures not found at ")
    math(EXPR skipped "${skipped} + 1")
  endif()
endforeach()
if(skipped GREATER 0)
  get_filename_component(where "${FIXTURES}" ABSOLUTE)
  message("fixtures not found at ${where}: ${skipped} fixture tests skipped; the full suite needs them (README)")
endif()
