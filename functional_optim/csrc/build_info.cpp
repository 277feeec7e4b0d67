// A marker with the torch version this library was compiled against, which
// functional_optim/_kernels.py reads from the file itself when the library fails to load
// (as plugin/csrc/build_info.cpp does for the plugin's library).
#include <torch/version.h>

// extern "C" on the declaration itself gives the array external linkage (inside an
// extern "C" { } block a namespace-scope const array keeps internal linkage, and GCC
// ignores, with a warning, the visibility of an internal symbol).
extern "C" __attribute__((used, visibility("default"))) const char gilfree_optim_build_info[] =
    "gilfree-optim built against torch " TORCH_VERSION;
