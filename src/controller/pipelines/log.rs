//! A Pipeline's deployment log in the cluster: ConfigMaps it owns (`<name>-log-<n>`), each
//! holding entries as JSON lines, filled in order. Appends replace the newest with its
//! `resourceVersion` (or create the next), so two writers can never both succeed: a replica
//! whose view is stale gets a conflict, forgets it ([`Logs::forget`]) and reads the log anew.
//! Deleting the Pipeline deletes its log (owner references).
//!
//! Past [`COMPACT_AT`] ConfigMaps the log is compacted ([`crate::pipeline::compact`]): what
//! still answers something goes whole into the next ConfigMap, marked as the log's *base*
//! ([`BASE_ANNOTATION`]), and the ConfigMaps before it are deleted. A reader takes the newest
//! base and what follows it, so a compaction cut short leaves the log whole either way.

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

/// Marks the ConfigMap a compaction wrote: the ConfigMaps before it are no longer the log.
pub const BASE_ANNOTATION: &str = "deployster.io/log-base";

/// Marks the ConfigMap that was the newest when a compaction began: nothing is appended to it.
pub const SEALED_ANNOTATION: &str = "deployster.io/log-sealed";

/// How many ConfigMaps the log may fill before it is compacted.
pub const COMPACT_AT: u32 = 4;

/// The most a compacted log may hold in its one ConfigMap (which may hold 1 MiB); past it the
/// log is left as it is and a warning says so.
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

/// The newest ConfigMap: its name, resourceVersion and entries' text.
#[derive(Debug, Clone, Default)]
struct Newest {
    index: u32,
    name: String,
    resource_version: Option<String>,
    text: String,
    /// Written by a compaction.
    base: bool,
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
    newest: Mutex<Option<Newest>>,
    chunks: Mutex<u32>,
    count: Mutex<u64>,
    chunk_bytes: usize,
}

impl ConfigMapLog {
    /// Reads `pipeline`'s log.
    pub async fn open(client: kube::Client, pipeline: &Pipeline) -> Result<ConfigMapLog, HistoryError> {
        let namespace = pipeline.namespace().unwrap_or_default();
        let uid = pipeline.uid().unwrap_or_default();
        let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
        let shown = format!("ConfigMaps {namespace}/{}-log-*", pipeline.name_any());
        let listed = api
            .list(&ListParams::default().labels(&selector(&uid)))
            .await
            .map_err(|e| HistoryError::Store { path: shown.clone(), message: e.to_string() })?;
        let mut chunks: BTreeMap<u32, ConfigMap> = BTreeMap::new();
        for config_map in listed {
            let name = config_map.name_any();
            let index = index_of(&name).ok_or_else(|| HistoryError::Store {
                path: shown.clone(),
                message: format!("{name} is labelled as part of the log but its name has no number"),
            })?;
            chunks.insert(index, config_map);
        }
        // What a compaction left behind it is not the log (but is counted: it is listed).
        let listed = chunks.len() as u32;
        let is_base = |c: &ConfigMap| c.annotations().contains_key(BASE_ANNOTATION);
        if let Some(base) = chunks.iter().rev().find(|(_, c)| is_base(c)).map(|(i, _)| *i) {
            chunks.retain(|&i, _| i >= base);
        }
        let mut entries = Vec::new();
        let mut newest = None;
        for (index, config_map) in &chunks {
            let text = config_map.data.as_ref().and_then(|d| d.get("entries")).cloned().unwrap_or_default();
            for (line, json) in text.lines().enumerate() {
                let entry: Entry = serde_json::from_str(json).map_err(|e| HistoryError::Store {
                    path: shown.clone(),
                    message: format!("{}, line {}: {e}", config_map.name_any(), line + 1),
                })?;
                entries.push(entry);
            }
            newest = Some(Newest {
                index: *index,
                name: config_map.name_any(),
                resource_version: config_map.resource_version(),
                text,
                base: is_base(config_map),
            });
        }
        let owner = pipeline.controller_owner_ref(&()).expect("a Pipeline read from the API has a name and uid");
        let count = entries.len() as u64;
        Ok(ConfigMapLog {
            api,
            namespace,
            pipeline: pipeline.name_any(),
            uid,
            owner,
            entries: MemoryLog::from_entries(entries, None),
            newest: Mutex::new(newest),
            chunks: Mutex::new(listed),
            count: Mutex::new(count),
            chunk_bytes: CHUNK_BYTES,
        })
    }

    /// Starts a new ConfigMap past `bytes` rather than [`CHUNK_BYTES`] (tests).
    pub fn with_chunk_bytes(mut self, bytes: usize) -> Self {
        self.chunk_bytes = bytes;
        self
    }

    /// The label selector of its ConfigMaps, how many there are, and how many entries.
    pub fn where_kept(&self) -> (String, u32, u64) {
        (selector(&self.uid), *self.chunks.lock().expect("log lock"), *self.count.lock().expect("log lock"))
    }

    async fn write(&self, lines: String) -> Result<(), HistoryError> {
        let newest = self.newest.lock().expect("log lock").clone();
        let shown = |name: &str| format!("ConfigMap {}/{name}", self.namespace);
        let written = match newest {
            Some(mut newest) if newest.text.len() + lines.len() <= self.chunk_bytes || newest.text.is_empty() => {
                newest.text.push_str(&lines);
                let mut config_map = self.chunk(&newest);
                config_map.metadata.resource_version = newest.resource_version.clone();
                let replaced = self
                    .api
                    .replace(&newest.name, &PostParams::default(), &config_map)
                    .await
                    .map_err(|e| self.failed(&shown(&newest.name), e))?;
                newest.resource_version = replaced.resource_version();
                newest
            }
            previous => {
                let index = previous.map_or(0, |p| p.index + 1);
                let mut newest = Newest {
                    index,
                    name: format!("{}-log-{index}", self.pipeline),
                    resource_version: None,
                    text: lines,
                    base: false,
                };
                let created = self
                    .api
                    .create(&PostParams::default(), &self.chunk(&newest))
                    .await
                    .map_err(|e| self.failed(&shown(&newest.name), e))?;
                newest.resource_version = created.resource_version();
                *self.chunks.lock().expect("log lock") += 1;
                newest
            }
        };
        *self.newest.lock().expect("log lock") = Some(written);
        Ok(())
    }

    fn chunk(&self, newest: &Newest) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(newest.name.clone()),
                labels: Some([(LOG_LABEL.to_string(), self.uid.clone())].into()),
                annotations: newest.base.then(|| [(BASE_ANNOTATION.to_string(), "true".to_string())].into()),
                owner_references: Some(vec![self.owner.clone()]),
                ..Default::default()
            },
            data: Some([("entries".to_string(), newest.text.clone())].into()),
            ..Default::default()
        }
    }

    /// Compacts the log once it fills more than [`COMPACT_AT`] ConfigMaps (see the module's
    /// documentation); whether it did.
    pub async fn compact(&self, pipeline: &crate::pipeline::spec::Pipeline) -> Result<bool, HistoryError> {
        if *self.chunks.lock().expect("log lock") <= COMPACT_AT {
            return Ok(false);
        }
        let kept = crate::pipeline::compact::compact(pipeline, &self.entries.entries());
        let text = lines(&kept);
        if text.len() > BASE_BYTES {
            tracing::warn!(
                pipeline = %format!("{}/{}", self.namespace, self.pipeline),
                "the pipeline's log, compacted, is {} bytes, more than one ConfigMap holds ({BASE_BYTES}): left as it is",
                text.len()
            );
            return Ok(false);
        }
        let previous = self.newest.lock().expect("log lock").clone();
        // Sealed first: a stale writer's append to it (which no reader would see once the base
        // is there) is refused from here on, and this compaction is refused if one came first.
        if let Some(previous) = &previous {
            let mut sealed = self.chunk(previous);
            sealed.metadata.resource_version = previous.resource_version.clone();
            sealed.metadata.annotations.get_or_insert_default().insert(SEALED_ANNOTATION.into(), "true".into());
            let shown = format!("ConfigMap {}/{}", self.namespace, previous.name);
            self.api
                .replace(&previous.name, &PostParams::default(), &sealed)
                .await
                .map_err(|e| self.failed(&shown, e))?;
        }
        let index = previous.map_or(0, |p| p.index + 1);
        let mut base =
            Newest { index, name: format!("{}-log-{index}", self.pipeline), resource_version: None, text, base: true };
        let shown = format!("ConfigMap {}/{}", self.namespace, base.name);
        let created =
            self.api.create(&PostParams::default(), &self.chunk(&base)).await.map_err(|e| self.failed(&shown, e))?;
        base.resource_version = created.resource_version();
        let count = kept.len() as u64;
        *self.newest.lock().expect("log lock") = Some(base);
        self.entries.replace(kept);
        *self.count.lock().expect("log lock") = count;
        // What is before the base is no longer read; one left (a deletion that failed) goes with
        // the next compaction, or with the Pipeline.
        let listed = self.api.list_metadata(&ListParams::default().labels(&selector(&self.uid))).await;
        let mut left = 1;
        for old in listed.map(|l| l.items).unwrap_or_default() {
            let name = old.name_any();
            let older = index_of(&name).is_some_and(|i| i < index);
            if !older {
                continue;
            }
            if let Err(e) = self.api.delete(&name, &Default::default()).await {
                tracing::warn!(config_map = %name, "could not delete a compacted part of a pipeline's log: {e}");
                left += 1;
            }
        }
        *self.chunks.lock().expect("log lock") = left;
        Ok(true)
    }

    /// Whether the ConfigMaps are still as this log last wrote them: its newest unchanged (an
    /// append or a compaction's seal changes it) and none after it (an append that started a
    /// new one). Two reads of metadata by name, however long the log.
    async fn is_current(&self) -> Result<bool, kube::Error> {
        let newest = self.newest.lock().expect("log lock").clone();
        let next = format!("{}-log-{}", self.pipeline, newest.as_ref().map_or(0, |n| n.index + 1));
        let unchanged = async {
            let Some(newest) = &newest else { return Ok(true) };
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
    /// Appends durably: the ConfigMap is written before this returns. The driver calls it from
    /// a multi-threaded runtime (the controller's), whose worker it blocks meanwhile, as a
    /// SQLite write would.
    fn append(&self, entries: &[Entry]) -> Result<(), HistoryError> {
        let lines = lines(entries);
        let handle = tokio::runtime::Handle::try_current()
            .ok()
            .filter(|h| matches!(h.runtime_flavor(), tokio::runtime::RuntimeFlavor::MultiThread));
        let Some(handle) = handle else {
            return Err(HistoryError::Store {
                path: format!("the log of Pipeline {}", self.pipeline),
                message: "appends need a multi-threaded Tokio runtime".into(),
            });
        };
        tokio::task::block_in_place(|| handle.block_on(self.write(lines)))?;
        self.entries.append(entries)?;
        *self.count.lock().expect("log lock") += entries.len() as u64;
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
