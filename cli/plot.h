// Plots of a job's history (api/views.h JobHistory): its training loss and
// each evaluation metric against the step, for `flowstate jobs plot ID
// --out FILE` (the server's GET /v1/jobs/{id}/history) and `flowstate train
// JOB --plot FILE` (the local run's history).
//
// One layout, two outputs by the file's extension:
//   .svg  written directly as SVG 1.1 (text as <text>, so it stays
//         selectable and searchable; each curve one <path>, one point per
//         history entry);
//   .png  drawn with Cairo (image surface, antialiased) and written as PNG.
// The top panel holds the training loss (line) and the eval metrics named
// "...loss..." or with values outside [0, 1] (line with markers); the
// other metrics (accuracy, ...) get a second panel below with a 0-1 axis.
// Each panel has ticks, tick labels, axis labels and a legend; the title
// names the job.
//
// Pure functions of their arguments (but for the file written);
// thread-safe.
#ifndef FLOWSTATE_CLI_PLOT_H_
#define FLOWSTATE_CLI_PLOT_H_

#include <string>

#include "api/views.h"
#include "graph/status.h"

namespace flowstate {

// Writes the plot to `path` (.svg or .png, case-insensitive).
// INVALID_ARGUMENT naming the path for another extension and for a history
// without a single step or evaluation (nothing to draw); the I/O error
// (UNAVAILABLE naming the path) when it cannot be written.
Status WriteHistoryPlot(const JobHistory& history, const std::string& title, const std::string& path);

// OK when `path` names a .svg or .png file (WriteHistoryPlot's extension
// check, for commands that check their flags before they work).
Status CheckPlotPath(const std::string& path);

// The SVG text WriteHistoryPlot writes for .svg (for tests).
std::string HistoryPlotSvg(const JobHistory& history, const std::string& title);

}  // namespace flowstate

#endif  // FLOWSTATE_CLI_PLOT_H_
