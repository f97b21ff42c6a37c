// The web console's files (web/index.html, web/console.css and the bundled
// JavaScript: uPlot's prebuilt IIFE followed by web/src/*.js), embedded in
// the binary at build time: web/CMakeLists.txt runs `npm ci` for the pinned
// uPlot, concatenates the bundle and writes their bytes into a generated
// .cc (web/bundle.cmake). Nothing is read from disk or the network at run
// time. A binary configured with -DFLOWSTATE_WEB_CONSOLE=OFF has none.
//
// Ownership and thread safety: immutable static data; FindConsoleAsset may
// be called from any thread, and what it returns lives as long as the
// program.
#ifndef FLOWSTATE_WEB_CONSOLE_ASSETS_H_
#define FLOWSTATE_WEB_CONSOLE_ASSETS_H_

#include <cstddef>
#include <string_view>

namespace flowstate::web {

struct ConsoleAsset {
  std::string_view name;          // "index.html", "console.js", "console.css"
  std::string_view content_type;  // "text/html; charset=utf-8", ...
  std::string_view etag;          // a strong ETag: "\"<16 hex digits of its SHA-256>\""
  std::string_view body;          // the file's bytes
};

// The embedded file called `name` (no directory), or nullptr.
const ConsoleAsset* FindConsoleAsset(std::string_view name);

// Whether this binary was built with the console (FLOWSTATE_WEB_CONSOLE).
bool ConsoleBuiltIn();

}  // namespace flowstate::web

#endif  // FLOWSTATE_WEB_CONSOLE_ASSETS_H_
