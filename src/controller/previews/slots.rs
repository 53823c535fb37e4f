//! How many previews plan at once in each namespace: a slot each, given back when dropped.

use std::collections::HashMap;
use std::sync::Mutex;

/// The previews planning now, by namespace.
#[derive(Debug, Default)]
pub struct Slots(Mutex<HashMap<String, usize>>);

/// A slot taken in a namespace, given back when dropped.
pub struct Taken<'a> {
    slots: &'a Slots,
    namespace: String,
}

impl Slots {
    /// A slot in `namespace`, unless `limit` previews plan there already.
    pub fn take(&self, namespace: &str, limit: usize) -> Option<Taken<'_>> {
        let mut taken = self.0.lock().expect("slots lock");
        let count = taken.entry(namespace.to_string()).or_default();
        if *count >= limit {
            return None;
        }
        *count += 1;
        Some(Taken { slots: self, namespace: namespace.to_string() })
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        if let Some(count) = self.slots.0.lock().expect("slots lock").get_mut(&self.namespace) {
            *count = count.saturating_sub(1);
        }
    }
}
