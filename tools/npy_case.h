// One case of a parity check (tools/*_parity.py): the .npy files the script wrote for it in
// in_dir, and the directory the attograd side writes its results to.
#pragma once

#include <attograd/attograd.h>

#include <filesystem>
#include <string>

namespace tools {

struct Case {
  std::string in_dir, out_dir;

  bool has(const std::string& name) const { return std::filesystem::exists(path(in_dir, name)); }
  ag::Tensor read(const std::string& name) const { return ag::io::load_npy(path(in_dir, name)); }
  void write(const std::string& name, const ag::Tensor& t) const { ag::io::save_npy(path(out_dir, name), t); }

  static std::string path(const std::string& dir, const std::string& name) { return dir + "/" + name + ".npy"; }
};

}  // namespace tools
