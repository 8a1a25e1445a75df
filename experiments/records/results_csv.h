// CSV files as the sweep writes and reads them: rows appended whole, one write(2) each, so an
// interrupted sweep leaves a file of complete rows (results.csv: experiments/records/results.h);
// files read back only when they are regular, bounded and free of control characters.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ckpt {

// The largest CSV file read back (a results.csv of the paper preset is a few KiB).
inline constexpr int64_t kMaxCsvBytes = int64_t{64} << 20;

// A field as written: line breaks and tabs (a LibTorch message's) as spaces, every other control
// character or byte that is not UTF-8 escaped (core/base/printable.h), then quoted if it holds a
// comma or a quote (RFC 4180).
std::string CsvField(const std::string& value);
// The fields as one line, with its newline.
std::string CsvLine(const std::vector<std::string>& fields);

// Parses a CSV file (RFC 4180: quoted fields may hold commas and quotes), and if `lines` is
// given, the line each row starts on. ReadRegularFile's errors (a missing file, a directory, a
// FIFO, a device, a file past kMaxCsvBytes); DataLoss naming the line for a control character
// in a field (a NUL byte, a line break inside quotes, an escape, a C1 control), a byte that is
// not UTF-8, or a last row cut short.
absl::StatusOr<std::vector<std::vector<std::string>>> ReadCsv(const std::string& path,
                                                              std::vector<int>* lines = nullptr);

class CsvAppender {
 public:
  // Creates (or replaces) `path` holding `header` alone, atomically (core/base/files.h): the header
  // whole, or no file. Errors name the path and the reason.
  static absl::StatusOr<CsvAppender> Create(const std::string& path,
                                            const std::vector<std::string>& header);
  // Opens an existing file to append rows to it (its header is the caller's to check), never
  // through a link: a link there is first replaced by a file of this run's holding what it
  // points to (a regular file of at most kMaxCsvBytes, or the error), which then takes the rows.
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
