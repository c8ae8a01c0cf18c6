//! The LoRA adapters requests may name: the start-up ones, plus those loaded and less those
//! unloaded at run time (`/v1/load_lora_adapter`, `/v1/unload_lora_adapter`). The api's own
//! table of names; the engine learns of changes by message.

use std::sync::RwLock;

use super::ServedAdapter;

#[derive(Debug, Default)]
pub struct AdapterCatalog {
    adapters: RwLock<Vec<ServedAdapter>>,
}

impl AdapterCatalog {
    pub fn new(adapters: Vec<ServedAdapter>) -> Self {
        Self {
            adapters: RwLock::new(adapters),
        }
    }

    /// The adapter named `name`.
    pub fn find(&self, name: &str) -> Option<ServedAdapter> {
        self.read().iter().find(|a| a.name == name).cloned()
    }

    /// Every adapter, in load order.
    pub fn list(&self) -> Vec<ServedAdapter> {
        self.read().clone()
    }

    pub fn len(&self) -> usize {
        self.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }

    pub fn insert(&self, adapter: ServedAdapter) {
        self.write().push(adapter);
    }

    /// Takes out the adapter named `name` or, without a name, the one with id `id`.
    pub fn remove(&self, name: Option<&str>, id: Option<u32>) -> Option<ServedAdapter> {
        let mut adapters = self.write();
        let index = adapters.iter().position(|a| match name {
            Some(name) => a.name == name,
            None => Some(a.id) == id,
        })?;
        Some(adapters.remove(index))
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<ServedAdapter>> {
        self.adapters.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Vec<ServedAdapter>> {
        self.adapters.write().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
