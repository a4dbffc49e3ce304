#pragma once
// Every measurement goes to SQLite as it happens, one transaction per batch, in WAL mode: a
// killed tuning process loses at most the batch in flight and leaves a readable database.
// Opening checks the file first and throws std::runtime_error naming it, without writing
// to it, when it is not SQLite, damaged or truncated, another application's database, of
// another schema version, or locked by another process for longer than 5 s.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tuning/database/database_record.h"

struct sqlite3;

namespace nimble::tuning {

class TuningDatabase {
 public:
  explicit TuningDatabase(const std::string& path);
  const std::string& path() const { return path_; }

  void append(const std::vector<DatabaseRecord>& batch);
  // All records of a task on a device, in insertion order (any run).
  std::vector<DatabaseRecord> records(const std::string& signature,
                                      const std::string& device) const;
  // The fastest successful measurement of a task on a device.
  std::optional<DatabaseRecord> best(const std::string& signature, const std::string& device) const;
  long count() const;
  std::vector<std::string> signatures(const std::string& device) const;
  // Every device some record was measured on.
  std::vector<std::string> devices() const;

  // Returns the number of records written / read.
  long export_json_lines(const std::string& file) const;
  long import_json_lines(const std::string& file);

 private:
  struct Closer {
    void operator()(sqlite3* db) const;
  };
  void execute(const char* sql) const;
  int pragma(const char* name) const;
  void check_schema();
  std::vector<DatabaseRecord> query(const std::string& sql,
                                    const std::vector<std::string>& args) const;
  std::string path_;
  std::unique_ptr<sqlite3, Closer> db_;
};

}  // namespace nimble::tuning
