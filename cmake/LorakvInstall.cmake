# `cmake --install <build> --prefix <dir>` writes:
#   include/lorakv/<layer>/...      every layer's headers (the names lorakv's own code uses)
#   lib/liblorakv_<layer>.a         the layer libraries
#   lib/cmake/lorakv/               lorakvConfig.cmake, its version file, the exported targets
#   bin/lorakv                      the command line
# A consumer: find_package(lorakv REQUIRED) with -DLORAKV_TORCH_DIR=<site-packages/torch>,
# then target_link_libraries(app PRIVATE lorakv::lorakv) (README, "Use lorakv from C++").
#
# Static libraries, because: lorakv's API is 0.x and makes no ABI promise a shared library's
# soname would imply; the one heavy dependency, libtorch, is already shared and loaded once;
# and a consumer's link pulls only the objects it uses. The cost: spdlog and OpenSSL (which
# lorakv_common uses privately) must be findable by the consumer as well, and the config
# finds them. The objects are not position independent, so they link into executables; a
# consumer building a shared library (a Python extension) configures lorakv with
# -DCMAKE_POSITION_INDEPENDENT_CODE=ON.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(LORAKV_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/lorakv)
set(_lorakv_installed_layers ${LORAKV_PRESENT_LAYERS})
# The command line's internals stay inside, and so does the HTTP server (`lorakv serve`: its
# cpp-httplib is a private dependency a consumer's find_package would have to repeat).
list(REMOVE_ITEM _lorakv_installed_layers cli server)

set(_lorakv_install_targets lorakv_torch)
foreach(_layer IN LISTS _lorakv_installed_layers)
  set_target_properties(lorakv_${_layer} PROPERTIES EXPORT_NAME ${_layer})
  list(APPEND _lorakv_install_targets lorakv_${_layer})
  # A layer's parts (lorakv::agents_config...) go with it; their headers are in its folder.
  lorakv_layer_parts(${_layer} _lorakv_parts)
  foreach(_part IN LISTS _lorakv_parts)
    string(REGEX REPLACE "^lorakv_" "" _part_export ${_part})
    set_target_properties(${_part} PROPERTIES EXPORT_NAME ${_part_export})
    list(APPEND _lorakv_install_targets ${_part})
  endforeach()
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${_layer}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/lorakv/${_layer}
          FILES_MATCHING PATTERN "*.h")
endforeach()

# lorakv::lorakv: everything a program that embeds lorakv links (the top installed layer).
add_library(lorakv_package INTERFACE)
set_target_properties(lorakv_package PROPERTIES EXPORT_NAME lorakv)
list(GET _lorakv_installed_layers -1 _lorakv_top_layer)
target_link_libraries(lorakv_package INTERFACE lorakv_${_lorakv_top_layer})
list(APPEND _lorakv_install_targets lorakv_package)

install(TARGETS ${_lorakv_install_targets} EXPORT lorakvTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT lorakvTargets NAMESPACE lorakv:: DESTINATION ${LORAKV_INSTALL_CMAKEDIR})

# The installed `lorakv` finds libtorch, and the libgomp torch ships beside it, in the torch
# folder the build used: its run path names that folder's lib/ first (resolved, so that it
# does not go through the clone's .venv link). torch's targets link by full path, so the link
# path alone (kept after it, for the CUDA runtime) names no torch folder.
get_filename_component(_lorakv_torch_lib "${LORAKV_TORCH_DIR}/lib" REALPATH)
set_target_properties(lorakv PROPERTIES INSTALL_RPATH "${_lorakv_torch_lib}" INSTALL_RPATH_USE_LINK_PATH TRUE)
install(TARGETS lorakv RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# What the config checks on the consumer's side: the torch this lorakv was built against.
file(STRINGS "${LORAKV_TORCH_DIR}/version.py" _lorakv_torch_version_line REGEX "^__version__ *=")
string(REGEX REPLACE "^__version__ *= *['\"]([^'\"]*)['\"].*$" "\\1" LORAKV_BUILT_TORCH_VERSION
       "${_lorakv_torch_version_line}")
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/lorakvConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/package/lorakvConfig.cmake
                              INSTALL_DESTINATION ${LORAKV_INSTALL_CMAKEDIR})
# 0.x: a minor version may break the API, so only the same major.minor is compatible.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/package/lorakvConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/package/lorakvConfig.cmake ${CMAKE_BINARY_DIR}/package/lorakvConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/lorakvImportTorch.cmake
        DESTINATION ${LORAKV_INSTALL_CMAKEDIR})
