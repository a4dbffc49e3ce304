#include "tuning/database/tuning_database.h"

#include <sqlite3.h>

#include <algorithm>
#include <fstream>
#include <iterator>
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
  // Never creates a file in a folder that is not there, never truncates one.
  const int rc =
      sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  db_.reset(raw);
  if (rc != SQLITE_OK)
    throw std::runtime_error("cannot open tuning database " + path + ": " + sqlite3_errmsg(raw));
  sqlite3_busy_timeout(db_.get(), 5000);
  try {
    check_schema();
    // WAL: a crash mid-transaction leaves the last committed batch intact and readers
    // unblocked.
    execute("PRAGMA journal_mode=WAL");
    execute("PRAGMA synchronous=NORMAL");
  } catch (const std::runtime_error& e) {
    const bool locked = sqlite3_errcode(db_.get()) == SQLITE_BUSY;
    std::string what = e.what();
    const std::string prefix = "tuning database: ";
    if (what.rfind(prefix, 0) == 0) what.erase(0, prefix.size());
    throw std::runtime_error("tuning database " + path + ": " + what +
                             (locked ? " (another process holds it; waited 5 s)" : ""));
  }
}

namespace {

// Marks a file as ours ('nimb'), so another application's SQLite file is not taken for
// an empty tuning database and written into.
constexpr int kApplicationId = 0x6E696D62;
constexpr int kSchemaVersion = 1;
constexpr const char* kColumns[] = {"id",      "run",          "signature",    "device",
                                    "config",  "seconds",      "mean_seconds", "error",
                                    "message", "cost_seconds", "cut_short",    "recorded_at"};

}  // namespace

int TuningDatabase::pragma(const char* name) const {
  Statement s = prepare(db_.get(), std::string("PRAGMA ") + name);
  if (sqlite3_step(s.get()) != SQLITE_ROW) throw std::runtime_error(sqlite3_errmsg(db_.get()));
  return sqlite3_column_int(s.get(), 0);
}

void TuningDatabase::check_schema() {
  // A file that is not SQLite, or a truncated or damaged one, fails here, before anything
  // is written.
  {
    Statement s = prepare(db_.get(), "PRAGMA quick_check");
    if (sqlite3_step(s.get()) != SQLITE_ROW) throw std::runtime_error(sqlite3_errmsg(db_.get()));
    const std::string verdict = column_text(s.get(), 0);
    if (verdict != "ok") throw std::runtime_error("damaged (" + verdict + "); left as it is");
  }
  const auto table_names = [this] {
    std::vector<std::string> names;
    Statement s = prepare(db_.get(), "SELECT name FROM sqlite_master WHERE type = 'table'");
    while (sqlite3_step(s.get()) == SQLITE_ROW) names.push_back(column_text(s.get(), 0));
    return names;
  };
  std::vector<std::string> tables = table_names();
  int application = pragma("application_id");
  if (tables.empty() && application == 0) {
    execute("BEGIN IMMEDIATE");
    // Another process opening the new file may have made the schema between the look above
    // and this lock: then it is read as any existing database is.
    tables = table_names();
    application = pragma("application_id");
  }
  if (tables.empty() && application == 0) {
    try {
      execute(("PRAGMA application_id=" + std::to_string(kApplicationId)).c_str());
      execute(("PRAGMA user_version=" + std::to_string(kSchemaVersion)).c_str());
      execute(
          "CREATE TABLE measurements ("
          " id INTEGER PRIMARY KEY, run TEXT NOT NULL, signature TEXT NOT NULL, device TEXT "
          "NOT NULL, config TEXT NOT NULL, seconds TEXT NOT NULL, mean_seconds REAL, error "
          "TEXT NOT NULL, message TEXT NOT NULL, cost_seconds REAL NOT NULL, cut_short "
          "INTEGER NOT NULL, recorded_at REAL NOT NULL)");
      execute("CREATE INDEX measurements_by_task ON measurements(signature, device)");
      execute("COMMIT");
    } catch (...) {
      sqlite3_exec(db_.get(), "ROLLBACK", nullptr, nullptr, nullptr);
      throw;
    }
    return;
  }
  if (!sqlite3_get_autocommit(db_.get())) execute("COMMIT");  // the lock taken above
  const bool unmarked_ours = application == 0 && tables == std::vector<std::string>{"measurements"};
  if (application != kApplicationId && !unmarked_ours) {
    std::string names;
    for (const std::string& t : tables) names += (names.empty() ? "" : ", ") + t;
    throw std::runtime_error(
        "not a nimble tuning database (an SQLite file of another kind, "
        "tables: " +
        names + "); left as it is");
  }
  const int version = unmarked_ours ? kSchemaVersion : pragma("user_version");
  if (version != kSchemaVersion) {
    throw std::runtime_error("schema version " + std::to_string(version) + ", this nimble reads " +
                             std::to_string(kSchemaVersion) + "; left as it is");
  }
  std::vector<std::string> columns;
  {
    Statement s = prepare(db_.get(), "PRAGMA table_info(measurements)");
    while (sqlite3_step(s.get()) == SQLITE_ROW) columns.push_back(column_text(s.get(), 1));
  }
  if (!std::equal(columns.begin(), columns.end(), std::begin(kColumns), std::end(kColumns))) {
    throw std::runtime_error("the measurements table has other columns than schema version " +
                             std::to_string(kSchemaVersion) + "; left as it is");
  }
  if (unmarked_ours) {  // written before files were marked: the same schema
    execute(("PRAGMA application_id=" + std::to_string(kApplicationId)).c_str());
    execute(("PRAGMA user_version=" + std::to_string(kSchemaVersion)).c_str());
  }
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
