//! Finding a node by its (device, inode) key without a second map entry
//! per node: node tables give a node the inode number itself as its id
//! whenever that id is free, so the key leads straight to the node; only
//! the few nodes whose id had to differ (an inode number seen on two
//! devices, a file that reused the number of one still held, the root)
//! are listed here. One hash entry per file saved in tables of millions.

use std::collections::HashMap;

/// Keys whose node is not found under the key's inode number.
#[derive(Default, Debug)]
pub struct KeyIndex {
    clash: HashMap<(u64, u64), u64>,
}

impl KeyIndex {
    /// The node of `key`: a listed exception first (it is the newer
    /// one), else the node whose id is the inode number, if its key is
    /// `key` (`key_of` reads a node's key from the table).
    pub fn find(&self, key: (u64, u64), key_of: impl Fn(u64) -> Option<(u64, u64)>) -> Option<u64> {
        if let Some(&id) = self.clash.get(&key) {
            return Some(id);
        }
        (key_of(key.1) == Some(key)).then_some(key.1)
    }

    /// Node `id` now has `key`.
    pub fn insert(&mut self, key: (u64, u64), id: u64) {
        if id != key.1 {
            self.clash.insert(key, id);
        } else {
            self.clash.remove(&key);
        }
    }

    /// Node `id` (of `key`) went.
    pub fn remove(&mut self, key: (u64, u64), id: u64) {
        if self.clash.get(&key) == Some(&id) {
            self.clash.remove(&key);
        }
    }

    /// A listed exception with inode number `ino` (on any device).
    pub fn exception_of_ino(&self, ino: u64) -> Option<u64> {
        self.clash
            .iter()
            .find(|(k, _)| k.1 == ino)
            .map(|(_, &id)| id)
    }

    /// Exceptions listed (for tests and stats).
    pub fn exceptions(&self) -> usize {
        self.clash.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_find_their_nodes_with_exceptions_listed_only() {
        let mut table: HashMap<u64, (u64, u64)> = HashMap::new();
        let mut ix = KeyIndex::default();
        // The usual case: id = inode number, nothing listed.
        table.insert(7, (1, 7));
        ix.insert((1, 7), 7);
        assert_eq!(ix.exceptions(), 0);
        // Inode 7 of another device takes another id.
        table.insert(1000, (2, 7));
        ix.insert((2, 7), 1000);
        let key_of = |t: &HashMap<u64, (u64, u64)>, id| t.get(&id).copied();
        assert_eq!(ix.find((1, 7), |id| key_of(&table, id)), Some(7));
        assert_eq!(ix.find((2, 7), |id| key_of(&table, id)), Some(1000));
        assert_eq!(ix.find((3, 7), |id| key_of(&table, id)), None);
        table.remove(&1000);
        ix.remove((2, 7), 1000);
        assert_eq!(ix.find((2, 7), |id| key_of(&table, id)), None);
        assert_eq!(ix.exceptions(), 0);
    }
}
