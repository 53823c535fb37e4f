//! A Pipeline's deployment log in the cluster: ConfigMaps it owns (`<name>-log-<n>`), each
//! holding entries as JSON lines, filled in order. Appends replace the newest with its
//! `resourceVersion` (or create the next), so two writers can never both succeed: a replica
//! whose view is stale gets a conflict, forgets it ([`Logs::forget`]) and reads the log anew.
//! Deleting the Pipeline deletes its log (owner references).
//!
//! Past [`COMPACT_AT`] ConfigMaps the log is compacted ([`crate::pipeline::compact`]): what
//! still answers something goes into the next ConfigMaps — one, or as many as it fills (runs
//! still live keep all their entries) — the last of them marked as the log's *base*
//! ([`BASE_ANNOTATION`], with how many there are) and written last, the others as its parts
//! ([`PART_ANNOTATION`]); then the ConfigMaps before them are deleted. A reader takes the
//! newest base, its parts and what follows it, skipping the parts of a base never finished, so
//! a compaction cut short leaves the log whole either way.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::{Api, Resource, ResourceExt};

use crate::crd::pipeline::Pipeline;
use crate::history::{Entry, Event, History, HistoryError, MemoryLog};

/// The label every ConfigMap of a Pipeline's log carries: the Pipeline's uid.
pub const LOG_LABEL: &str = "deployster.io/pipeline-log";

/// Bytes of entries one ConfigMap holds before the next is started (a ConfigMap may hold 1 MiB).
/// Each append rewrites the newest whole, so this bounds what one step's entries cost to write
/// (and what etcd keeps of each write until it compacts): `benches/pipeline_log.rs` measured
/// a step's append into a nearly full one at 148 ms with 512 KiB, against 5 ms into an empty one.
pub const CHUNK_BYTES: usize = 128 * 1024;

/// Marks the last ConfigMap a compaction wrote, with how many it wrote: the ConfigMaps before
/// them are no longer the log. (`true`, from before bases had parts, is one.)
pub const BASE_ANNOTATION: &str = "deployster.io/log-base";

/// Marks the other ConfigMaps a compaction wrote, with the index of the base they belong to.
pub const PART_ANNOTATION: &str = "deployster.io/log-base-part";

/// Marks the ConfigMap that was the newest when a compaction began: nothing is appended to it.
pub const SEALED_ANNOTATION: &str = "deployster.io/log-sealed";

/// How many ConfigMaps the log may fill past its base before it is compacted.
pub const COMPACT_AT: u32 = 4;

/// The most one ConfigMap of a compacted log holds (a ConfigMap may hold 1 MiB).
pub const BASE_BYTES: usize = 900 * 1024;

/// The label selector of the ConfigMaps of the log of the Pipeline with `uid`.
fn selector(uid: &str) -> String {
    format!("{LOG_LABEL}={uid}")
}

/// A log ConfigMap's place in the log, from its name (`<pipeline>-log-<n>`).
fn index_of(name: &str) -> Option<u32> {
    name.rsplit('-').next()?.parse().ok()
}

/// `entries` as the ConfigMaps hold them: JSON lines.
fn lines(entries: &[Entry]) -> String {
    let mut text = String::new();
    for entry in entries {
        text.push_str(&serde_json::to_string(entry).expect("an entry serializes"));
        text.push('\n');
    }
    text
}

/// `text` (JSON lines) cut at line ends into pieces of at most `bytes` (a longer line alone).
fn pieces(text: &str, bytes: usize) -> Vec<String> {
    let mut pieces = vec![String::new()];
    for line in text.split_inclusive('\n') {
        let last = pieces.last_mut().expect("one piece at least");
        if !last.is_empty() && last.len() + line.len() > bytes {
            pieces.push(line.to_string());
        } else {
            last.push_str(line);
        }
    }
    pieces
}

/// How many ConfigMaps the base whose last ConfigMap has `annotations` spans, if it is one.
fn base_parts(annotations: &BTreeMap<String, String>) -> Option<u32> {
    let value = annotations.get(BASE_ANNOTATION)?;
    Some(if value == "true" { 1 } else { value.parse().unwrap_or(1).max(1) })
}

/// Why the log's ConfigMaps are not a log: its base names parts that are not there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum BrokenLog {
    #[error("the base at {head} claims {parts} parts")]
    TooManyParts { head: u32, parts: u32 },
    #[error("part {part} of the log's base (ConfigMap {head}) is missing")]
    PartMissing { part: u32, head: u32 },
}

/// Which of the log's ConfigMaps (by index, with their annotations) are the log, in order: the
/// newest base's parts and what follows them; everything when there is no base. An error names
/// a part of the base that is missing.
fn the_log(chunks: &BTreeMap<u32, BTreeMap<String, String>>) -> Result<Vec<u32>, BrokenLog> {
    let base = chunks.iter().rev().find_map(|(&i, a)| Some((i, base_parts(a)?)));
    let Some((head, parts)) = base else { return Ok(chunks.keys().copied().collect()) };
    let first = (head + 1).checked_sub(parts).ok_or(BrokenLog::TooManyParts { head, parts })?;
    let of_base = |a: &BTreeMap<String, String>| a.get(PART_ANNOTATION).and_then(|v| v.parse::<u32>().ok());
    for part in first..head {
        if chunks.get(&part).and_then(of_base) != Some(head) {
            return Err(BrokenLog::PartMissing { part, head });
        }
    }
    // Parts of a base never finished (its last ConfigMap was not written) are not the log.
    Ok(chunks.range(first..).filter(|(_, a)| of_base(a).is_none_or(|b| b == head)).map(|(&i, _)| i).collect())
}

/// The newest ConfigMap: its name, resourceVersion, annotations and entries' text.
#[derive(Debug, Clone, Default)]
struct Newest {
    index: u32,
    name: String,
    resource_version: Option<String>,
    text: String,
    annotations: BTreeMap<String, String>,
}

/// Where the log stands in the cluster, as this writer last saw or wrote it.
#[derive(Debug, Clone, Default)]
struct Kept {
    newest: Option<Newest>,
    /// The index of the next ConfigMap to create: past every one there is.
    next: u32,
    /// How many ConfigMaps there are, whether part of the log or left behind.
    chunks: u32,
    /// How many of them the base spans (0 without one).
    base_parts: u32,
    /// Entries in the log.
    count: u64,
}

/// One Pipeline's log, read whole once and then appended to.
pub struct ConfigMapLog {
    api: Api<ConfigMap>,
    namespace: String,
    /// What each new ConfigMap is: its name's stem, labels, owner.
    pipeline: String,
    uid: String,
    owner: k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
    entries: MemoryLog,
    /// Lines appended and not yet written to a ConfigMap ([`ConfigMapLog::flush`]).
    unwritten: Mutex<String>,
    kept: Mutex<Kept>,
    chunk_bytes: usize,
    base_bytes: usize,
}

impl ConfigMapLog {
    /// Reads `pipeline`'s log.
    pub async fn open(client: kube::Client, pipeline: &Pipeline) -> Result<ConfigMapLog, HistoryError> {
        let namespace = pipeline.namespace().unwrap_or_default();
        let uid = pipeline.uid().unwrap_or_default();
        let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
        let shown = format!("ConfigMaps {namespace}/{}-log-*", pipeline.name_any());
        let store = |message: String| HistoryError::Store { path: shown.clone(), message };
        let listed =
            api.list(&ListParams::default().labels(&selector(&uid))).await.map_err(|e| store(e.to_string()))?;
        let mut chunks: BTreeMap<u32, ConfigMap> = BTreeMap::new();
        for config_map in listed {
            let name = config_map.name_any();
            let index = index_of(&name)
                .ok_or_else(|| store(format!("{name} is labelled as part of the log but its name has no number")))?;
            chunks.insert(index, config_map);
        }
        let annotations = chunks.iter().map(|(&i, c)| (i, c.annotations().clone())).collect();
        let order = the_log(&annotations).map_err(|e| store(e.to_string()))?;
        let mut entries = Vec::new();
        let mut newest = None;
        for index in order {
            let config_map = &chunks[&index];
            let text = config_map.data.as_ref().and_then(|d| d.get("entries")).cloned().unwrap_or_default();
            for (line, json) in text.lines().enumerate() {
                let entry: Entry = serde_json::from_str(json)
                    .map_err(|e| store(format!("{}, line {}: {e}", config_map.name_any(), line + 1)))?;
                entries.push(entry);
            }
            newest = Some(Newest {
                index,
                name: config_map.name_any(),
                resource_version: config_map.resource_version(),
                text,
                annotations: config_map.annotations().clone(),
            });
        }
        let kept = Kept {
            base_parts: annotations.values().rev().find_map(base_parts).unwrap_or(0),
            newest,
            next: chunks.keys().next_back().map_or(0, |i| i + 1),
            chunks: chunks.len() as u32,
            count: entries.len() as u64,
        };
        let owner = pipeline.controller_owner_ref(&()).expect("a Pipeline read from the API has a name and uid");
        Ok(ConfigMapLog {
            api,
            namespace,
            pipeline: pipeline.name_any(),
            uid,
            owner,
            entries: MemoryLog::from_entries(entries, None),
            unwritten: Mutex::default(),
            kept: Mutex::new(kept),
            chunk_bytes: CHUNK_BYTES,
            base_bytes: BASE_BYTES,
        })
    }

    /// Starts a new ConfigMap past `bytes` rather than [`CHUNK_BYTES`] (tests).
    pub fn with_chunk_bytes(mut self, bytes: usize) -> Self {
        self.chunk_bytes = bytes;
        self
    }

    /// Holds at most `bytes` in each ConfigMap of a compacted log rather than [`BASE_BYTES`]
    /// (tests).
    pub fn with_base_bytes(mut self, bytes: usize) -> Self {
        self.base_bytes = bytes;
        self
    }

    /// The label selector of its ConfigMaps, how many there are, and how many entries.
    pub fn where_kept(&self) -> (String, u32, u64) {
        let kept = self.kept.lock().expect("log lock");
        (selector(&self.uid), kept.chunks, kept.count)
    }

    fn kept(&self) -> Kept {
        self.kept.lock().expect("log lock").clone()
    }

    /// Writes what was appended since the last flush to the newest ConfigMap (or a new one).
    pub async fn flush(&self) -> Result<(), HistoryError> {
        let lines = std::mem::take(&mut *self.unwritten.lock().expect("log lock"));
        if lines.is_empty() {
            return Ok(());
        }
        self.write(lines).await
    }

    fn shown(&self, name: &str) -> String {
        format!("ConfigMap {}/{name}", self.namespace)
    }

    async fn write(&self, lines: String) -> Result<(), HistoryError> {
        let kept = self.kept();
        let (written, created) = match kept.newest {
            Some(mut newest) if newest.text.len() + lines.len() <= self.chunk_bytes || newest.text.is_empty() => {
                newest.text.push_str(&lines);
                newest.resource_version = self.replace(&newest).await?;
                (newest, false)
            }
            _ => (self.create(kept.next, lines, BTreeMap::new()).await?, true),
        };
        let mut kept = self.kept.lock().expect("log lock");
        if created {
            kept.next = written.index + 1;
            kept.chunks += 1;
        }
        kept.newest = Some(written);
        Ok(())
    }

    /// Writes `newest` over the ConfigMap it was read from; the new resourceVersion.
    async fn replace(&self, newest: &Newest) -> Result<Option<String>, HistoryError> {
        let mut config_map = self.chunk(newest);
        config_map.metadata.resource_version = newest.resource_version.clone();
        let replaced = self
            .api
            .replace(&newest.name, &PostParams::default(), &config_map)
            .await
            .map_err(|e| self.failed(&self.shown(&newest.name), e))?;
        Ok(replaced.resource_version())
    }

    /// Creates ConfigMap `index` of the log, holding `text`.
    async fn create(
        &self,
        index: u32,
        text: String,
        annotations: BTreeMap<String, String>,
    ) -> Result<Newest, HistoryError> {
        let name = format!("{}-log-{index}", self.pipeline);
        let mut newest = Newest { index, name, resource_version: None, text, annotations };
        let created = self
            .api
            .create(&PostParams::default(), &self.chunk(&newest))
            .await
            .map_err(|e| self.failed(&self.shown(&newest.name), e))?;
        newest.resource_version = created.resource_version();
        Ok(newest)
    }

    fn chunk(&self, newest: &Newest) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(newest.name.clone()),
                labels: Some([(LOG_LABEL.to_string(), self.uid.clone())].into()),
                annotations: (!newest.annotations.is_empty()).then(|| newest.annotations.clone()),
                owner_references: Some(vec![self.owner.clone()]),
                ..Default::default()
            },
            data: Some([("entries".to_string(), newest.text.clone())].into()),
            ..Default::default()
        }
    }

    /// Compacts the log once it fills [`COMPACT_AT`] ConfigMaps past its base (see the module's
    /// documentation); whether it did.
    pub async fn compact(&self, pipeline: &crate::pipeline::spec::Pipeline) -> Result<bool, HistoryError> {
        let kept = self.kept();
        if kept.chunks < kept.base_parts.max(1) + COMPACT_AT {
            return Ok(false);
        }
        let compacted = crate::pipeline::compact::compact(pipeline, &self.entries.entries());
        let parts = pieces(&lines(&compacted), self.base_bytes);
        if parts.len() as u32 >= kept.chunks {
            tracing::warn!(
                pipeline = %format!("{}/{}", self.namespace, self.pipeline),
                "the pipeline's log, compacted, would fill {} ConfigMaps, no fewer than the {} it fills: left as it is \
                 until runs end",
                parts.len(),
                kept.chunks
            );
            return Ok(false);
        }
        // Sealed first: a stale writer's append to it (which no reader would see once the base
        // is there) is refused from here on, and this compaction is refused if one came first.
        if let Some(previous) = &kept.newest {
            let mut sealed = previous.clone();
            sealed.annotations.insert(SEALED_ANNOTATION.into(), "true".into());
            self.replace(&sealed).await?;
        }
        // The parts first, the base's last ConfigMap last: until it is there, readers skip them.
        let (first, count) = (kept.next, parts.len() as u32);
        let head = first + count - 1;
        let mut base = None;
        for (index, text) in (first..).zip(parts) {
            let mark =
                if index == head { (BASE_ANNOTATION, count.to_string()) } else { (PART_ANNOTATION, head.to_string()) };
            base = Some(self.create(index, text, [(mark.0.to_string(), mark.1)].into()).await?);
        }
        let left = self.delete_before(first).await;
        *self.kept.lock().expect("log lock") = Kept {
            newest: base,
            next: head + 1,
            chunks: count + left,
            base_parts: count,
            count: compacted.len() as u64,
        };
        self.entries.replace(compacted);
        Ok(true)
    }

    /// Deletes the log's ConfigMaps before index `first`, no longer read; how many could not be
    /// (they go with the next compaction, or with the Pipeline).
    async fn delete_before(&self, first: u32) -> u32 {
        let listed = self.api.list_metadata(&ListParams::default().labels(&selector(&self.uid))).await;
        let mut left = 0;
        for old in listed.map(|l| l.items).unwrap_or_default() {
            let name = old.name_any();
            if index_of(&name).is_none_or(|i| i >= first) {
                continue;
            }
            if let Err(e) = self.api.delete(&name, &Default::default()).await {
                tracing::warn!(config_map = %name, "could not delete a compacted part of a pipeline's log: {e}");
                left += 1;
            }
        }
        left
    }

    /// Whether the ConfigMaps are still as this log last wrote them: its newest unchanged (an
    /// append or a compaction's seal changes it) and none after it (an append that started a
    /// new one). Two reads of metadata by name, however long the log.
    async fn is_current(&self) -> Result<bool, kube::Error> {
        let kept = self.kept();
        let next = format!("{}-log-{}", self.pipeline, kept.next);
        let unchanged = async {
            let Some(newest) = &kept.newest else { return Ok(true) };
            let now = self.api.get_metadata_opt(&newest.name).await?;
            Ok::<_, kube::Error>(now.is_some_and(|m| m.resource_version() == newest.resource_version))
        };
        let (unchanged, next) = tokio::join!(unchanged, self.api.get_metadata_opt(&next));
        Ok(unchanged? && next?.is_none())
    }

    fn failed(&self, shown: &str, e: kube::Error) -> HistoryError {
        let message = match &e {
            // 404: a compaction by another writer deleted the ConfigMap this one appended to.
            kube::Error::Api(status) if status.code == 409 || status.code == 404 => format!(
                "{e}: another writer changed the log (a second controller replica?); nothing of this append was kept, \
                 and the log is read anew on the next reconcile"
            ),
            _ => e.to_string(),
        };
        HistoryError::Store { path: shown.to_string(), message }
    }
}

impl History for ConfigMapLog {
    /// Appends in memory, at once (what reads the log sees it); the entries are written to a
    /// ConfigMap, in order, by the next [`ConfigMapLog::flush`]. A reconcile flushes before it
    /// writes the status; one that fails to flush forgets the log, so that the next reads what
    /// the ConfigMaps hold and redoes what was lost (a step recorded as ended is never run again;
    /// one whose start was lost is started again, which is idempotent).
    fn append(&self, entries: &[Entry]) -> Result<(), HistoryError> {
        self.entries.append(entries)?;
        self.unwritten.lock().expect("log lock").push_str(&lines(entries));
        self.kept.lock().expect("log lock").count += entries.len() as u64;
        Ok(())
    }

    fn latest(&self, target: &str, events: &[Event]) -> Result<Option<Entry>, HistoryError> {
        self.entries.latest(target, events)
    }

    fn open(&self, prefix: &str) -> Result<Vec<Entry>, HistoryError> {
        self.entries.open(prefix)
    }

    fn recent(&self, prefix: &str, limit: usize) -> Result<Vec<Entry>, HistoryError> {
        self.entries.recent(prefix, limit)
    }
}

/// The logs of the Pipelines this replica drives, by uid: read once, then kept in step with
/// what it appends. A log that failed to append is forgotten, so the next reconcile reads it.
#[derive(Default)]
pub struct Logs(Mutex<BTreeMap<String, Arc<ConfigMapLog>>>);

impl Logs {
    /// The log of `pipeline`: the one kept, when its ConfigMaps are still as this replica last
    /// wrote them ([`ConfigMapLog::is_current`]), else read anew.
    pub async fn get(&self, client: kube::Client, pipeline: &Pipeline) -> Result<Arc<ConfigMapLog>, HistoryError> {
        let uid = pipeline.uid().unwrap_or_default();
        let kept = self.0.lock().expect("logs lock").get(&uid).cloned();
        if let Some(log) = kept {
            let current = log.is_current().await.map_err(|e| HistoryError::Store {
                path: format!("the log of Pipeline {}", log.pipeline),
                message: e.to_string(),
            })?;
            if current {
                return Ok(log);
            }
        }
        let log = Arc::new(ConfigMapLog::open(client, pipeline).await?);
        self.0.lock().expect("logs lock").insert(uid, log.clone());
        Ok(log)
    }

    pub fn forget(&self, pipeline: &Pipeline) {
        self.0.lock().expect("logs lock").remove(&pipeline.uid().unwrap_or_default());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_cut_at_line_ends_into_pieces_of_at_most_the_bound() {
        assert_eq!(pieces("a\nbb\ncc\n", 5), ["a\nbb\n", "cc\n"]);
        assert_eq!(pieces("a\nlong line\nb\n", 4), ["a\n", "long line\n", "b\n"], "a longer line alone");
        assert_eq!(pieces("", 4), [""]);
    }

    #[test]
    fn the_log_is_the_newest_finished_base_its_parts_and_what_follows() {
        let mark = |key: &str, value: &str| BTreeMap::from([(key.to_string(), value.to_string())]);
        let plain = BTreeMap::new;
        let log = |chunks: Vec<(u32, BTreeMap<String, String>)>| the_log(&chunks.into_iter().collect());
        assert_eq!(log(vec![(0, plain()), (1, plain()), (2, plain())]), Ok(vec![0, 1, 2]), "no base: all");
        let old_style = vec![(0, plain()), (3, mark(BASE_ANNOTATION, "true")), (4, plain())];
        assert_eq!(log(old_style), Ok(vec![3, 4]), "a base from before parts is one ConfigMap");
        let mut chunks = vec![
            (2, mark(BASE_ANNOTATION, "1")),
            (3, plain()),
            (4, mark(PART_ANNOTATION, "6")),
            (5, mark(PART_ANNOTATION, "6")),
            (6, mark(BASE_ANNOTATION, "3")),
            (7, mark(SEALED_ANNOTATION, "true")),
        ];
        assert_eq!(log(chunks.clone()), Ok(vec![4, 5, 6, 7]));
        // A compaction cut short wrote parts 8 and 9 but not its base 10; an append went on
        // past them.
        chunks.extend([(8, mark(PART_ANNOTATION, "10")), (9, mark(PART_ANNOTATION, "10")), (11, plain())]);
        assert_eq!(log(chunks.clone()), Ok(vec![4, 5, 6, 7, 11]), "the unfinished base's parts are skipped");
        chunks.retain(|(i, _)| *i != 5);
        let missing = log(chunks).unwrap_err();
        assert_eq!(missing.to_string(), "part 5 of the log's base (ConfigMap 6) is missing");
    }
}
