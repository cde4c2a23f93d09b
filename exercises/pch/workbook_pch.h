// The header every file of the workbook includes, precompiled once per program: the library's
// public header is most of each file's compile time, and a learner's edit recompiles one file.
#include <attograd/attograd.h>
