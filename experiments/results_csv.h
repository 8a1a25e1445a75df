// results.csv: one row per (model, strategy) configuration, appended and flushed as each
// configuration finishes, so an interrupted sweep leaves a valid file of complete rows.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ckpt {

// The columns, in order. Documented in README.md ("results.csv").
const std::vector<std::string>& ResultColumns();

// Quotes a field if it holds a comma, a quote or a line break (RFC 4180).
std::string CsvField(const std::string& value);

// Parses a CSV file (RFC 4180: quoted fields may hold commas, quotes and line breaks), and if
// `lines` is given, the line each row starts on. NotFound if it does not exist;
// FailedPrecondition for a directory; DataLoss naming the line for a NUL byte or a last row cut
// short.
absl::StatusOr<std::vector<std::vector<std::string>>> ReadCsv(const std::string& path,
                                                              std::vector<int>* lines = nullptr);

// OK if the first row of `csv` (read from `path`) is ResultColumns(). Otherwise
// FailedPrecondition naming the file, the columns it lacks and those this version does not
// write (a results.csv from another version of the sweep cannot be resumed), and what to do.
absl::Status CheckResultsHeader(const std::string& path,
                                const std::vector<std::vector<std::string>>& csv);

class CsvAppender {
 public:
  // Creates (or truncates) `path` and writes the header. Errors name the path.
  static absl::StatusOr<CsvAppender> Create(const std::string& path);
  // Opens an existing results file to append to it; CheckResultsHeader's error if its header
  // is not ResultColumns().
  static absl::StatusOr<CsvAppender> Append(const std::string& path);
  CsvAppender(CsvAppender&& other) noexcept;
  CsvAppender& operator=(CsvAppender&&) = delete;
  ~CsvAppender();

  // Writes one complete line (fields joined by commas) to the file, opened O_APPEND, in one
  // write(2) unless the system cuts it short: a kill between rows never leaves half a row, and
  // a write that fails part-way (a full disk) is undone, the file truncated to where the row
  // began. DataLoss naming the file and the system's reason.
  absl::Status Write(const std::vector<std::string>& fields);

 private:
  CsvAppender(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_;
  std::string path_;
};

}  // namespace ckpt
