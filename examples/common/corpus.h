// The text the examples train on: files of UTF-8 read and checked before any work, or by
// default the English fortune files of Debian's `fortunes` package. Shared by minigpt and the
// experiments.
#pragma once

#include <string>
#include <vector>

namespace ag::examples {

// The English fortune files, sorted by name: fortunes-zh's Chinese collections (chinese,
// tang300, song100), the index files and the .u8 links left out. Refused when the package is
// missing.
std::vector<std::string> default_corpus();

// The text of `files`, in order. Each must be a regular, non-empty file of valid UTF-8, and all
// of them must fit in memory; a refusal names the file. A fortune file's separator lines (a
// single '%') become blank lines, and the terminal colour codes of fortunes-zh's poems are
// dropped.
std::string read_corpus(const std::vector<std::string>& files);

}  // namespace ag::examples
