#include "state/data_path.h"

#include <filesystem>
#include <system_error>
#include <vector>

namespace flowstate {
namespace {

namespace fs = std::filesystem;

// The non-empty components of a normalized absolute path ("/a/b/" -> "/",
// "a", "b"); a trailing separator yields an empty last element, dropped here.
std::vector<fs::path> Components(const fs::path& p) {
  std::vector<fs::path> out;
  for (const fs::path& c : p) {
    if (!c.empty()) out.push_back(c);
  }
  return out;
}

}  // namespace

StatusOr<std::string> ResolveDataPath(const std::string& data_root, const std::string& path) {
  if (path.empty()) return InvalidArgument("dataset path is empty");
  if (data_root.empty()) {
    return InvalidArgument("data root is empty (resolving '" + path + "')");
  }
  if (path.find('\0') != std::string::npos || data_root.find('\0') != std::string::npos) {
    return InvalidArgument("dataset path '" + path + "' contains a NUL byte");
  }

  std::error_code ec;
  fs::path root = fs::absolute(fs::path(data_root), ec);
  if (ec) {
    return InvalidArgument("cannot make data root '" + data_root + "' absolute: " + ec.message());
  }
  root = root.lexically_normal();
  const fs::path given(path);
  // operator/ keeps an absolute right-hand side as is.
  const fs::path resolved = (root / given).lexically_normal();

  const std::vector<fs::path> root_parts = Components(root);
  const std::vector<fs::path> parts = Components(resolved);
  bool inside = parts.size() > root_parts.size();
  for (size_t i = 0; inside && i < root_parts.size(); ++i) {
    inside = parts[i] == root_parts[i];
  }
  if (!inside) {
    return PermissionDenied("dataset path '" + path + "' escapes the data root '" + root.string() +
                            "'");
  }

  fs::path out;
  for (const fs::path& c : parts) out /= c;
  if (!fs::exists(out, ec)) {
    return NotFound("dataset file '" + path + "' does not exist (looked for '" + out.string() +
                    "'" + (ec ? ": " + ec.message() : std::string()) + ")");
  }
  return out.string();
}

}  // namespace flowstate
