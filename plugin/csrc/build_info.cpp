// A marker with the torch version this library was compiled against.
//
// `import plugin` reads it from the file itself (plugin/_library.py) when the library
// fails to load, so the error can say which torch the file was built for, whichever
// build (setup.py or CMake) produced it.
#include <torch/version.h>

// extern "C" on the declaration itself gives the array external linkage (inside an
// extern "C" { } block a namespace-scope const array keeps internal linkage, and GCC
// ignores, with a warning, the visibility of an internal symbol).
extern "C" __attribute__((used, visibility("default"))) const char gilfree_rpc_build_info[] =
    "gilfree-rpc built against torch " TORCH_VERSION;
