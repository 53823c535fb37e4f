//! The replicas of one controller and who reconciles what: one leader elected by a Lease
//! (`leader`), or members sharing the objects over shard Leases (`shards`), and `ownership`,
//! which answers for either whether this replica may reconcile an object now, and under which
//! term (a pass runs under its ticket; losing the term cancels it).

pub mod fence;
pub mod leader;
pub mod ownership;
pub mod shards;
