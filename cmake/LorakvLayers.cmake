# The layer table, enforced by the build. Each layer is one library, lorakv_<layer>, built from
# the source folder <layer>/ and included as "lorakv/<layer>/...". Its headers are reachable
# only through an include root of its own (build/layer_roots/<layer>, holding a single link
# lorakv/<layer> -> the source folder), the same tree `cmake --install` writes under
# include/lorakv/. A target sees the roots of itself and of what it links, so including a
# header of a layer it does not link fails to compile, and lorakv_check_layer_links() refuses
# at configure time a link that points up the table.
#
# Allowed dependencies (downward only):
#   cli -> server -> agents -> runtime -> adapters -> cache -> kernels -> formats -> common
# A layer whose folder has no CMakeLists.txt keeps its place in the table and builds nothing
# (lorakv_present_layers); every layer in the table has one today.
# A layer may build more libraries than lorakv_<layer>: parts (lorakv_layer_part), each from
# one subfolder, e.g. lorakv_agents_config from agents/config/ (torch-free, so programs and
# tests that need only the session configs do not link libtorch).
set(LORAKV_LAYERS common formats kernels cache adapters runtime agents server cli)
set(LORAKV_LAYER_ALLOWED_common "")
set(LORAKV_LAYER_ALLOWED_formats common)
set(LORAKV_LAYER_ALLOWED_kernels common)
set(LORAKV_LAYER_ALLOWED_cache kernels common)
set(LORAKV_LAYER_ALLOWED_adapters kernels formats common)
set(LORAKV_LAYER_ALLOWED_runtime adapters cache kernels formats common)
set(LORAKV_LAYER_ALLOWED_agents runtime adapters cache kernels formats common)
set(LORAKV_LAYER_ALLOWED_server agents runtime adapters cache kernels formats common)
set(LORAKV_LAYER_ALLOWED_cli server agents runtime adapters cache kernels formats common)

# Gives <target> the include root that exposes only source folder <folder> as
# "lorakv/<folder>/..." (as "<folder>/..." with NO_PREFIX: tests/, which is never installed).
function(lorakv_expose_folder target folder)
  cmake_parse_arguments(ARG "NO_PREFIX" "" "" ${ARGN})
  string(REPLACE "/" "+" _root_name "${folder}")  # agents/config: a root beside agents', not in it
  set(_root ${CMAKE_BINARY_DIR}/layer_roots/${_root_name})
  set(_link ${_root}/lorakv/${folder})
  if(ARG_NO_PREFIX)
    set(_link ${_root}/${folder})
  endif()
  if(NOT EXISTS ${_link})
    get_filename_component(_parent ${_link} DIRECTORY)
    file(MAKE_DIRECTORY ${_parent})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${folder} ${_link} SYMBOLIC)
  endif()
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${_root}>)
endfunction()

# Declares <target> (named lorakv_<layer>_<part>) a part of <layer>, built from the subfolder
# <layer>/<part>/ and included as "lorakv/<layer>/<part>/...": its include root exposes only
# that subfolder, it installs and exports with its layer, and the link check counts it as
# its layer (it may link what the layer may; the layer's library may link it).
function(lorakv_layer_part target layer part)
  if(NOT target STREQUAL "lorakv_${layer}_${part}")
    message(FATAL_ERROR "lorakv_layer_part: the part ${part} of ${layer} must be named lorakv_${layer}_${part}")
  endif()
  set_property(GLOBAL APPEND PROPERTY LORAKV_LAYER_PARTS_${layer} ${target})
  lorakv_expose_folder(${target} ${layer}/${part})
endfunction()

# The parts of <layer> declared so far.
function(lorakv_layer_parts layer out_var)
  get_property(_parts GLOBAL PROPERTY LORAKV_LAYER_PARTS_${layer})
  set(${out_var} "${_parts}" PARENT_SCOPE)
endfunction()

# The layers that exist in this tree (their folder has a CMakeLists.txt), in table order.
function(lorakv_present_layers out_var)
  set(_present "")
  foreach(_layer IN LISTS LORAKV_LAYERS)
    if(EXISTS ${PROJECT_SOURCE_DIR}/${_layer}/CMakeLists.txt)
      list(APPEND _present ${_layer})
    endif()
  endforeach()
  set(${out_var} ${_present} PARENT_SCOPE)
endfunction()

# Checks every lorakv_<layer> library's direct links, and its parts', against the table.
function(lorakv_check_layer_links)
  lorakv_present_layers(_present)
  foreach(_layer IN LISTS _present)
    lorakv_layer_parts(${_layer} _parts)
    foreach(_target lorakv_${_layer} ${_parts})
      get_target_property(_links ${_target} LINK_LIBRARIES)
      get_target_property(_iface ${_target} INTERFACE_LINK_LIBRARIES)
      foreach(_lib IN LISTS _links _iface)
        string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" _lib "${_lib}")
        if(_lib MATCHES "^lorakv_(.+)$" AND NOT _lib STREQUAL "lorakv_torch")
          set(_dep ${CMAKE_MATCH_1})
          foreach(_other IN LISTS LORAKV_LAYERS)  # a part counts as its layer
            lorakv_layer_parts(${_other} _other_parts)
            if(_lib IN_LIST _other_parts)
              set(_dep ${_other})
            endif()
          endforeach()
          if(NOT _dep STREQUAL _layer AND NOT _dep IN_LIST LORAKV_LAYER_ALLOWED_${_layer})
            message(FATAL_ERROR "layer table: ${_target} links ${_lib}, but ${_layer} may use only "
                                "[${LORAKV_LAYER_ALLOWED_${_layer}}] (see cmake/LorakvLayers.cmake)")
          endif()
        endif()
      endforeach()
    endforeach()
  endforeach()
endfunction()
