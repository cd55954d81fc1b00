# The link graph of the build, as CMake resolves it (what `cmake --graphviz` draws): the
# libraries and imported targets a target reaches through LINK_LIBRARIES and
# INTERFACE_LINK_LIBRARIES, transitively.

# gecd_link_closure(target out_var): every target `target` links, directly or not, sorted.
function(gecd_link_closure target out_var)
  set(seen "")
  set(work ${target})
  while(work)
    list(POP_FRONT work current)
    foreach(property LINK_LIBRARIES INTERFACE_LINK_LIBRARIES)
      get_target_property(deps ${current} ${property})
      if(NOT deps)
        continue()
      endif()
      foreach(dep ${deps})
        # $<LINK_ONLY:x> and friends: the target inside; other generator expressions (a
        # configuration's or a compiler's choice) are not targets of this tree.
        if(dep MATCHES "^\\$<LINK_ONLY:(.+)>$")
          set(dep "${CMAKE_MATCH_1}")
        endif()
        if(dep MATCHES "^\\$<" OR NOT TARGET ${dep})
          continue()
        endif()
        get_target_property(aliased ${dep} ALIASED_TARGET)
        if(aliased)
          set(dep ${aliased})
        endif()
        if(NOT dep IN_LIST seen)
          list(APPEND seen ${dep})
          list(APPEND work ${dep})
        endif()
      endforeach()
    endforeach()
  endwhile()
  list(SORT seen)
  set(${out_var} "${seen}" PARENT_SCOPE)
endfunction()
