#include "tuning/database/tuning_database.h"

#include <sqlite3.h>

#include <fstream>
#include <stdexcept>

#include "tuning/database/json_lines.h"

namespace nimble::tuning {
namespace {

struct StatementDeleter {
  void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
};
using Statement = std::unique_ptr<sqlite3_stmt, StatementDeleter>;

Statement prepare(sqlite3* db, const std::string& sql) {
  sqlite3_stmt* raw = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &raw, nullptr) != SQLITE_OK)
    throw std::runtime_error(std::string("tuning database: ") + sqlite3_errmsg(db));
  return Statement(raw);
}

std::string seconds_to_json(const std::vector<double>& seconds) {
  DatabaseRecord r;
  r.result.seconds = seconds;
  const std::string line = to_json_line(r);
  const size_t begin = line.find("\"seconds\":") + 10;
  return line.substr(begin, line.find(']', begin) - begin + 1);
}

std::vector<double> seconds_from_json(const std::string& text) {
  return from_json_line(
             "{\"run\":\"\",\"signature\":\"\",\"device\":\"\",\"config\":[],"
             "\"seconds\":" +
             text + ",\"error\":\"none\",\"message\":\"\"}")
      .result.seconds;
}

std::string column_text(sqlite3_stmt* s, int i) {
  const auto* text = sqlite3_column_text(s, i);
  return text ? reinterpret_cast<const char*>(text) : "";
}

}  // namespace

void TuningDatabase::Closer::operator()(sqlite3* db) const { sqlite3_close(db); }

TuningDatabase::TuningDatabase(const std::string& path) : path_(path) {
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open(path.c_str(), &raw);
  db_.reset(raw);
  if (rc != SQLITE_OK)
    throw std::runtime_error("cannot open tuning database " + path + ": " + sqlite3_errmsg(raw));
  sqlite3_busy_timeout(db_.get(), 5000);
  // WAL: a crash mid-transaction leaves the last committed batch intact and readers unblocked.
  execute("PRAGMA journal_mode=WAL");
  execute("PRAGMA synchronous=NORMAL");
  execute(
      "CREATE TABLE IF NOT EXISTS measurements ("
      " id INTEGER PRIMARY KEY, run TEXT NOT NULL, signature TEXT NOT NULL, device TEXT NOT NULL,"
      " config TEXT NOT NULL, seconds TEXT NOT NULL, mean_seconds REAL, error TEXT NOT NULL,"
      " message TEXT NOT NULL, cost_seconds REAL NOT NULL, cut_short INTEGER NOT NULL,"
      " recorded_at REAL NOT NULL)");
  execute("CREATE INDEX IF NOT EXISTS measurements_by_task ON measurements(signature, device)");
}

void TuningDatabase::execute(const char* sql) const {
  char* error = nullptr;
  if (sqlite3_exec(db_.get(), sql, nullptr, nullptr, &error) != SQLITE_OK) {
    const std::string message = error ? error : "unknown error";
    sqlite3_free(error);
    throw std::runtime_error("tuning database: " + message);
  }
}

void TuningDatabase::append(const std::vector<DatabaseRecord>& batch) {
  if (batch.empty()) return;
  execute("BEGIN IMMEDIATE");
  try {
    Statement s = prepare(db_.get(),
                          "INSERT INTO measurements (run, signature, device, config, seconds,"
                          " mean_seconds, error, message, cost_seconds, cut_short, recorded_at)"
                          " VALUES (?,?,?,?,?,?,?,?,?,?,?)");
    for (const auto& r : batch) {
      const std::string config = config_to_json(r.config);
      const std::string seconds = seconds_to_json(r.result.seconds);
      sqlite3_bind_text(s.get(), 1, r.run.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_text(s.get(), 2, r.signature.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_text(s.get(), 3, r.device.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_text(s.get(), 4, config.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_text(s.get(), 5, seconds.c_str(), -1, SQLITE_TRANSIENT);
      if (r.result.ok())
        sqlite3_bind_double(s.get(), 6, r.result.mean_seconds());
      else
        sqlite3_bind_null(s.get(), 6);
      sqlite3_bind_text(s.get(), 7, to_string(r.result.error), -1, SQLITE_STATIC);
      sqlite3_bind_text(s.get(), 8, r.result.message.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_double(s.get(), 9, r.result.cost_seconds);
      sqlite3_bind_int(s.get(), 10, r.result.cut_short ? 1 : 0);
      sqlite3_bind_double(s.get(), 11, r.recorded_at);
      if (sqlite3_step(s.get()) != SQLITE_DONE)
        throw std::runtime_error(std::string("tuning database: ") + sqlite3_errmsg(db_.get()));
      sqlite3_reset(s.get());
    }
    execute("COMMIT");
  } catch (...) {
    sqlite3_exec(db_.get(), "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

std::vector<DatabaseRecord> TuningDatabase::query(const std::string& sql,
                                                  const std::vector<std::string>& args) const {
  Statement s = prepare(db_.get(),
                        "SELECT run, signature, device, config, seconds, error, message,"
                        " cost_seconds, cut_short, recorded_at FROM measurements " +
                            sql);
  for (size_t i = 0; i < args.size(); ++i)
    sqlite3_bind_text(s.get(), static_cast<int>(i + 1), args[i].c_str(), -1, SQLITE_TRANSIENT);
  std::vector<DatabaseRecord> out;
  int rc;
  while ((rc = sqlite3_step(s.get())) == SQLITE_ROW) {
    DatabaseRecord r;
    r.run = column_text(s.get(), 0);
    r.signature = column_text(s.get(), 1);
    r.device = column_text(s.get(), 2);
    r.config = config_from_json(column_text(s.get(), 3));
    r.result.seconds = seconds_from_json(column_text(s.get(), 4));
    r.result.error = measure_error_from_string(column_text(s.get(), 5));
    r.result.message = column_text(s.get(), 6);
    r.result.cost_seconds = sqlite3_column_double(s.get(), 7);
    r.result.cut_short = sqlite3_column_int(s.get(), 8) != 0;
    r.recorded_at = sqlite3_column_double(s.get(), 9);
    out.push_back(std::move(r));
  }
  if (rc != SQLITE_DONE)
    throw std::runtime_error(std::string("tuning database: ") + sqlite3_errmsg(db_.get()));
  return out;
}

std::vector<DatabaseRecord> TuningDatabase::records(const std::string& signature,
                                                    const std::string& device) const {
  return query("WHERE signature = ? AND device = ? ORDER BY id", {signature, device});
}

std::optional<DatabaseRecord> TuningDatabase::best(const std::string& signature,
                                                   const std::string& device) const {
  auto rows = query(
      "WHERE signature = ? AND device = ? AND error = 'none' AND mean_seconds IS NOT NULL"
      " ORDER BY mean_seconds, id LIMIT 1",
      {signature, device});
  if (rows.empty()) return std::nullopt;
  return std::move(rows[0]);
}

long TuningDatabase::count() const {
  Statement s = prepare(db_.get(), "SELECT COUNT(*) FROM measurements");
  if (sqlite3_step(s.get()) != SQLITE_ROW) return 0;
  return static_cast<long>(sqlite3_column_int64(s.get(), 0));
}

std::vector<std::string> TuningDatabase::signatures(const std::string& device) const {
  Statement s =
      prepare(db_.get(), "SELECT DISTINCT signature FROM measurements WHERE device = ? ORDER BY 1");
  sqlite3_bind_text(s.get(), 1, device.c_str(), -1, SQLITE_TRANSIENT);
  std::vector<std::string> out;
  while (sqlite3_step(s.get()) == SQLITE_ROW) out.push_back(column_text(s.get(), 0));
  return out;
}

std::vector<std::string> TuningDatabase::devices() const {
  Statement s = prepare(db_.get(), "SELECT DISTINCT device FROM measurements ORDER BY 1");
  std::vector<std::string> out;
  while (sqlite3_step(s.get()) == SQLITE_ROW) out.push_back(column_text(s.get(), 0));
  return out;
}

long TuningDatabase::export_json_lines(const std::string& file) const {
  std::ofstream out(file);
  if (!out) throw std::runtime_error("cannot write " + file);
  long n = 0;
  for (const auto& r : query("ORDER BY id", {})) {
    out << to_json_line(r) << '\n';
    ++n;
  }
  return n;
}

long TuningDatabase::import_json_lines(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw std::runtime_error("cannot read " + file);
  std::vector<DatabaseRecord> batch;
  std::string line;
  long line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      batch.push_back(from_json_line(line));
    } catch (const std::exception& e) {
      throw std::invalid_argument(file + ":" + std::to_string(line_number) + ": " + e.what());
    }
  }
  append(batch);
  return static_cast<long>(batch.size());
}

}  // namespace nimble::tuning
