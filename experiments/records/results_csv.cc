#include "experiments/records/results_csv.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "core/base/files.h"
#include "core/base/printable.h"
#include "core/base/status_macros.h"

namespace ckpt {

std::string CsvField(const std::string& value) {
  const std::string clean = Printable(value, LineBreaks::kBlank);
  if (clean.find_first_of(",\"") == std::string::npos) return clean;
  return absl::StrCat("\"", absl::StrReplaceAll(clean, {{"\"", "\"\""}}), "\"");
}

std::string CsvLine(const std::vector<std::string>& fields) {
  std::string line = absl::StrJoin(
      fields, ",", [](std::string* out, const std::string& f) { out->append(CsvField(f)); });
  line.push_back('\n');
  return line;
}

absl::StatusOr<CsvAppender> CsvAppender::Create(const std::string& path,
                                                const std::vector<std::string>& header) {
  // The header whole or no file at all: a file cut short at its header would be refused by
  // a later --resume.
  RETURN_IF_ERROR(WriteFileAtomically(path, CsvLine(header)));
  return Append(path);
}

absl::StatusOr<CsvAppender> CsvAppender::Append(const std::string& path) {
  if (DescribeWhatIsAt(path) == "a symbolic link") {
    // Replaced by a file of this run's holding what it points to (a regular file, or refused),
    // so that the rows go here and the far end stays as it was.
    ASSIGN_OR_RETURN(const std::string text, ReadRegularFile(path, kMaxCsvBytes));
    RETURN_IF_ERROR(WriteFileAtomically(path, text));
  }
  ASSIGN_OR_RETURN(const int fd, OpenToAppend(path));
  return CsvAppender(fd, path);
}

absl::StatusOr<std::vector<std::vector<std::string>>> ReadCsv(const std::string& path,
                                                              std::vector<int>* lines) {
  ASSIGN_OR_RETURN(const std::string text, ReadRegularFile(path, kMaxCsvBytes));
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> row;
  std::string field;
  bool quoted = false;
  int line = 1, row_line = 1;
  size_t checked_to = 0;  // the bytes before it are printable characters
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const bool ends_line =
        !quoted && (c == '\n' || (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n'));
    if (!ends_line && i >= checked_to) {
      // Nothing the sweep writes holds one (CsvField), and a line break or an escape in a name
      // would end a line of gnuplot's scripts or rewrite the terminal.
      const int length = PrintableCharacterLength(text, i);
      if (length == 0) {
        return absl::DataLossError(absl::StrFormat(
            "%s line %d holds %s in field %d; the file is damaged: mend or remove that line, or "
            "pass another --out",
            path, line, DescribeUnprintable(text, static_cast<int>(i)), row.size() + 1));
      }
      checked_to = i + length;
    }
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field.push_back('"');
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field.push_back(c);
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      row.push_back(std::move(field));
      field.clear();
    } else if (c == '\n') {
      row.push_back(std::move(field));
      field.clear();
      rows.push_back(std::move(row));
      row.clear();
      if (lines != nullptr) lines->push_back(row_line);
      row_line = ++line;
    } else if (c != '\r') {
      field.push_back(c);
    }
  }
  if (!field.empty() || !row.empty() || quoted) {  // a last line without its newline: cut short
    return absl::DataLossError(
        absl::StrCat(path, " line ", row_line, " ends in the middle of a row"));
  }
  return rows;
}

CsvAppender::CsvAppender(CsvAppender&& other) noexcept
    : fd_(other.fd_), path_(std::move(other.path_)) {
  other.fd_ = -1;
}

CsvAppender::~CsvAppender() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status CsvAppender::Write(const std::vector<std::string>& fields) {
  const std::string line = CsvLine(fields);
  // Where the row starts, so that a write cut short (a full disk, a file size limit) can be
  // undone: the file keeps complete rows only, and --resume reads it.
  const off_t start = ::lseek(fd_, 0, SEEK_END);
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = n < 0 ? errno : ENOSPC;
      const bool undone = start >= 0 && ::ftruncate(fd_, start) == 0;
      return absl::DataLossError(absl::StrCat(
          "writing a row to ", path_, ": ", std::strerror(error), "; ",
          undone ? "the partial row was removed, the rows before it are intact"
                 : "the partial row could not be removed: delete the file's last line"));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace ckpt
