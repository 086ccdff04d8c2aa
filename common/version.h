// common/version.h: the version of the lorakv libraries a program is linked with, for
// programs that embed lorakv (the installed package's version file says the same).
#pragma once

namespace lorakv {

// "0.1.0": the project version of the build that produced these libraries.
const char* version();

}  // namespace lorakv
