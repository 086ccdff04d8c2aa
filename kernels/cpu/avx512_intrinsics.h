// kernels/cpu/avx512_intrinsics.h: <immintrin.h> for the AVX-512 path files, included only
// inside their `#if defined(__AVX512F__)`. GCC 12's AVX-512 intrinsics start from
// _mm512_undefined_*(), which -Wmaybe-uninitialized (and -Wuninitialized) flag wherever they
// are inlined (GCC bug 105593, fixed in GCC 13), so those two warnings are off in these files.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
