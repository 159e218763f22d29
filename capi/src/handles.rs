//! Opaque handles (`HcclComm`, `aclrtStream`, `aclrtEvent`): C gets a
//! number, never a Rust pointer, so a stale, foreign or garbage handle is
//! looked up and refused with an error code instead of dereferenced.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Every handle of every kind comes from one counter, so a stream's
/// handle is never also a communicator's. Starts high and steps by 16 so
/// that handles look like (aligned) pointers and small integers are not
/// handles.
static NEXT: AtomicUsize = AtomicUsize::new(0x4843_0000);

/// The live objects of one kind, by handle.
pub(crate) struct Handles<T> {
    map: Mutex<Option<HashMap<usize, Arc<T>>>>,
}

impl<T> Handles<T> {
    /// An empty table.
    pub(crate) const fn new() -> Handles<T> {
        Handles {
            map: Mutex::new(None),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<HashMap<usize, Arc<T>>>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers `v`; returns its handle.
    pub(crate) fn insert(&self, v: Arc<T>) -> *mut c_void {
        let h = NEXT.fetch_add(16, Ordering::Relaxed);
        self.lock().get_or_insert_with(HashMap::new).insert(h, v);
        h as *mut c_void
    }

    /// The object of handle `h`.
    pub(crate) fn get(&self, h: *mut c_void) -> Option<Arc<T>> {
        self.lock().as_ref()?.get(&(h as usize)).cloned()
    }

    /// Unregisters handle `h`, returning its object.
    pub(crate) fn remove(&self, h: *mut c_void) -> Option<Arc<T>> {
        self.lock().as_mut()?.remove(&(h as usize))
    }

    /// Every live object.
    pub(crate) fn all(&self) -> Vec<Arc<T>> {
        self.lock()
            .as_ref()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_is_found_until_removed_and_others_are_not() {
        static H: Handles<u32> = Handles::new();
        let h = H.insert(Arc::new(7));
        assert_eq!(H.get(h).as_deref(), Some(&7));
        assert!(H.get(std::ptr::null_mut()).is_none());
        assert!(H.get((h as usize + 1) as *mut c_void).is_none());
        assert_eq!(H.remove(h).as_deref(), Some(&7));
        assert!(H.get(h).is_none(), "a destroyed handle is unknown");
    }
}
