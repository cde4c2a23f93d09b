// Precompiled for each of the example targets with several sources (examples/meson.build): the
// headers nearly all of their files include, parsed once per target instead of once per file.
#include <attograd/attograd.h>
#include <boost/program_options.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <iostream>
#include <string>
#include <vector>
