# Precompiled ATen for every lorakv target that links libtorch. <ATen/ATen.h> is most of what a
# lorakv translation unit compiles (about 10 of its 13-18 s on two cores), so it is compiled
# once, in lorakv_aten_pch, and every C++ target that links lorakv_torch (directly or through
# a layer) reuses that one header (REUSE_FROM): the build's flags are the same everywhere
# but for definitions ATen does not read (GTEST_HAS_PTHREAD, paths), which GCC allows. A
# target whose flags did not match would fail loudly: CMake adds -Winvalid-pch, an error
# under -Werror. Files compiled for a vector extension (kernels/cpu/*_avx2.cpp, ...) are
# torch-free and skip it (SKIP_PRECOMPILE_HEADERS in kernels/CMakeLists.txt). Off with
# -DLORAKV_PCH=OFF (the tsan and fuzz builds, clang-tidy).
option(LORAKV_PCH "Precompile ATen once for every target that links libtorch" ON)

# The header set: ATen and the standard headers nearly every file includes.
function(lorakv_define_aten_pch)
  if(NOT LORAKV_PCH)
    return()
  endif()
  add_library(lorakv_aten_pch STATIC ${PROJECT_SOURCE_DIR}/cmake/pch_anchor.cpp)
  lorakv_target_defaults(lorakv_aten_pch)
  target_link_libraries(lorakv_aten_pch PRIVATE lorakv_torch)
  target_precompile_headers(lorakv_aten_pch PRIVATE <ATen/ATen.h> <cstdint> <map> <memory> <optional> <string> <vector>)
endfunction()

# Whether `target` links lorakv_torch, directly or through the libraries it links.
function(_lorakv_links_torch target out_var)
  set(_seen "")
  set(_queue ${target})
  set(_found FALSE)
  while(_queue)
    list(POP_FRONT _queue _t)
    if(_t IN_LIST _seen OR NOT TARGET ${_t})
      continue()
    endif()
    list(APPEND _seen ${_t})
    if(_t STREQUAL "lorakv_torch")
      set(_found TRUE)
      break()
    endif()
    get_target_property(_type ${_t} TYPE)
    set(_links "")
    if(NOT _type STREQUAL "INTERFACE_LIBRARY")
      get_target_property(_direct ${_t} LINK_LIBRARIES)
      if(_direct)
        list(APPEND _links ${_direct})
      endif()
    endif()
    get_target_property(_iface ${_t} INTERFACE_LINK_LIBRARIES)
    if(_iface)
      list(APPEND _links ${_iface})
    endif()
    foreach(_l IN LISTS _links)
      string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" _l "${_l}")
      if(TARGET ${_l})
        list(APPEND _queue ${_l})
      endif()
    endforeach()
  endwhile()
  set(${out_var} ${_found} PARENT_SCOPE)
endfunction()

# Every C++ target below `dir` that links libtorch reuses the ATen header.
function(lorakv_reuse_aten_pch dir)
  if(NOT LORAKV_PCH)
    return()
  endif()
  get_property(_targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  foreach(_t IN LISTS _targets)
    get_target_property(_type ${_t} TYPE)
    if(NOT _type MATCHES "^(EXECUTABLE|STATIC_LIBRARY|SHARED_LIBRARY|MODULE_LIBRARY|OBJECT_LIBRARY)$"
       OR _t STREQUAL "lorakv_aten_pch")
      continue()
    endif()
    _lorakv_links_torch(${_t} _torch)
    if(_torch)
      target_precompile_headers(${_t} REUSE_FROM lorakv_aten_pch)
    endif()
  endforeach()
  get_property(_subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(_d IN LISTS _subdirs)
    lorakv_reuse_aten_pch(${_d})
  endforeach()
endfunction()
