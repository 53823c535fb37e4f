//! Following an invocation's Pod log: stdout frames and stderr lines as they come, each line
//! once however often the stream is re-opened, and — once the program's record is there — its
//! exit, its verified stdout and its stderr, with Kubernetes' own word when the Pod ended early.

use futures::{AsyncBufReadExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::LogParams;

use super::api::{api_error, pod_error};
use crate::engine::executor::output::Capture;
use crate::engine::executor::{ExecError, Exit, Invocation, Stream};
use crate::pod_helper::frames::{self, FrameError, Record, Split};

/// `at` down to its whole second: where a re-opened log starts. The API takes `sinceTime` in
/// whole seconds and kube rounds to the *nearest* one, which would lose what the program printed
/// in the second half of that second; the lines before `at` that the earlier second brings back
/// are skipped by their timestamps.
fn whole_second(at: Timestamp) -> Timestamp {
    use k8s_openapi::jiff::{RoundMode, TimestampRound, Unit};
    at.round(TimestampRound::new().smallest(Unit::Second).mode(RoundMode::Floor)).expect("seconds divide a day")
}

/// Reads a Pod's log as it grows: frames to stdout, other lines to stderr, each line once.
pub struct LogFollower<'a> {
    nonce: &'a str,
    /// Each stream's bound.
    limit: usize,
    split: Split,
    stdout: Capture,
    stderr: Capture,
    /// Frames handed to `stdout` so far (in order).
    delivered: u64,
    /// The last line's timestamp, and how many lines carried it: where a re-opened log goes on.
    since: Option<Timestamp>,
    at_since: usize,
}

impl<'a> LogFollower<'a> {
    pub fn new(nonce: &'a str, limit: usize, invocation: &Invocation) -> Self {
        LogFollower {
            nonce,
            limit,
            split: Split::default(),
            stdout: Capture::new(Stream::Stdout, limit, invocation.sink.clone()),
            stderr: Capture::new(Stream::Stderr, limit, invocation.sink.clone()),
            delivered: 0,
            since: None,
            at_since: 0,
        }
    }

    /// Reads the log from where it was left until the stream ends, or until the program's
    /// record has come and the output read verifies against it: whether it has.
    pub async fn read(&mut self, pods: &Api<Pod>, name: &str, follow: bool) -> Result<bool, ExecError> {
        let params = self.params(follow);
        let stream = match pods.log_stream(name, &params).await {
            Ok(stream) => stream,
            // The container is not there to read yet (or any more): the next read tells.
            Err(kube::Error::Api(status)) if status.code == 400 => return Ok(false),
            Err(e) => return Err(api_error("reading the Pod's log", e)),
        };
        let mut lines = stream.lines();
        let mut skip_at_since = self.at_since;
        while let Some(line) =
            lines.try_next().await.map_err(|e| pod_error("KubernetesApi", format!("reading the Pod's log: {e}")))?
        {
            let (stamp, text) =
                match line.split_once(' ').and_then(|(t, rest)| Some((t.parse::<Timestamp>().ok()?, rest))) {
                    Some(parsed) => parsed,
                    None => (self.since.unwrap_or_default(), line.as_str()),
                };
            match self.since {
                Some(since) if stamp < since => continue,
                Some(since) if stamp == since && skip_at_since > 0 => {
                    skip_at_since -= 1;
                    continue;
                }
                Some(since) if stamp == since => self.at_since += 1,
                _ => (self.since, self.at_since) = (Some(stamp), 1),
            }
            self.take(text)?;
            if self.complete() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Whether the log has given the program's record and all the output it names: the program
    /// has ended (the record is the helper's last line), which the log tells before the
    /// kubelet's next relist and before a followed log's stream ends (each up to a second on).
    fn complete(&self) -> bool {
        self.split.record.is_some() && frames::reassemble(&self.split, "", self.nonce).is_ok()
    }

    /// What the next read asks for: the main container's log, with timestamps, from the
    /// start of the last line's second.
    fn params(&self, follow: bool) -> LogParams {
        LogParams {
            container: Some("main".into()),
            follow,
            timestamps: true,
            since_time: self.since.map(whole_second),
            ..LogParams::default()
        }
    }

    fn take(&mut self, line: &str) -> Result<(), ExecError> {
        let framed = self.split.take(line, self.nonce).map_err(|e| pod_error("OutputUnverified", e.to_string()))?;
        if !framed {
            self.stderr.push(line.as_bytes())?;
            self.stderr.push(b"\n")?;
            return Ok(());
        }
        while let Some(chunk) = self.split.chunks.get(&self.delivered) {
            self.stdout.push(chunk)?;
            self.delivered += 1;
        }
        Ok(())
    }

    /// Whether the ended Pod's record names output (or, without a termination message, the
    /// record itself) that the log has not given yet, within the bound: what a runtime that
    /// copies a container's output behind its exit has still to write.
    pub fn still_arriving(&self, pod: &Pod) -> bool {
        match frames::reassemble(&self.split, &termination_message(pod), self.nonce) {
            Err(FrameError::Lost { bytes, .. }) => bytes <= self.limit as u64,
            Err(FrameError::Record(_)) => self.split.record.is_none(),
            _ => false,
        }
    }

    /// The program's exit, its verified stdout and its stderr, once the Pod has ended.
    pub fn finish(self, pod: &Pod, name: &str) -> Result<(Exit, Vec<u8>, Vec<u8>), ExecError> {
        let status = pod.status.clone().unwrap_or_default();
        let main: Option<&ContainerStatus> =
            status.container_statuses.as_ref().and_then(|s| s.iter().find(|c| c.name == "main"));
        let terminated = main.and_then(|c| c.state.as_ref()).and_then(|s| s.terminated.clone());
        let termination = termination_message(pod);
        let _ = self.stdout.finish();
        let mut stderr = self.stderr.finish();
        // Kubernetes' own word on why the Pod or its container ended, when it is not the program's.
        let failed = status.phase.as_deref() == Some("Failed");
        let pod_reason = status.reason.clone().filter(|r| failed && !r.is_empty());
        let container_reason =
            terminated.as_ref().and_then(|t| t.reason.clone()).filter(|r| r != "Completed" && r != "Error");
        let verified = frames::reassemble(&self.split, &termination, self.nonce);
        let (record, stdout) = match verified {
            Ok(read) => read,
            // The record says the program printed past the bound: that is the failure, whatever
            // part of it the log kept (a runtime rotates a large log).
            Err(FrameError::Lost { bytes, .. }) if bytes > self.limit as u64 => {
                return Err(ExecError::OutputTooLarge { limit: self.limit, stream: "stdout" });
            }
            Err(e) => {
                let (reason, why) = match (&pod_reason, &container_reason) {
                    (Some(reason), _) => (reason.clone(), status.message.clone().unwrap_or_default()),
                    (None, Some(reason)) => {
                        (reason.clone(), format!("exit code {}", terminated.as_ref().map_or(0, |t| t.exit_code)))
                    }
                    (None, None) => {
                        let unverified = matches!(e, FrameError::Lost { .. } | FrameError::Digest | FrameError::Nonce);
                        let reason = if unverified { "OutputUnverified" } else { "NoRecord" };
                        return Err(pod_error(
                            reason,
                            format!("the Pod {name} ended ({}) but {e}", status.phase.as_deref().unwrap_or("?")),
                        ));
                    }
                };
                return Err(pod_error(
                    static_reason(&reason),
                    format!("the Pod {name} ended before its program did: {reason}: {why}"),
                ));
            }
        };
        if let Some(error) = &record.error {
            stderr.extend_from_slice(
                format!("deployster: the program could not be run in its Pod: {error}\n").as_bytes(),
            );
        }
        if let Some(reason) = container_reason.or(pod_reason) {
            stderr.extend_from_slice(format!("deployster: Kubernetes ended the container: {reason}\n").as_bytes());
        }
        let exit = exit_of(&record);
        // This executor deletes its Pods only once it stopped following them.
        if pod.metadata.deletion_timestamp.is_some() {
            return Err(pod_error(
                "PodDeleted",
                format!("the Pod {name} was deleted by someone else while its program ran (it ended with {exit})"),
            ));
        }
        Ok((exit, stdout, stderr))
    }
}

impl LogFollower<'_> {
    /// Takes one line of an invocation served by a warm runner (the exec's stdout, which has
    /// no timestamps and is never re-read): whether the record and all it names have come.
    pub fn take_served(&mut self, line: &str) -> Result<bool, ExecError> {
        self.take(line)?;
        Ok(self.complete())
    }

    /// Whether the runner said it starts the program ([`frames::begun_line`]).
    pub fn begun(&self) -> bool {
        self.split.begun
    }

    /// Whether the served invocation's record has come, whatever it names.
    pub fn has_record(&self) -> bool {
        self.split.record.is_some()
    }

    /// A served invocation's record, its exit, its verified stdout and its stderr, once the
    /// record has come ([`LogFollower::take_served`]).
    pub fn finish_served(self) -> Result<(Record, Exit, Vec<u8>, Vec<u8>), ExecError> {
        let verified = frames::reassemble(&self.split, "", self.nonce);
        let _ = self.stdout.finish();
        let mut stderr = self.stderr.finish();
        let (record, stdout) = match verified {
            Ok(read) => read,
            Err(FrameError::Lost { bytes, .. }) if bytes > self.limit as u64 => {
                return Err(ExecError::OutputTooLarge { limit: self.limit, stream: "stdout" });
            }
            Err(e) => return Err(pod_error("OutputUnverified", format!("the runner's answer: {e}"))),
        };
        if let Some(error) = &record.error {
            stderr.extend_from_slice(
                format!("deployster: the program could not be run in its runner: {error}\n").as_bytes(),
            );
        }
        let exit = exit_of(&record);
        Ok((record, exit, stdout, stderr))
    }
}

/// How the record says the program ended (127, as a shell says, when it could not be run).
fn exit_of(record: &Record) -> Exit {
    match (record.code, record.signal) {
        (Some(code), _) => Exit::Code(code),
        (None, Some(signal)) => Exit::Signal(signal),
        (None, None) => Exit::Code(127),
    }
}

/// The termination message of the Pod's `main` container: the helper's record, when it could
/// write it.
fn termination_message(pod: &Pod) -> String {
    let statuses = pod.status.as_ref().and_then(|s| s.container_statuses.as_ref());
    let main = statuses.and_then(|s| s.iter().find(|c| c.name == "main"));
    let terminated = main.and_then(|c| c.state.as_ref()).and_then(|s| s.terminated.as_ref());
    terminated.and_then(|t| t.message.clone()).unwrap_or_default()
}

/// The reasons Kubernetes gives for a Pod or container that ended early, as the executor's.
fn static_reason(reason: &str) -> &'static str {
    match reason {
        "OOMKilled" => "OOMKilled",
        "Evicted" => "Evicted",
        "DeadlineExceeded" => "DeadlineExceeded",
        "ContainerCannotRun" | "StartError" => "ContainerNotStarted",
        _ => "PodFailed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use crate::engine::typeref::TypeRef;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "dst-x"}, "status": status})).unwrap()
    }

    fn follower<'a>(invocation: &Invocation, nonce: &'a str, log: &str) -> LogFollower<'a> {
        let mut follower = LogFollower::new(nonce, 1 << 20, invocation);
        for line in log.lines() {
            follower.take(line).unwrap();
        }
        follower
    }

    /// An ended Pod whose record names output the log has not given yet is read again (the
    /// runtime copies output behind the container's exit); a complete log, a record past the
    /// bound (rotated away: no waiting brings it back), or a Pod with no record at all is not.
    #[test]
    fn output_the_record_names_but_the_log_lacks_is_still_arriving() {
        let invocation = Invocation::new(TypeRef::Builtin("x".into()), Duration::from_secs(1));
        let mut record = frames::Record::of("n1", b"{\"status\": \"VALID\"}\n", 1);
        record.code = Some(1);
        let message = serde_json::to_string(&record).unwrap();
        let ended = pod(serde_json::json!({"phase": "Failed", "containerStatuses": [{"name": "main", "image": "i",
            "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": 1, "message": message}}}]}));
        let mut log = follower(&invocation, "n1", "");
        assert!(log.still_arriving(&ended), "the record names a frame the log has not given");
        log.take(frames::frame("n1", 0, b"{\"status\": \"VALID\"}\n").trim_end()).unwrap();
        assert!(!log.still_arriving(&ended), "all there");
        assert!(log.finish(&ended, "dst-x").is_ok());

        let mut huge = frames::Record::of("n1", &[b'x'; 4096], 4);
        huge.code = Some(0);
        let rotated = pod(serde_json::json!({"phase": "Succeeded", "containerStatuses": [{"name": "main",
            "image": "i", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": 0, "message": serde_json::to_string(&huge).unwrap()}}}]}));
        assert!(!LogFollower::new("n1", 1024, &invocation).still_arriving(&rotated), "past the bound");
        let no_record = pod(serde_json::json!({"phase": "Failed", "reason": "Evicted"}));
        assert!(follower(&invocation, "n1", "").still_arriving(&no_record), "the record may be in the log yet");
        let mut silent = frames::Record::of("n1", b"", 0);
        silent.code = Some(1);
        let logged = frames::record_line(&silent);
        assert!(!follower(&invocation, "n1", &logged).still_arriving(&no_record), "the logged record is all");
    }

    /// The log's record ends the wait for a running Pod only once the output it names is all
    /// there and verifies; another invocation's record, or a frame short, does not.
    #[test]
    fn the_log_s_record_with_all_its_output_is_the_program_s_end() {
        let invocation = Invocation::new(TypeRef::Builtin("x".into()), Duration::from_secs(1));
        let (first, second) = (b"{\"status\": ".as_slice(), b"\"VALID\"}\n".as_slice());
        let mut record = frames::Record::of("n1", &[first, second].concat(), 2);
        record.code = Some(0);
        let mut log = follower(&invocation, "n1", &frames::frame("n1", 0, first));
        assert!(!log.complete(), "no record yet");
        let mut foreign = record.clone();
        foreign.nonce = "n0".into();
        log.take(frames::record_line(&foreign).trim_end()).unwrap();
        assert!(!log.complete(), "another invocation's record");
        log.take(frames::record_line(&record).trim_end()).unwrap();
        assert!(!log.complete(), "the record names a frame the log has not given");
        log.take(frames::frame("n1", 1, second).trim_end()).unwrap();
        assert!(log.complete());
        let running = pod(serde_json::json!({"phase": "Running", "containerStatuses": [{"name": "main", "image": "i",
            "imageID": "", "ready": true, "restartCount": 0, "state": {"running": {}}}]}));
        let (exit, stdout, _) = log.finish(&running, "dst-x").unwrap();
        assert_eq!((exit, stdout), (Exit::Code(0), b"{\"status\": \"VALID\"}\n".to_vec()));
    }

    #[test]
    fn kubernetes_reasons_for_an_early_end_are_the_failure() {
        let invocation = Invocation::new(TypeRef::Builtin("x".into()), Duration::from_secs(1));
        let evicted = pod(serde_json::json!({"phase": "Failed", "reason": "Evicted",
            "message": "The node was low on resource: memory."}));
        let err = follower(&invocation, "n1", "").finish(&evicted, "dst-x").unwrap_err();
        assert_eq!(err.reason(), "Evicted");
        assert!(err.to_string().contains("low on resource: memory"), "{err}");
        let oom = pod(serde_json::json!({"phase": "Failed", "containerStatuses": [{"name": "main", "image": "i",
            "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}));
        let err = follower(&invocation, "n1", "").finish(&oom, "dst-x").unwrap_err();
        assert_eq!(err.reason(), "OOMKilled");
        let mut record = frames::Record::of("n1", &[b'x'; 2048], 2);
        record.code = Some(0);
        let part = format!("{}{}", frames::frame("n1", 0, &[b'x'; 1024]), frames::record_line(&record));
        let mut small = LogFollower::new("n1", 1500, &invocation);
        for line in part.lines() {
            small.take(line).unwrap();
        }
        let done = pod(serde_json::json!({"phase": "Succeeded"}));
        let err = small.finish(&done, "dst-x").unwrap_err();
        assert!(matches!(err, ExecError::OutputTooLarge { limit: 1500, stream: "stdout" }), "past the bound: {err}");
        let silent = pod(serde_json::json!({"phase": "Failed"}));
        let err = follower(&invocation, "n1", "Container main starting").finish(&silent, "dst-x").unwrap_err();
        assert_eq!(err.reason(), "NoRecord", "placeholder log lines are never taken as output: {err}");
    }

    #[test]
    fn stdout_stderr_and_the_exit_come_back_from_the_log() {
        let invocation = Invocation::new(TypeRef::Builtin("x".into()), Duration::from_secs(1));
        let mut record = frames::Record::of("n1", b"{\"status\": \"VALID\"}\n", 1);
        record.code = Some(0);
        let log = format!(
            "checking\n{}{}",
            frames::frame("n1", 0, b"{\"status\": \"VALID\"}\n"),
            frames::record_line(&record)
        );
        let done = pod(serde_json::json!({"phase": "Succeeded"}));
        let (exit, stdout, stderr) = follower(&invocation, "n1", &log).finish(&done, "dst-x").unwrap();
        assert_eq!(
            (exit, &stdout[..], &stderr[..]),
            (Exit::Code(0), &b"{\"status\": \"VALID\"}\n"[..], &b"checking\n"[..])
        );
        let mut deleted = done.clone();
        deleted.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now()));
        let err = follower(&invocation, "n1", &log).finish(&deleted, "dst-x").unwrap_err();
        assert_eq!(err.reason(), "PodDeleted");
    }

    #[test]
    fn a_re_opened_log_starts_at_the_whole_second_before_the_last_line() {
        let last: Timestamp = "2026-11-27T02:35:56.868005508Z".parse().unwrap();
        assert_eq!(whole_second(last), "2026-11-27T02:35:56Z".parse::<Timestamp>().unwrap());
        assert_eq!(whole_second(whole_second(last)), whole_second(last));
        // The follower's next read, after a line of that late in the second: kube rounds
        // `sinceTime` to the nearest second, and given the whole one it keeps it.
        let invocation = Invocation::new(TypeRef::Builtin("x".into()), Duration::from_secs(1));
        let mut follower = follower(&invocation, "n1", "");
        follower.since = Some(last);
        let params = follower.params(true);
        let request = kube::core::Request::new("/api/v1/namespaces/ns/pods").logs("p", &params).unwrap();
        assert!(request.uri().to_string().contains("sinceTime=2026-11-27T02%3A35%3A56Z"), "{}", request.uri());
    }
}
