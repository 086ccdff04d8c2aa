# The layer table, enforced by the build. Each layer is one library, lorakv_<layer>, whose
# headers are reachable only through an include root of its own (build/layer_roots/<layer>,
# holding a single link <layer> -> the source folder). A target sees the roots of itself and
# of what it links, so including a header of a layer it does not link fails to compile, and
# lorakv_check_layer_links() refuses at configure time a link that points up the table.
#
# Allowed dependencies (downward only):
#   agents -> runtime -> adapters -> cache -> kernels -> formats -> common
set(LORAKV_LAYERS common formats kernels cache adapters runtime agents)
set(LORAKV_LAYER_ALLOWED_common "")
set(LORAKV_LAYER_ALLOWED_formats common)
set(LORAKV_LAYER_ALLOWED_kernels common)
set(LORAKV_LAYER_ALLOWED_cache kernels common)
set(LORAKV_LAYER_ALLOWED_adapters kernels formats common)
set(LORAKV_LAYER_ALLOWED_runtime adapters cache kernels formats common)
set(LORAKV_LAYER_ALLOWED_agents runtime adapters cache kernels formats common)

# Gives <target> the include root that exposes only source folder <folder> as "<folder>/...".
function(lorakv_expose_folder target folder)
  set(_root ${CMAKE_BINARY_DIR}/layer_roots/${folder})
  if(NOT EXISTS ${_root}/${folder})
    file(MAKE_DIRECTORY ${_root})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${folder} ${_root}/${folder} SYMBOLIC)
  endif()
  target_include_directories(${target} PUBLIC ${_root})
endfunction()

# Checks every lorakv_<layer> library's direct links against the table.
function(lorakv_check_layer_links)
  foreach(_layer IN LISTS LORAKV_LAYERS)
    get_target_property(_links lorakv_${_layer} LINK_LIBRARIES)
    get_target_property(_iface lorakv_${_layer} INTERFACE_LINK_LIBRARIES)
    foreach(_lib IN LISTS _links _iface)
      string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" _lib "${_lib}")
      if(_lib MATCHES "^lorakv_(.+)$" AND NOT _lib STREQUAL "lorakv_torch")
        set(_dep ${CMAKE_MATCH_1})
        if(NOT _dep IN_LIST LORAKV_LAYER_ALLOWED_${_layer})
          message(FATAL_ERROR "layer table: lorakv_${_layer} links ${_lib}, but ${_layer} may use only "
                              "[${LORAKV_LAYER_ALLOWED_${_layer}}] (see cmake/LorakvLayers.cmake)")
        endif()
      endif()
    endforeach()
  endforeach()
endfunction()
