//! [`UnionBackend`]: several backends in order (a local directory before a
//! remote bucket), seen as one.
//!
//! - An object is the first member's that has it (stat order): a key in
//!   the first member shadows the same key in the later ones.
//! - A member that fails a lookup for another reason than not found (a
//!   timeout, an I/O error) is passed over: a later member's copy is served.
//!   If none has the key, the first such error is returned (the key may
//!   exist where it could not be looked up), else not found.
//! - A listing is the members' listings merged in key order, a key listed
//!   once (with the first member's size and time). A member's listing error
//!   fails the listing: a partial one would say objects are absent.
//! - Each member is a part ([`Backend::parts`]): the cache remembers which
//!   one holds an object ([`Backend::locate`]), reads its blocks from it
//!   straight ([`Backend::read_part`]) and times each member's reads apart,
//!   its own cost group (papers/004), by the member's busy clock if it keeps
//!   one ([`Backend::busy_ns`]), else by the wall clock.

use super::{Backend, BackendError, BackendErrorKind, ListEntry, ObjectInfo};

pub use crate::limits::UNION_MAX;

/// Backends in order; each object from the first that has it. See the
/// module docs.
pub struct UnionBackend<B> {
    members: Vec<B>,
}

impl<B: Backend> UnionBackend<B> {
    /// The union of `members`, first first: 1 to [`UNION_MAX`] of them,
    /// each a plain backend (not itself a union).
    pub fn new(members: Vec<B>) -> Result<Self, BackendError> {
        if members.is_empty() || members.len() > UNION_MAX {
            return Err(BackendError::new(
                BackendErrorKind::Other,
                format!(
                    "a union of {} backends: give 1 to {UNION_MAX}",
                    members.len()
                ),
            ));
        }
        if members.iter().any(|m| m.parts() != 1) {
            return Err(BackendError::new(
                BackendErrorKind::Other,
                "a union's members are single backends, not unions",
            ));
        }
        Ok(Self { members })
    }

    /// The members, first first.
    pub fn members(&self) -> &[B] {
        &self.members
    }

    fn member(&self, part: u16, key: &str) -> Result<&B, BackendError> {
        self.members.get(usize::from(part)).ok_or_else(|| {
            BackendError::new(
                BackendErrorKind::Other,
                format!(
                    "{key}: no backend {part} in a union of {}",
                    self.members.len()
                ),
            )
        })
    }
}

impl<B: Backend> Backend for UnionBackend<B> {
    fn stat(&self, key: &str) -> Result<ObjectInfo, BackendError> {
        self.locate(key).map(|(info, _)| info)
    }

    fn read_at(&self, key: &str, offset: u64, buf: &mut [u8]) -> Result<(), BackendError> {
        let (_, part) = self.locate(key)?;
        self.read_part(part, key, offset, buf)
    }

    fn list(
        &self,
        prefix: &str,
        after: Option<&str>,
        max: usize,
        out: &mut Vec<ListEntry>,
    ) -> Result<bool, BackendError> {
        // Up to `max` from each member, merged: the first `max` keys of the
        // union are among them (each member's list is in key order).
        let mut merged: Vec<ListEntry> = Vec::new();
        let mut more = false;
        for member in &self.members {
            more |= member.list(prefix, after, max, &mut merged)?;
        }
        // Stable: of a key listed twice, the earlier member's entry stays
        // first, and `dedup_by` keeps the first.
        merged.sort_by(|a, b| a.key.cmp(&b.key));
        merged.dedup_by(|later, first| later.key == first.key);
        if merged.len() > max {
            merged.truncate(max);
            more = true;
        }
        out.append(&mut merged);
        Ok(more)
    }

    fn parts(&self) -> u16 {
        self.members.len() as u16
    }

    fn locate(&self, key: &str) -> Result<(ObjectInfo, u16), BackendError> {
        let mut failed = None;
        for (part, member) in self.members.iter().enumerate() {
            match member.stat(key) {
                Ok(info) => return Ok((info, part as u16)),
                Err(e) if e.kind == BackendErrorKind::NotFound => {}
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        Err(failed.unwrap_or_else(|| {
            BackendError::new(
                BackendErrorKind::NotFound,
                format!("{key}: in none of the {} backends", self.members.len()),
            )
        }))
    }

    fn read_part(
        &self,
        part: u16,
        key: &str,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(), BackendError> {
        self.member(part, key)?.read_at(key, offset, buf)
    }

    fn busy_ns(&self, part: u16) -> Option<u64> {
        self.members.get(usize::from(part))?.busy_ns(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::MemoryBackend;
    use std::sync::Arc;
    use std::time::{Duration, SystemTime};

    fn union() -> (
        Arc<MemoryBackend>,
        Arc<MemoryBackend>,
        UnionBackend<Arc<MemoryBackend>>,
    ) {
        let (a, b) = (
            Arc::new(MemoryBackend::new()),
            Arc::new(MemoryBackend::new()),
        );
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1);
        a.put("both", vec![1; 10], t);
        b.put("both", vec![2; 20], t);
        a.put("only-a", vec![3; 3], t);
        b.put("only-b", vec![4; 4], t);
        b.put("z", vec![5; 5], t);
        let union = UnionBackend::new(vec![Arc::clone(&a), Arc::clone(&b)]).expect("union");
        (a, b, union)
    }

    #[test]
    fn the_first_member_with_the_key_serves_it() {
        let (_, _, union) = union();
        let (info, part) = union.locate("both").expect("both");
        assert_eq!((info.size, part), (10, 0));
        let mut buf = [0u8; 10];
        union.read_at("both", 0, &mut buf).expect("read");
        assert_eq!(buf, [1; 10]);
        assert_eq!(union.locate("only-b").expect("b").1, 1);
        let mut buf = [0u8; 4];
        union.read_part(1, "only-b", 0, &mut buf).expect("read");
        assert_eq!(buf, [4; 4]);
        assert_eq!(union.stat("only-a").expect("a").size, 3);
        assert_eq!(
            union
                .read_part(7, "only-b", 0, &mut buf)
                .expect_err("no part 7")
                .kind,
            BackendErrorKind::Other
        );
    }

    #[test]
    fn a_key_in_no_member_is_not_found() {
        let (_, _, union) = union();
        let e = union.stat("nowhere").expect_err("absent");
        assert_eq!(e.kind, BackendErrorKind::NotFound, "{e}");
        let mut buf = [0u8; 1];
        let e = union.read_at("nowhere", 0, &mut buf).expect_err("absent");
        assert_eq!(e.kind, BackendErrorKind::NotFound);
    }

    #[test]
    fn a_failing_member_does_not_hide_the_others() {
        let (a, _, union) = union();
        // a's reads fail; b's objects are still served.
        a.fail_next_read(BackendErrorKind::Timeout);
        let mut buf = [0u8; 10];
        let e = union.read_at("both", 0, &mut buf).expect_err("a fails");
        assert_eq!(e.kind, BackendErrorKind::Timeout);
        let mut buf = [0u8; 4];
        union.read_at("only-b", 0, &mut buf).expect("b serves");
        union.read_at("both", 0, &mut [0u8; 10]).expect("a again");
        // A member whose lookup fails is passed over.
        let failing = UnionBackend::new(vec![
            Arc::new(Failing) as Arc<dyn Backend>,
            Arc::clone(&a) as Arc<dyn Backend>,
        ])
        .expect("union");
        assert_eq!(failing.locate("only-a").expect("from a").1, 1);
        let e = failing.stat("nowhere").expect_err("absent");
        assert_eq!(e.kind, BackendErrorKind::Retryable, "the lookup error: {e}");
    }

    #[test]
    fn listings_merge_in_key_order_first_member_winning() {
        let (_, _, union) = union();
        let mut out = Vec::new();
        assert!(!union.list("", None, 100, &mut out).expect("list"));
        let keys: Vec<(&str, u64)> = out.iter().map(|e| (e.key.as_str(), e.info.size)).collect();
        assert_eq!(keys, [("both", 10), ("only-a", 3), ("only-b", 4), ("z", 5)]);
        let mut page = Vec::new();
        assert!(union.list("", Some("both"), 2, &mut page).expect("list"));
        let keys: Vec<&str> = page.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(keys, ["only-a", "only-b"]);
        let mut last = Vec::new();
        assert!(!union.list("", Some("only-b"), 2, &mut last).expect("list"));
        assert_eq!(last.len(), 1);
    }

    #[test]
    fn a_union_needs_one_to_sixteen_single_members() {
        let none: Vec<MemoryBackend> = Vec::new();
        assert!(UnionBackend::new(none).is_err());
        let (_, _, inner) = union();
        assert!(UnionBackend::new(vec![inner]).is_err(), "nested");
    }

    struct Failing;
    impl Backend for Failing {
        fn stat(&self, key: &str) -> Result<ObjectInfo, BackendError> {
            Err(BackendError::new(
                BackendErrorKind::Retryable,
                format!("{key}: down"),
            ))
        }
        fn read_at(&self, key: &str, _: u64, _: &mut [u8]) -> Result<(), BackendError> {
            Err(BackendError::new(
                BackendErrorKind::Retryable,
                format!("{key}: down"),
            ))
        }
        fn list(
            &self,
            _: &str,
            _: Option<&str>,
            _: usize,
            _: &mut Vec<ListEntry>,
        ) -> Result<bool, BackendError> {
            Err(BackendError::new(BackendErrorKind::Retryable, "down"))
        }
    }
}
