//! Capturing a program's output: bounded, and streamed line by line as it arrives. Shared by
//! every executor so that limits and line splitting behave the same everywhere.

use super::{ExecError, LineSink, Stream};

/// Collects one output stream.
pub struct Capture {
    stream: Stream,
    limit: usize,
    sink: Option<LineSink>,
    bytes: Vec<u8>,
    /// Where the current, incomplete line starts in `bytes`.
    line_start: usize,
}

impl Capture {
    pub fn new(stream: Stream, limit: usize, sink: Option<LineSink>) -> Self {
        Self { stream, limit, sink, bytes: Vec::new(), line_start: 0 }
    }

    /// Appends a chunk; fails once the stream exceeds its limit.
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), ExecError> {
        if self.bytes.len() + chunk.len() > self.limit {
            let stream = if self.stream == Stream::Stdout { "stdout" } else { "stderr" };
            return Err(ExecError::OutputTooLarge { limit: self.limit, stream });
        }
        self.bytes.extend_from_slice(chunk);
        if let Some(sink) = &self.sink {
            while let Some(pos) = self.bytes[self.line_start..].iter().position(|&b| b == b'\n') {
                emit(sink, self.stream, &self.bytes[self.line_start..self.line_start + pos]);
                self.line_start += pos + 1;
            }
        }
        Ok(())
    }

    /// Ends the stream: an unterminated last line is sent too. Returns everything captured.
    pub fn finish(self) -> Vec<u8> {
        if let Some(sink) = &self.sink
            && self.line_start < self.bytes.len()
        {
            emit(sink, self.stream, &self.bytes[self.line_start..]);
        }
        self.bytes
    }
}

fn emit(sink: &LineSink, stream: Stream, line: &[u8]) {
    let text = String::from_utf8_lossy(line);
    sink(stream, text.strip_suffix('\r').unwrap_or(&text));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn lines_split_across_chunks_are_joined_and_the_last_one_is_flushed() {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let seen = lines.clone();
        let mut capture =
            Capture::new(Stream::Stderr, 100, Some(Arc::new(move |_, l| seen.lock().unwrap().push(l.to_string()))));
        for chunk in [&b"one\r\ntw"[..], b"o\nthr", b"ee"] {
            capture.push(chunk).unwrap();
        }
        assert_eq!(capture.finish(), b"one\r\ntwo\nthree");
        assert_eq!(*lines.lock().unwrap(), ["one", "two", "three"]);
    }

    #[test]
    fn the_limit_is_enforced() {
        let mut capture = Capture::new(Stream::Stdout, 4, None);
        capture.push(b"abcd").unwrap();
        let err = capture.push(b"e").unwrap_err();
        assert!(matches!(err, ExecError::OutputTooLarge { limit: 4, stream: "stdout" }));
    }
}
