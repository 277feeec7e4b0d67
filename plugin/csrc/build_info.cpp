// A marker with the torch version this library was compiled against.
//
// `import plugin` reads it from the file itself (plugin/_library.py) when the library
// fails to load, so the error can say which torch the file was built for, whichever
// build (setup.py or CMake) produced it.
#include <torch/version.h>

extern "C" {
__attribute__((used, visibility("default"))) const char gilfree_rpc_build_info[] =
    "gilfree-rpc built against torch " TORCH_VERSION;
}
