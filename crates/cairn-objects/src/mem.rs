//! [`MemStore`]: objects in a sorted map in memory.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::{ObjectError, ObjectInfo, ObjectStore};

/// An object store in memory: a sorted map behind one mutex, objects shared
/// (`Arc`) so a read copies only the range asked for.
#[derive(Debug, Default)]
pub struct MemStore {
    objects: Mutex<BTreeMap<String, Arc<[u8]>>>,
}

impl MemStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn objects(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<[u8]>>> {
        // A panic elsewhere cannot leave the map half-changed: every change
        // is one insert or remove.
        self.objects.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn object(&self, key: &str) -> Result<Arc<[u8]>, ObjectError> {
        self.objects()
            .get(key)
            .cloned()
            .ok_or_else(|| ObjectError::NotFound {
                key: key.to_owned(),
            })
    }

    /// Number of objects.
    pub fn len(&self) -> usize {
        self.objects().len()
    }

    /// Whether the store holds no object.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes held, all objects together.
    pub fn bytes(&self) -> u64 {
        self.objects().values().map(|o| o.len() as u64).sum()
    }
}

impl ObjectStore for MemStore {
    fn put(&self, key: &str, body: &[u8]) -> Result<(), ObjectError> {
        self.objects().insert(key.to_owned(), body.into());
        Ok(())
    }

    fn create(&self, key: &str, body: &[u8]) -> Result<(), ObjectError> {
        let mut objects = self.objects();
        if objects.contains_key(key) {
            return Err(ObjectError::Exists {
                key: key.to_owned(),
            });
        }
        objects.insert(key.to_owned(), body.into());
        Ok(())
    }

    fn read_at(&self, key: &str, offset: u64, buf: &mut [u8]) -> Result<usize, ObjectError> {
        let object = self.object(key)?;
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(object.len());
        let n = buf.len().min(object.len() - start);
        buf[..n].copy_from_slice(&object[start..start + n]);
        Ok(n)
    }

    fn get(&self, key: &str) -> Result<Vec<u8>, ObjectError> {
        Ok(self.object(key)?.to_vec())
    }

    fn head(&self, key: &str) -> Result<Option<u64>, ObjectError> {
        Ok(self.objects().get(key).map(|o| o.len() as u64))
    }

    fn delete(&self, key: &str) -> Result<(), ObjectError> {
        self.objects().remove(key);
        Ok(())
    }

    fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>, ObjectError> {
        Ok(self
            .objects()
            .range(prefix.to_owned()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, o)| ObjectInfo {
                key: k.clone(),
                size: o.len() as u64,
            })
            .collect())
    }

    fn describe(&self) -> String {
        "memory".to_owned()
    }
}
