//! What a replica should do with the shards, given one reading of the group's Leases: a pure
//! function, so that every rule of the hand-over is tested without a cluster.
//!
//! The rules, in order:
//! 1. A shard this replica holds whose Lease names another is dropped at once (a hand edit, or
//!    a replica that judged ours dead): its passes are cancelled, nothing is written.
//! 2. The *group* is the live members with the settings of the oldest live member. A replica
//!    with other settings (another shard count, other namespaces, another lease duration) takes
//!    nothing and releases what it holds: two shard maps at once could give one object to two
//!    replicas. When the old settings' members are gone (a rolling upgrade), the new ones take
//!    over.
//! 3. Each member of the group is due `count / members` shards, the first `count % members`
//!    of them (by identity) one more: balanced by count.
//! 4. Above its due, a replica hands over the excess (after its passes on them ended); below it,
//!    it takes free shards. A shard is free when its Lease is missing or released (no holder),
//!    or when its holder is no live member *and* the Lease has gone unchanged for a lease
//!    duration by this replica's own clock — so that neither a clock skewed elsewhere nor a
//!    member Lease deleted by hand hands a working replica's shard to another.

use std::collections::BTreeSet;

/// One member Lease as read: a replica that announced itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub identity: String,
    /// The fingerprint of its shard settings ([`super::ShardSettings::fingerprint`]).
    pub settings: String,
    /// When it joined, to tell the oldest member (whose settings rule): its member Lease's
    /// `creationTimestamp` by the API server's clock (whole seconds), then, within one second, the
    /// Lease's `acquireTime` in microseconds by the member's own clock.
    pub joined: (i64, i64),
    /// Renewed within a lease duration, by this replica's clock.
    pub alive: bool,
}

/// One shard Lease as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardLease {
    pub index: u32,
    /// `None`: released, or the Lease is gone.
    pub holder: Option<String>,
    /// Unchanged for a lease duration, by this replica's clock.
    pub quiet: bool,
    /// Seen, then deleted (by hand, or by the garbage collector with the member Lease that owned
    /// it): its holder may still be at work until it notices, so it is free once quiet, as an
    /// edited Lease is. (A Lease never seen is free at once.)
    pub gone: bool,
}

/// Everything one reading found.
#[derive(Debug, Clone, Default)]
pub struct Reading {
    pub members: Vec<Member>,
    /// Missing indices have no Lease yet.
    pub shards: Vec<ShardLease>,
}

/// What to do now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Moves {
    /// Held here but named to another by its Lease: stop at once.
    pub drop: Vec<u32>,
    /// Held here beyond the due: hand over once their passes ended.
    pub release: Vec<u32>,
    /// Free: try to take.
    pub take: Vec<u32>,
    /// This replica's due (0 while it waits for other settings to go).
    pub due: u32,
    /// Members in the group.
    pub members: u32,
    /// Why this replica takes nothing, when it does not.
    pub waiting: Option<String>,
}

/// Decides, for the replica `me` with settings `settings` that holds `held` of `count` shards.
pub fn decide(me: &str, settings: &str, held: &BTreeSet<u32>, count: u32, reading: &Reading) -> Moves {
    let holder_of = |index: u32| reading.shards.iter().find(|s| s.index == index);
    let drop: Vec<u32> =
        held.iter().copied().filter(|&i| holder_of(i).is_none_or(|s| s.holder.as_deref() != Some(me))).collect();
    let kept: BTreeSet<u32> = held.iter().copied().filter(|i| !drop.contains(i)).collect();

    let mut live: Vec<&Member> = reading.members.iter().filter(|m| m.alive || m.identity == me).collect();
    live.sort_by(|a, b| (a.joined, &a.identity).cmp(&(b.joined, &b.identity)));
    let ruling = live.first().map_or(settings, |m| m.settings.as_str());
    if ruling != settings {
        let oldest = live.first().map(|m| m.identity.as_str()).unwrap_or_default();
        let waiting = format!(
            "waiting: replica {oldest} runs with other shard settings ({ruling}); this one has {settings} \
             and takes no shard until every replica with those settings is gone"
        );
        return Moves { drop, release: kept.into_iter().collect(), waiting: Some(waiting), ..Default::default() };
    }
    let mut group: Vec<&str> = live.iter().filter(|m| m.settings == settings).map(|m| m.identity.as_str()).collect();
    if !group.contains(&me) {
        group.push(me);
    }
    group.sort_unstable();
    let position = group.iter().position(|m| *m == me).unwrap_or_default() as u32;
    let members = group.len() as u32;
    let due = count / members + u32::from(position < count % members);

    let release: Vec<u32> = kept.iter().rev().take(kept.len().saturating_sub(due as usize)).copied().collect();
    let wanted = (due as usize).saturating_sub(kept.len());
    let alive = |identity: &str| identity != me && live.iter().any(|m| m.identity == identity);
    let free = |index: u32| match holder_of(index) {
        None => true,
        Some(ShardLease { gone: true, quiet, .. }) => *quiet,
        Some(ShardLease { holder: None, .. }) => true,
        Some(ShardLease { holder: Some(h), quiet, .. }) => !kept.contains(&index) && !alive(h) && *quiet,
    };
    // Each member starts looking at its own place, so that several taking at once seldom race
    // for the same Lease.
    let start = position * count / members.max(1);
    let take = (0..count).map(|i| (start + i) % count).filter(|&i| free(i)).take(wanted).collect();
    Moves { drop, release, take, due, members, waiting: None }
}

/// The shard of the object `namespace/name`: FNV-1a (64 bits) of that text, modulo `count`.
/// Spelled out, not `std`'s hasher, whose output may change between Rust releases: two
/// replicas built apart (a rolling upgrade) must agree on every object's shard.
pub fn shard_of(namespace: &str, name: &str, count: u32) -> u32 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0100_0000_01b3;
    let bytes = namespace.bytes().chain(std::iter::once(b'/')).chain(name.bytes());
    let hash = bytes.fold(OFFSET, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(PRIME));
    (hash % u64::from(count.max(1))) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(identity: &str, joined: i64) -> Member {
        Member { identity: identity.into(), settings: "s30".into(), joined: (joined, 0), alive: true }
    }

    fn held_by(index: u32, holder: &str) -> ShardLease {
        ShardLease { index, holder: Some(holder.into()), quiet: true, gone: false }
    }

    fn set(indices: impl IntoIterator<Item = u32>) -> BTreeSet<u32> {
        indices.into_iter().collect()
    }

    #[test]
    fn the_first_replica_takes_every_shard_and_a_second_is_handed_half() {
        let alone = Reading { members: vec![member("a", 1)], shards: Vec::new() };
        let decision = decide("a", "s30", &set([]), 6, &alone);
        assert_eq!((decision.due, decision.take.len()), (6, 6), "{decision:?}");

        let shards = (0..6).map(|i| held_by(i, "a")).collect();
        let two = Reading { members: vec![member("a", 1), member("b", 2)], shards };
        let a = decide("a", "s30", &set(0..6), 6, &two);
        assert_eq!((a.due, a.release.clone(), a.take.clone()), (3, vec![5, 4, 3], vec![]), "{a:?}");
        let b = decide("b", "s30", &set([]), 6, &two);
        assert_eq!((b.due, b.take.len()), (3, 0), "b waits for a's hand-over: nothing is free yet");

        let mut handed = two.clone();
        for i in 3..6 {
            handed.shards[i as usize].holder = None;
        }
        let b = decide("b", "s30", &set([]), 6, &handed);
        assert_eq!(b.take, vec![3, 4, 5]);
    }

    #[test]
    fn dues_are_balanced_by_count_and_agree_between_members() {
        let members: Vec<Member> = ["c", "a", "b"].iter().map(|m| member(m, 1)).collect();
        let reading = Reading { members, shards: Vec::new() };
        let dues: Vec<u32> = ["a", "b", "c"].iter().map(|m| decide(m, "s30", &set([]), 31, &reading).due).collect();
        assert_eq!(dues, vec![11, 10, 10]);
        assert_eq!(dues.iter().sum::<u32>(), 31, "every shard is due to exactly one member");
        let more_members_than_shards = decide("c", "s30", &set([]), 2, &reading);
        assert_eq!(more_members_than_shards.due, 0);
    }

    #[test]
    fn a_dead_holder_s_shard_is_free_only_once_its_lease_has_gone_quiet() {
        let dead = Member { alive: false, ..member("gone", 0) };
        let mut reading = Reading { members: vec![dead, member("a", 1)], shards: vec![held_by(0, "gone")] };
        reading.shards[0].quiet = false;
        assert_eq!(decide("a", "s30", &set([]), 1, &reading).take, Vec::<u32>::new(), "changed lately: wait");
        reading.shards[0].quiet = true;
        assert_eq!(decide("a", "s30", &set([]), 1, &reading).take, vec![0]);
        // A live holder keeps it however quiet its Lease (shard Leases are not renewed).
        reading.members[0].alive = true;
        reading.members.push(member("b", 2));
        assert_eq!(decide("b", "s30", &set([]), 1, &reading).take, Vec::<u32>::new());
    }

    /// A hand edit that names another replica stops this one at once; one naming this replica
    /// without its claim gives it nothing until the Lease has gone quiet.
    #[test]
    fn a_lease_edited_by_hand_stops_its_holder_and_gives_nothing_at_once() {
        let mut reading =
            Reading { members: vec![member("a", 1), member("b", 2)], shards: vec![held_by(0, "intruder")] };
        let a = decide("a", "s30", &set([0]), 2, &reading);
        assert_eq!(a.drop, vec![0]);
        reading.shards =
            vec![ShardLease { index: 0, holder: Some("b".into()), quiet: false, gone: false }, held_by(1, "a")];
        let b = decide("b", "s30", &set([]), 2, &reading);
        assert!(b.take.is_empty(), "a Lease naming b that b never took is b's only once quiet: {b:?}");
        reading.shards[0].quiet = true;
        assert_eq!(decide("b", "s30", &set([]), 2, &reading).take, vec![0]);
    }

    #[test]
    fn a_replica_with_other_settings_waits_for_the_oldest_settings_to_go() {
        let old = member("a", 1_767_225_600);
        let new = Member { settings: "s60".into(), ..member("b", 1_767_312_000) };
        let reading = Reading { members: vec![new.clone(), old.clone()], shards: vec![held_by(0, "a")] };
        let b = decide("b", "s60", &set([]), 2, &reading);
        assert_eq!((b.due, b.take.len()), (0, 0));
        assert!(b.waiting.as_deref().unwrap().contains("replica a runs with other shard settings (s30)"), "{b:?}");
        let a = decide("a", "s30", &set([0]), 2, &reading);
        assert_eq!((a.due, a.take.clone(), a.waiting.clone()), (2, vec![1], None), "the old group goes on alone");

        let mut after = Reading { members: vec![new, Member { alive: false, ..old }], shards: vec![held_by(0, "a")] };
        after.shards[0].quiet = false;
        let b = decide("b", "s60", &set([]), 2, &after);
        assert_eq!((b.due, b.take.clone()), (2, vec![1]), "a's shard 0 only once its Lease has gone quiet");
        after.shards[0].quiet = true;
        assert_eq!(decide("b", "s60", &set([]), 2, &after).take, vec![0, 1]);
    }

    #[test]
    fn a_shard_lease_deleted_under_its_holder_is_dropped_and_free_only_once_quiet() {
        let gone = ShardLease { holder: None, quiet: false, gone: true, ..held_by(0, "a") };
        let mut reading =
            Reading { members: vec![member("a", 1), member("b", 2)], shards: vec![gone, held_by(1, "b")] };
        let a = decide("a", "s30", &set([0]), 2, &reading);
        assert_eq!((a.drop.clone(), a.take.clone()), (vec![0], vec![]), "a stops at once and takes nothing yet: {a:?}");
        reading.shards[0].quiet = true;
        assert_eq!(decide("a", "s30", &set([]), 2, &reading).take, vec![0]);
    }

    #[test]
    fn within_one_second_the_earlier_acquire_time_is_the_older_member() {
        // Both member Leases created in the same second by the API server's clock: "z" acquired
        // its Lease first, so its settings rule although "a" sorts first by name.
        let z = Member { joined: (1_767_225_600, 800_000), ..member("z", 0) };
        let a = Member { settings: "s60".into(), joined: (1_767_225_600, 990_000), ..member("a", 0) };
        let reading = Reading { members: vec![a, z], shards: Vec::new() };
        assert!(decide("a", "s60", &set([]), 2, &reading).waiting.is_some());
        assert_eq!(decide("z", "s30", &set([]), 2, &reading).take, vec![0, 1]);
    }

    #[test]
    fn shards_of_objects_are_fixed_and_spread() {
        assert_eq!(shard_of("default", "web", 30), shard_of("default", "web", 30));
        // Pinned: a change here would move objects between replicas of different versions.
        assert_eq!(shard_of("default", "web", 1_000_003), 84_137);
        let mut counts = [0u32; 30];
        for i in 0..3000 {
            counts[shard_of("team", &format!("manifest-{i}"), 30) as usize] += 1;
        }
        let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        assert!(*min >= 70 && *max <= 135, "3000 objects over 30 shards: {counts:?}");
    }
}
