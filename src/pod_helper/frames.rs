//! How a program's output comes back from a Pod, whole and verified.
//!
//! A container's log mixes its stdout and stderr and can lose lines (rotation, a restarted
//! kubelet), and its termination message holds 4 KiB. So the helper that runs the type's program
//! in the Pod ([`super::entry`]) passes the program's stderr on line by line, writes its stdout
//! to the log as *frames* — lines carrying a per-invocation nonce, a sequence number and a
//! base64 chunk, written as the output comes so that progress shows live — and, when the
//! program has exited, writes a small [`Record`] to the termination message: the exit, and the
//! length and SHA-256 of the whole stdout. The executor reassembles the frames it read from the
//! log and holds them against the record: output that does not match is never taken as the
//! program's.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use sha2::{Digest, Sha256};

/// What starts a frame line: `@@deployster <nonce> <seq> <base64>`.
const FRAME: &str = "@@deployster";

/// What starts the record's line in the log: `@@deployster-record <nonce> <json>`. The record
/// goes to the termination message and, last, to the log too: a runtime that gives a non-root
/// container a termination-message file it cannot write (root-owned, 0644) still gets it.
const RECORD: &str = "@@deployster-record";

/// The log line carrying `record`.
pub fn record_line(record: &Record) -> String {
    format!("{RECORD} {} {}\n", record.nonce, serde_json::to_string(record).expect("records serialize"))
}

/// What a runner's helper says once it holds its locks and is about to start the program:
/// `@@deployster-begun <nonce>`. An exec that ended without it never started the program, so
/// the invocation may be asked of another runner.
const BEGUN: &str = "@@deployster-begun";

/// The line saying invocation `nonce` starts its program now.
pub fn begun_line(nonce: &str) -> String {
    format!("{BEGUN} {nonce}\n")
}

/// Stdout bytes per frame: lines of the log stay well under any runtime's line limit (16 KiB
/// for containerd and Docker's json-file, which split longer lines).
pub const FRAME_BYTES: usize = 3 * 1024;

/// The frame line carrying stdout bytes `chunk`, the `seq`-th of the invocation `nonce`.
pub fn frame(nonce: &str, seq: u64, chunk: &[u8]) -> String {
    format!("{FRAME} {nonce} {seq} {}\n", STANDARD.encode(chunk))
}

/// What the helper leaves in the termination message once the program has exited.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Record {
    pub nonce: String,
    /// The program's exit code, or the signal that ended it.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub signal: Option<i32>,
    pub stdout_bytes: u64,
    /// Lowercase hex.
    pub stdout_sha256: String,
    pub frames: u64,
    /// Why the helper could not run the program at all (its entrypoint missing, say), if so.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub error: Option<String>,
}

impl Record {
    /// The record of a program that printed `stdout` in `frames` frames.
    pub fn of(nonce: &str, stdout: &[u8], frames: u64) -> Record {
        Record {
            nonce: nonce.to_string(),
            code: None,
            signal: None,
            stdout_bytes: stdout.len() as u64,
            stdout_sha256: hex::encode(Sha256::digest(stdout)),
            frames,
            error: None,
        }
    }
}

/// Why the output read back cannot be taken as the program's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("the termination message is not the helper's record ({0}): the program's result is unknown")]
    Record(String),
    #[error("the termination message belongs to another invocation")]
    Nonce,
    #[error("frame {seq} of the program's output is not valid base64")]
    Encoding { seq: u64 },
    #[error(
        "the Pod's log lost part of the program's output: read {read_frames} of {frames} frames, {read_bytes} of \
         {bytes} bytes"
    )]
    Lost { frames: u64, read_frames: u64, bytes: u64, read_bytes: u64 },
    #[error("the program's output read from the Pod's log does not match its digest")]
    Digest,
}

/// What the log holds once the frames are taken out of it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Split {
    /// Frames of `nonce` by sequence number, decoded (a frame seen twice — a log read again
    /// from where it left off — counts once).
    pub chunks: std::collections::BTreeMap<u64, Vec<u8>>,
    /// Every other line: the program's stderr (and whatever else the container printed).
    pub stderr: Vec<String>,
    /// The record as the log carries it (the termination message is preferred).
    pub record: Option<String>,
    /// Whether the helper said it starts the program ([`begun_line`]).
    pub begun: bool,
}

/// Splits `log` (lines, as the log API gives them) into the frames of `nonce` and the rest.
pub fn split(log: &str, nonce: &str) -> Result<Split, FrameError> {
    let mut split = Split::default();
    for line in log.lines() {
        if !split.take(line, nonce)? {
            split.stderr.push(line.to_string());
        }
    }
    Ok(split)
}

impl Split {
    /// Takes one log line: a frame, the record or the begun line of `nonce` is kept (true); one
    /// of another invocation is dropped (true); anything else is left to the caller (false).
    pub fn take(&mut self, line: &str, nonce: &str) -> Result<bool, FrameError> {
        if let Some(seen) = line.strip_prefix(BEGUN).and_then(|r| r.strip_prefix(' ')) {
            self.begun |= seen == nonce;
            return Ok(true);
        }
        if let Some(rest) = line.strip_prefix(RECORD).and_then(|r| r.strip_prefix(' ')) {
            if let Some((seen, record)) = rest.split_once(' ')
                && seen == nonce
            {
                self.record = Some(record.to_string());
            }
            return Ok(true);
        }
        let Some(rest) = line.strip_prefix(FRAME).and_then(|r| r.strip_prefix(' ')) else {
            return Ok(false);
        };
        let mut fields = rest.splitn(3, ' ');
        let (Some(seen), Some(seq), chunk) = (fields.next(), fields.next(), fields.next().unwrap_or("")) else {
            return Ok(false);
        };
        let Ok(seq) = seq.parse::<u64>() else {
            return Ok(false);
        };
        if seen != nonce {
            // Another invocation's frame (a Pod name reused by a retry): not this one's output.
            return Ok(true);
        }
        let bytes = STANDARD.decode(chunk.trim_end()).map_err(|_| FrameError::Encoding { seq })?;
        self.chunks.insert(seq, bytes);
        Ok(true)
    }
}

/// The program's whole stdout from the frames of `split`, held against the record: the
/// termination message's text (`termination`) when there is one, else the log's.
pub fn reassemble(split: &Split, termination: &str, nonce: &str) -> Result<(Record, Vec<u8>), FrameError> {
    let text = match (termination.trim(), &split.record) {
        ("", Some(logged)) => logged.as_str(),
        (text, _) => text,
    };
    let record: Record = serde_json::from_str(text.trim()).map_err(|e| FrameError::Record(e.to_string()))?;
    if record.nonce != nonce {
        return Err(FrameError::Nonce);
    }
    let stdout: Vec<u8> = split.chunks.values().flatten().copied().collect();
    let contiguous = split.chunks.keys().copied().eq(0..split.chunks.len() as u64);
    if !contiguous || split.chunks.len() as u64 != record.frames || stdout.len() as u64 != record.stdout_bytes {
        return Err(FrameError::Lost {
            frames: record.frames,
            read_frames: split.chunks.len() as u64,
            bytes: record.stdout_bytes,
            read_bytes: stdout.len() as u64,
        });
    }
    if hex::encode(Sha256::digest(&stdout)) != record.stdout_sha256 {
        return Err(FrameError::Digest);
    }
    Ok((record, stdout))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_of(nonce: &str, stdout: &[u8], stderr_between: &[&str]) -> (String, String) {
        let mut log = String::new();
        let chunks: Vec<&[u8]> = stdout.chunks(FRAME_BYTES).collect();
        for (seq, chunk) in chunks.iter().enumerate() {
            if let Some(line) = stderr_between.get(seq) {
                log.push_str(line);
                log.push('\n');
            }
            log.push_str(&frame(nonce, seq as u64, chunk));
        }
        let mut record = Record::of(nonce, stdout, chunks.len() as u64);
        record.code = Some(0);
        (log, serde_json::to_string(&record).unwrap())
    }

    #[test]
    fn only_the_invocation_s_own_begun_line_says_it_started() {
        let other = split(&begun_line("n2"), "n1").unwrap();
        assert!(!other.begun && other.stderr.is_empty(), "another invocation's line is dropped: {other:?}");
        let own = split(&format!("starting\n{}", begun_line("n1")), "n1").unwrap();
        assert!(own.begun && own.stderr == ["starting"], "{own:?}");
    }

    #[test]
    fn stdout_comes_back_whole_and_stderr_apart() {
        let stdout: Vec<u8> = (0..10_000u32).flat_map(|n| n.to_le_bytes()).collect();
        let (log, record) = log_of("n1", &stdout, &["starting", "@@deployster is not a frame", "half way"]);
        let split = split(&log, "n1").unwrap();
        assert_eq!(split.stderr, ["starting", "@@deployster is not a frame", "half way"]);
        let (record, read) = reassemble(&split, &record, "n1").unwrap();
        assert_eq!((read, record.code), (stdout, Some(0)));
    }

    #[test]
    fn the_record_in_the_log_stands_in_for_a_termination_message_that_could_not_be_written() {
        let (log, record) = log_of("n1", b"{}", &[]);
        let record: Record = serde_json::from_str(&record).unwrap();
        let logged = format!("{log}{}", record_line(&record));
        let parts = split(&logged, "n1").unwrap();
        assert!(parts.stderr.is_empty(), "{parts:?}");
        assert_eq!(reassemble(&parts, "", "n1").unwrap(), (record, b"{}".to_vec()));
        assert!(
            matches!(reassemble(&split(&log, "n1").unwrap(), "", "n1"), Err(FrameError::Record(_))),
            "no record at all"
        );
    }

    #[test]
    fn a_log_read_again_from_where_it_left_off_counts_each_frame_once() {
        let (log, record) = log_of("n1", b"{\"status\": \"VALID\"}", &[]);
        let twice = format!("{log}{log}");
        assert_eq!(reassemble(&split(&twice, "n1").unwrap(), &record, "n1").unwrap().1, b"{\"status\": \"VALID\"}");
    }

    #[test]
    fn lost_altered_or_foreign_output_is_never_taken_as_the_program_s() {
        let stdout = vec![b'x'; 3 * FRAME_BYTES];
        let (log, record) = log_of("n1", &stdout, &[]);
        let lost: String = log.lines().enumerate().filter(|(i, _)| *i != 1).map(|(_, l)| format!("{l}\n")).collect();
        assert_eq!(
            reassemble(&split(&lost, "n1").unwrap(), &record, "n1").unwrap_err(),
            FrameError::Lost {
                frames: 3,
                read_frames: 2,
                bytes: 3 * FRAME_BYTES as u64,
                read_bytes: 2 * FRAME_BYTES as u64
            }
        );
        let (other, _) = log_of("n1", &vec![b'y'; 3 * FRAME_BYTES], &[]);
        assert_eq!(reassemble(&split(&other, "n1").unwrap(), &record, "n1").unwrap_err(), FrameError::Digest);
        assert_eq!(reassemble(&split(&log, "n2").unwrap(), &record, "n2").unwrap_err(), FrameError::Nonce);
        assert!(matches!(
            reassemble(&split(&log, "n1").unwrap(), "Container main starting", "n1"),
            Err(FrameError::Record(_))
        ));
        let garbled = log.replacen("@@deployster n1 0 ", "@@deployster n1 0 !!", 1);
        assert_eq!(split(&garbled, "n1").unwrap_err(), FrameError::Encoding { seq: 0 });
    }
}
