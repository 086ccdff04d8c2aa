// common/version.cpp: LORAKV_VERSION_STRING comes from project(VERSION) in the top-level
// CMakeLists.txt (common/CMakeLists.txt passes it to this one file).
#include "lorakv/common/version.h"

namespace lorakv {

const char* version() { return LORAKV_VERSION_STRING; }

}  // namespace lorakv
