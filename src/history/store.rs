//! The CLI's deployment log: SQLite in a state directory (`.deployster/` beside the manifest).
//!
//! Appends are transactions, written through the WAL with `synchronous=FULL`, so an entry that
//! was appended survives a crash of the process or the machine. `seq` is the rowid: never
//! reused, since nothing is ever deleted. `resource` (the resource a target is about) is
//! indexed with `seq`, so a resource's recent events are an index walk whatever the log's size.
//!
//! Two small tables are derived from the entries by triggers, in the same transaction: the
//! newest entry of each (target, event), and what is open. They answer "latest" and "in
//! progress" in a lookup; a full `(target, event)` index would do the same, but it spreads
//! every append over hundreds of pages and halved the append rate. Triggers make the `entries`
//! table refuse updates and deletes: append-only is enforced, not just intended. A small derived
//! table of what was opened (a run, a plan, an action) and not yet closed is maintained by
//! triggers in the same transaction, so "what is in progress" stays fast however long the log
//! grows. Runs that change things hold an exclusive lock on the directory (see [`StateLock`]).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nix::fcntl::{Flock, FlockArg};
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};

use super::{Entry, Event, History, HistoryError, Revision};

/// The database file inside the state directory.
pub const DATABASE: &str = "log.sqlite";
const LOCK: &str = "lock";
/// 2: revisions are numbered (the `revisions` table).
const SCHEMA_VERSION: i64 = 2;

/// A deployment log in SQLite.
pub struct SqliteLog {
    path: PathBuf,
    connection: Mutex<Connection>,
}

fn quoted(events: &[Event]) -> String {
    events.iter().map(|e| format!("'{}'", e.as_str())).collect::<Vec<_>>().join(", ")
}

/// The schema; the open/close event lists come from [`Event::closed_by`], the one definition.
fn schema() -> String {
    let openers = [Event::RunStarted, Event::PlanStarted, Event::ActionStarted];
    let closers: Vec<Event> = openers.iter().flat_map(|o| o.closed_by().iter().copied()).collect();
    format!(
        "CREATE TABLE IF NOT EXISTS entries (
            seq INTEGER PRIMARY KEY,
            id TEXT NOT NULL, target TEXT NOT NULL, revision TEXT NOT NULL,
            event TEXT NOT NULL, at INTEGER NOT NULL, detail TEXT NOT NULL,
            resource TEXT);
         CREATE INDEX IF NOT EXISTS entries_by_resource ON entries (resource, seq);
         CREATE TABLE IF NOT EXISTS latest_entries (
            target TEXT NOT NULL, event TEXT NOT NULL, seq INTEGER NOT NULL,
            PRIMARY KEY (target, event)) WITHOUT ROWID;
         CREATE TRIGGER IF NOT EXISTS entries_latest AFTER INSERT ON entries
            BEGIN INSERT OR REPLACE INTO latest_entries (target, event, seq) VALUES (NEW.target, NEW.event, NEW.seq); END;
         CREATE TRIGGER IF NOT EXISTS entries_no_update BEFORE UPDATE ON entries
            BEGIN SELECT RAISE(ABORT, 'the deployment log is append-only'); END;
         CREATE TRIGGER IF NOT EXISTS entries_no_delete BEFORE DELETE ON entries
            BEGIN SELECT RAISE(ABORT, 'the deployment log is append-only'); END;
         CREATE TABLE IF NOT EXISTS open_entries (
            id TEXT NOT NULL, target TEXT NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (id, target));
         CREATE INDEX IF NOT EXISTS open_entries_by_target ON open_entries (target);
         CREATE TRIGGER IF NOT EXISTS entries_open AFTER INSERT ON entries WHEN NEW.event IN ({openers})
            BEGIN INSERT OR REPLACE INTO open_entries (id, target, seq) VALUES (NEW.id, NEW.target, NEW.seq); END;
         CREATE TRIGGER IF NOT EXISTS entries_close AFTER INSERT ON entries WHEN NEW.event IN ({closers})
            BEGIN DELETE FROM open_entries WHERE id = NEW.id AND target = NEW.target; END;
         CREATE TABLE IF NOT EXISTS revisions (
            number INTEGER PRIMARY KEY, hash TEXT NOT NULL, first_seen INTEGER NOT NULL);
         PRAGMA user_version = {SCHEMA_VERSION};",
        openers = quoted(&openers),
        closers = quoted(&closers),
    )
}

impl SqliteLog {
    /// Opens (creating when needed) the log in `dir`.
    pub fn open(dir: &Path) -> Result<Self, HistoryError> {
        let path = dir.join(DATABASE);
        let error = store_error(&path);
        usable_dir(dir)?;
        let connection = Connection::open(&path).map_err(|e| error(e.to_string()))?;
        connection.busy_timeout(std::time::Duration::from_secs(30)).map_err(|e| error(e.to_string()))?;
        connection.pragma_update(None, "journal_mode", "WAL").map_err(|e| error(e.to_string()))?;
        connection.pragma_update(None, "synchronous", "FULL").map_err(|e| error(e.to_string()))?;
        let version = known_version(&connection, dir)?;
        // A log from before revisions were numbered: its content hashes, numbered in the order
        // they first appear (their entries keep the hash; see `entries_at`). One transaction
        // with the schema, so that the new version is never recorded without them. IMMEDIATE:
        // it writes (`user_version`), and a deferred one that read first fails at once, unlike
        // waiting, when another process appended meanwhile (SQLITE_BUSY_SNAPSHOT: "database is
        // locked" in a `pipeline run --wait` while `pipeline status` opened the log).
        let migration = match version {
            1 => {
                "INSERT INTO revisions (hash, first_seen)
                    SELECT revision, min(at) FROM entries GROUP BY revision ORDER BY min(seq);"
            }
            _ => "",
        };
        connection
            .execute_batch(&format!("BEGIN IMMEDIATE; {} {migration} COMMIT;", schema()))
            .map_err(|e| error(e.to_string()))?;
        drop(error);
        Ok(Self { path, connection: Mutex::new(connection) })
    }

    /// Opens the existing log in `dir` for reading (`history`; a `plan` that may not write):
    /// as [`SqliteLog::open`] where the directory is writable — a crashed writer's WAL is
    /// recovered, which takes writing — else read-only. Appends may fail; queries answer.
    pub fn open_for_reading(dir: &Path) -> Result<Self, HistoryError> {
        let path = dir.join(DATABASE);
        let error = store_error(&path);
        if !path.exists() {
            return Err(error("there is no deployment log yet".into()));
        }
        if let Ok(log) = Self::open(dir) {
            return Ok(log);
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let open = |query: &str| -> rusqlite::Result<Connection> {
            let uri = format!("file:{}?{query}", path.display());
            let connection = Connection::open_with_flags(uri, flags)?;
            connection.busy_timeout(std::time::Duration::from_secs(30))?;
            connection.query_row("SELECT count(*) FROM entries LIMIT 1", [], |_| Ok(()))?;
            Ok(connection)
        };
        // Reading a WAL database writes its shared-memory index beside it. Where that cannot
        // be written, the log can still be read as immutable — but only when every entry is in
        // the database file itself: immutable reads ignore the write-ahead log.
        let wal_is_empty = std::fs::metadata(dir.join(format!("{DATABASE}-wal"))).map_or(true, |m| m.len() == 0);
        let connection = match open("mode=ro") {
            Ok(connection) => connection,
            Err(_) if wal_is_empty => open("immutable=1").map_err(|e| error(e.to_string()))?,
            Err(e) => {
                return Err(error(format!(
                    "{e}; the last run left entries in the write-ahead log, which only a reader that may write \
                     beside the database can recover"
                )));
            }
        };
        known_version(&connection, dir)?;
        drop(error);
        Ok(Self { path, connection: Mutex::new(connection) })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every revision, oldest first.
    pub fn revisions(&self) -> Result<Vec<Revision>, HistoryError> {
        let connection = self.connection.lock().expect("log lock");
        let mut statement = connection
            .prepare_cached("SELECT number, hash, first_seen FROM revisions ORDER BY number")
            .map_err(|e| self.error(e))?;
        let rows = statement
            .query_map([], |r| Ok(Revision { number: r.get(0)?, hash: r.get(1)?, first_seen: r.get(2)? }))
            .map_err(|e| self.error(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.error(e))
    }

    /// Every entry recorded at `revision`, oldest first (a log from before revisions were
    /// numbered recorded the hash instead).
    pub fn entries_at(&self, revision: &Revision) -> Result<Vec<Entry>, HistoryError> {
        self.query(
            &format!("SELECT {COLUMNS} FROM entries WHERE revision IN (?1, ?2) ORDER BY seq"),
            params![revision.number.to_string(), revision.hash],
        )
    }

    /// Every entry of run `id`, oldest first.
    pub fn entries_of_run(&self, id: &str) -> Result<Vec<Entry>, HistoryError> {
        self.query(&format!("SELECT {COLUMNS} FROM entries WHERE id = ?1 ORDER BY seq"), params![id])
    }

    /// How many entries the log holds.
    pub fn len(&self) -> Result<u64, HistoryError> {
        let connection = self.connection.lock().expect("log lock");
        let count: i64 =
            connection.query_row("SELECT count(*) FROM entries", [], |r| r.get(0)).map_err(|e| self.error(e))?;
        Ok(count as u64)
    }

    pub fn is_empty(&self) -> Result<bool, HistoryError> {
        Ok(self.len()? == 0)
    }

    fn error(&self, e: rusqlite::Error) -> HistoryError {
        store_error(&self.path)(e.to_string())
    }

    fn query(&self, sql: &str, params: impl rusqlite::Params) -> Result<Vec<Entry>, HistoryError> {
        let connection = self.connection.lock().expect("log lock");
        let mut statement = connection.prepare_cached(sql).map_err(|e| self.error(e))?;
        let rows = statement.query_map(params, row_to_entry).map_err(|e| self.error(e))?;
        let mut entries = Vec::new();
        for row in rows {
            // An event this version does not know (written by a newer one) answers no query.
            if let Some(entry) = row.map_err(|e| self.error(e))? {
                entries.push(entry);
            }
        }
        Ok(entries)
    }
}

/// The log's schema version, refused when a newer deployster wrote it.
fn known_version(connection: &Connection, dir: &Path) -> Result<i64, HistoryError> {
    let version: i64 = connection
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(|e| store_error(&dir.join(DATABASE))(e.to_string()))?;
    if version > SCHEMA_VERSION {
        return Err(HistoryError::Unusable {
            path: dir.display().to_string(),
            message: format!(
                "its log was written by a newer deployster (schema {version}, this one knows {SCHEMA_VERSION}); \
                 use that version, or another --state-dir"
            ),
        });
    }
    Ok(version)
}

/// A state directory that cannot be created or written, said plainly (the user named it).
fn unusable(dir: &Path, e: &std::io::Error) -> HistoryError {
    let why = if dir.is_file() {
        "it is a file, not a directory".to_string()
    } else if e.raw_os_error() == Some(nix::libc::ENOTDIR) {
        "a part of its path is a file, not a directory".to_string()
    } else {
        match e.kind() {
            std::io::ErrorKind::PermissionDenied => "it is not writable (permission denied)".to_string(),
            std::io::ErrorKind::ReadOnlyFilesystem => "it is on a read-only file system".to_string(),
            _ => format!("cannot create or write it: {e}"),
        }
    };
    HistoryError::Unusable { path: dir.display().to_string(), message: why }
}

/// Creates `dir` if needed and checks that a file can be created in it.
fn usable_dir(dir: &Path) -> Result<(), HistoryError> {
    std::fs::create_dir_all(dir).map_err(|e| unusable(dir, &e))?;
    let metadata = std::fs::metadata(dir).map_err(|e| unusable(dir, &e))?;
    if !metadata.is_dir() {
        return Err(unusable(dir, &std::io::Error::from_raw_os_error(nix::libc::ENOTDIR)));
    }
    nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK | nix::unistd::AccessFlags::X_OK)
        .map_err(|e| unusable(dir, &std::io::Error::from(e)))
}

fn store_error(path: &Path) -> impl Fn(String) -> HistoryError + '_ {
    move |message| HistoryError::Store { path: path.display().to_string(), message }
}

const COLUMNS: &str = "id, target, revision, event, at, detail";

fn row_to_entry(row: &rusqlite::Row) -> rusqlite::Result<Option<Entry>> {
    let event: String = row.get(3)?;
    let detail: String = row.get(5)?;
    Ok(Event::parse(&event).map(|event| Entry {
        id: row.get(0).unwrap_or_default(),
        target: row.get(1).unwrap_or_default(),
        revision: row.get(2).unwrap_or_default(),
        event,
        at: row.get(4).unwrap_or_default(),
        detail: serde_json::from_str(&detail).unwrap_or(serde_json::Value::Null),
    }))
}

/// The resource a target is about: `resource/<name>[/…]` → `name`.
fn resource_of(target: &str) -> Option<&str> {
    target.strip_prefix("resource/").map(|rest| rest.split('/').next().unwrap_or(rest))
}

/// `target = prefix`, or a target below it: `[prefix/, prefix0)` (`0` follows `/`).
fn prefix_bounds(prefix: &str) -> (String, String, String) {
    let base = prefix.trim_end_matches('/');
    (base.to_string(), format!("{base}/"), format!("{base}0"))
}

impl History for SqliteLog {
    /// The newest revision's number when it has this content; else the next number, recorded
    /// now. Numbers therefore grow with time, and content that comes back gets a new one.
    fn revision_of(&self, hash: &str) -> Result<String, HistoryError> {
        let connection = self.connection.lock().expect("log lock");
        // One statement: a `plan` beside an `apply` never numbers the same content twice.
        connection
            .execute(
                "INSERT INTO revisions (hash, first_seen) SELECT ?1, ?2 WHERE NOT EXISTS
                   (SELECT 1 FROM revisions WHERE hash = ?1 AND number = (SELECT max(number) FROM revisions))",
                params![hash, super::now_ms()],
            )
            .map_err(|e| self.error(e))?;
        let number: i64 = connection
            .query_row("SELECT max(number) FROM revisions WHERE hash = ?1", params![hash], |r| r.get(0))
            .map_err(|e| self.error(e))?;
        Ok(number.to_string())
    }

    fn append(&self, entries: &[Entry]) -> Result<(), HistoryError> {
        let mut connection = self.connection.lock().expect("log lock");
        let tx = connection.transaction().map_err(|e| self.error(e))?;
        {
            let mut insert = tx
                .prepare_cached(&format!(
                    "INSERT INTO entries ({COLUMNS}, resource) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"
                ))
                .map_err(|e| self.error(e))?;
            for e in entries {
                let resource = resource_of(&e.target);
                insert
                    .execute(params![
                        e.id,
                        e.target,
                        e.revision,
                        e.event.as_str(),
                        e.at,
                        e.detail.to_string(),
                        resource
                    ])
                    .map_err(|e| self.error(e))?;
            }
        }
        tx.commit().map_err(|e| self.error(e))
    }

    fn latest(&self, target: &str, events: &[Event]) -> Result<Option<Entry>, HistoryError> {
        let mut newest: Option<(i64, Entry)> = None;
        for event in events {
            let connection = self.connection.lock().expect("log lock");
            let mut statement = connection
                .prepare_cached(&format!(
                    "SELECT {COLUMNS}, seq FROM entries WHERE seq =
                       (SELECT seq FROM latest_entries WHERE target = ?1 AND event = ?2)"
                ))
                .map_err(|e| self.error(e))?;
            let found = statement
                .query_row(params![target, event.as_str()], |r| Ok((r.get::<_, i64>(6)?, row_to_entry(r)?)))
                .optional()
                .map_err(|e| self.error(e))?;
            if let Some((seq, Some(entry))) = found
                && newest.as_ref().is_none_or(|(best, _)| seq > *best)
            {
                newest = Some((seq, entry));
            }
        }
        Ok(newest.map(|(_, e)| e))
    }

    fn open(&self, prefix: &str) -> Result<Vec<Entry>, HistoryError> {
        let (exact, low, high) = prefix_bounds(prefix);
        self.query(
            &format!(
                "SELECT {COLUMNS} FROM entries WHERE seq IN (SELECT seq FROM open_entries
                   WHERE ?1 = '' OR target = ?1 OR (target >= ?2 AND target < ?3)) ORDER BY seq"
            ),
            params![exact, low, high],
        )
    }

    fn recent(&self, prefix: &str, limit: usize) -> Result<Vec<Entry>, HistoryError> {
        if prefix.is_empty() {
            return self
                .query(&format!("SELECT {COLUMNS} FROM entries ORDER BY seq DESC LIMIT ?1"), params![limit as i64]);
        }
        // A whole resource (the common question) walks its own index.
        if let Some(name) =
            resource_of(prefix).filter(|name| prefix.trim_end_matches('/') == format!("resource/{name}"))
        {
            return self.query(
                &format!("SELECT {COLUMNS} FROM entries WHERE resource = ?1 ORDER BY seq DESC LIMIT ?2"),
                params![name, limit as i64],
            );
        }
        let (exact, low, high) = prefix_bounds(prefix);
        self.query(
            &format!(
                "SELECT {COLUMNS} FROM entries WHERE target = ?1 OR (target >= ?2 AND target < ?3)
                 ORDER BY seq DESC LIMIT ?4"
            ),
            params![exact, low, high, limit as i64],
        )
    }

    fn latest_each(&self, prefix: &str, events: &[Event]) -> Result<Vec<Entry>, HistoryError> {
        let (exact, low, high) = prefix_bounds(prefix);
        self.query(
            &format!(
                "SELECT {COLUMNS} FROM entries WHERE seq IN (SELECT max(seq) FROM latest_entries
                   WHERE event IN ({events}) AND (?1 = '' OR target = ?1 OR (target >= ?2 AND target < ?3))
                   GROUP BY target) ORDER BY seq",
                events = quoted(events)
            ),
            params![exact, low, high],
        )
    }
}

/// An exclusive lock on a state directory, held by a run that changes things, so that two
/// applies never interleave. Released when dropped (or when the process dies).
pub struct StateLock {
    _lock: Flock<File>,
}

impl StateLock {
    /// Takes the lock, or fails at once naming the holder.
    pub fn acquire(dir: &Path) -> Result<StateLock, HistoryError> {
        let path = dir.join(LOCK);
        usable_dir(dir)?;
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| unusable(dir, &e))?;
        let mut lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => lock,
            Err((mut file, _)) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = if holder.trim().is_empty() { "holder unknown".into() } else { holder.trim().to_string() };
                return Err(HistoryError::Locked { path: dir.display().to_string(), holder });
            }
        };
        let holder = format!("pid {} since {}", std::process::id(), super::format_time(super::now_ms()));
        let _ = lock.set_len(0).and_then(|()| lock.rewind()).and_then(|()| lock.write_all(holder.as_bytes()));
        Ok(StateLock { _lock: lock })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::tests::{check_queries, crafted, entry};

    #[test]
    fn sqlite_log_answers_the_queries() {
        let dir = tempfile::tempdir().unwrap();
        let log = SqliteLog::open(dir.path()).unwrap();
        log.append(&crafted()).unwrap();
        check_queries(&log);
    }

    #[test]
    fn entries_survive_reopening_and_cannot_be_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        SqliteLog::open(dir.path()).unwrap().append(&crafted()).unwrap();
        let log = SqliteLog::open(dir.path()).unwrap();
        assert_eq!(log.len().unwrap(), crafted().len() as u64);
        let connection = Connection::open(dir.path().join(DATABASE)).unwrap();
        for sql in ["UPDATE entries SET event = 'x'", "DELETE FROM entries"] {
            let err = connection.execute(sql, []).unwrap_err().to_string();
            assert!(err.contains("append-only"), "{sql}: {err}");
        }
    }

    #[test]
    fn revisions_are_numbered_in_order_and_content_that_returns_gets_a_new_number() {
        let dir = tempfile::tempdir().unwrap();
        let log = SqliteLog::open(dir.path()).unwrap();
        let numbers: Vec<String> = ["aaa", "aaa", "bbb", "aaa"].iter().map(|h| log.revision_of(h).unwrap()).collect();
        assert_eq!(numbers, ["1", "1", "2", "3"]);
        let listed: Vec<(i64, String)> = log.revisions().unwrap().into_iter().map(|r| (r.number, r.hash)).collect();
        assert_eq!(listed, [(1, "aaa".into()), (2, "bbb".into()), (3, "aaa".into())]);
        log.append(&[entry("r1", "manifest", "2", Event::RunStarted, 5)]).unwrap();
        let second = &log.revisions().unwrap()[1];
        assert_eq!(log.entries_at(second).unwrap().len(), 1);
    }

    #[test]
    fn a_log_from_before_numbered_revisions_gets_its_hashes_numbered() {
        let dir = tempfile::tempdir().unwrap();
        let log = SqliteLog::open(dir.path()).unwrap();
        log.append(&crafted()).unwrap();
        drop(log);
        let connection = Connection::open(dir.path().join(DATABASE)).unwrap();
        connection.execute_batch("DROP TABLE revisions; PRAGMA user_version = 1;").unwrap();
        drop(connection);
        let log = SqliteLog::open(dir.path()).unwrap();
        let hashes: Vec<String> = log.revisions().unwrap().into_iter().map(|r| r.hash).collect();
        assert_eq!(hashes, ["A", "B", "C"], "in the order they first appear");
        let first = &log.revisions().unwrap()[0];
        assert!(log.entries_at(first).unwrap().iter().all(|e| e.revision == "A"));
        assert_eq!(log.revision_of("C").unwrap(), "3", "the newest content keeps its number");
        assert_eq!(log.revision_of("D").unwrap(), "4");
    }

    #[test]
    fn unknown_events_from_a_newer_version_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let log = SqliteLog::open(dir.path()).unwrap();
        log.append(&[entry("r", "manifest", "A", Event::RunStarted, 1)]).unwrap();
        let connection = Connection::open(dir.path().join(DATABASE)).unwrap();
        connection
            .execute("INSERT INTO entries (id, target, revision, event, at, detail) VALUES ('r', 'manifest', 'A', 'from-the-future', 2, '{}')", [])
            .unwrap();
        let recent = log.recent("", 10).unwrap();
        assert_eq!(recent.len(), 1);
        assert_eq!(recent[0].event, Event::RunStarted);
    }

    #[test]
    fn a_second_lock_on_the_same_directory_is_refused_with_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let held = StateLock::acquire(dir.path()).unwrap();
        // flock locks belong to open file descriptions: a second open in this process conflicts too.
        let err = StateLock::acquire(dir.path()).err().expect("a second lock must be refused");
        assert_eq!(err.reason(), "StateLocked");
        assert!(err.to_string().contains(&format!("pid {}", std::process::id())), "{err}");
        drop(held);
        StateLock::acquire(dir.path()).expect("free again once dropped");
    }
}
