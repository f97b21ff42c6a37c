// Data paths: where the dataset files of a training job may come from.
//
// A job names its files relative to a data root (the server's configured
// directory; kDefaultDataRoot when none is configured). ResolveDataPath()
// joins a path to that root and refuses, with PERMISSION_DENIED, any path
// that escapes it ("../x", or an absolute path elsewhere). The check is
// lexical (std::filesystem::path::lexically_normal): ".." is folded without
// looking at the disk and symbolic links are not followed, so a link placed
// inside the root by its administrator may point anywhere, while a job can
// never name a file outside the root by spelling alone.
//
// Pure functions of their arguments and the file system; thread-safe.
#ifndef FLOWSTATE_STATE_DATA_PATH_H_
#define FLOWSTATE_STATE_DATA_PATH_H_

#include <string>

#include "graph/status.h"

namespace flowstate {

// Where Debian's dataset packages install their files (dataset-fashion-mnist
// puts its four .gz files under fashion-mnist/ here).
inline constexpr const char* kDefaultDataRoot = "/usr/share/datasets";

// Returns the absolute, lexically normalized path of `path` under
// `data_root`. A relative `path` is taken relative to the root; an absolute
// one must name a location inside it. `data_root` itself may be relative (to
// the working directory). Errors, each naming `path` as given:
//   INVALID_ARGUMENT   `path` or `data_root` is empty or contains a NUL byte;
//   PERMISSION_DENIED  the normalized path is the root itself or lies outside
//                      it;
//   NOT_FOUND          nothing exists at the resolved path.
StatusOr<std::string> ResolveDataPath(const std::string& data_root, const std::string& path);

}  // namespace flowstate

#endif  // FLOWSTATE_STATE_DATA_PATH_H_
