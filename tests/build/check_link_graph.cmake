# ctest's check of the link graph (tests/CMakeLists.txt, build/*): fails when the closure that
# configuring wrote to CLOSURE_FILE (one target a line, tests/build/link_graph.cmake) holds any
# of FORBIDDEN (a ;-list), naming each.
#   cmake -DCLOSURE_FILE=<file> -DFORBIDDEN=<a;b> -P check_link_graph.cmake
cmake_minimum_required(VERSION 3.25)
if(NOT EXISTS "${CLOSURE_FILE}")
  message(FATAL_ERROR "no link closure at ${CLOSURE_FILE}: re-run cmake on the build")
endif()
file(STRINGS "${CLOSURE_FILE}" closure)
list(POP_FRONT closure target)
set(found "")
foreach(forbidden ${FORBIDDEN})
  if(forbidden IN_LIST closure)
    list(APPEND found ${forbidden})
  endif()
endforeach()
list(LENGTH closure n)
if(found)
  list(JOIN found ", " found)
  message(FATAL_ERROR "${target} links ${found} (all it links: ${CLOSURE_FILE})")
endif()
message(STATUS "${target} links ${n} targets, none of: ${FORBIDDEN}")
