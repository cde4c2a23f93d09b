// JSON for safetensors headers and checkpoint metadata: Boost.JSON's values, read strictly.
// Private to io/ and not installed, so that a program using the public headers needs no Boost.
#pragma once

#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <cstdint>
#include <string_view>

namespace ag::json {

using boost::json::array;
using boost::json::object;
using boost::json::serialize;  // compact: no spaces, members in insertion order
using boost::json::value;

// Parses exactly one JSON value (white space around it allowed) and throws
// std::invalid_argument naming the byte offset of the first problem. Only standard JSON: no
// comments or trailing commas, strings in valid UTF-8 with paired surrogate escapes. Also
// rejected: a key repeated within an object, nesting deeper than 64 arrays and objects (so no
// recursion bomb from a hostile file), a number beyond a double's range. Integers keep every
// digit (int64, or uint64 above it); other numbers are the correctly rounded double.
value parse(std::string_view text);

// Typed access; each throws std::invalid_argument naming `what` when the kind differs. What
// they return points into `v`.
bool as_bool(const value& v, std::string_view what);
std::int64_t as_int(const value& v, std::string_view what);  // an integer that fits int64
double as_double(const value& v, std::string_view what);
std::string_view as_string(const value& v, std::string_view what);
const array& as_array(const value& v, std::string_view what);
const object& as_object(const value& v, std::string_view what);

}  // namespace ag::json
