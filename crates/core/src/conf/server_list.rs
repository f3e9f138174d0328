//! A backend's servers: those its configuration declares, then those the CLI adds (`add
//! server`). The list only grows, so a server's index never changes for the life of the
//! generation, and workers read it without a lock while the CLI appends (boxcar's
//! append-only vector: an element never moves once written).
//!
//! Invariants: servers are appended one at a time (the CLI holds
//! `Process::server_edits`), a server's live state (`runtime::BackendState::servers`)
//! before its configuration, so that an index below the configuration's [`ServerList::len`]
//! is valid in both lists. A deleted server (`del server`) keeps its index; its state says
//! it is gone.

use std::ops::{Index, IndexMut};

pub struct ServerList<T>(boxcar::Vec<T>);

impl<T> ServerList<T> {
    /// The servers appended so far.
    pub fn len(&self) -> usize {
        self.0.count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, index: usize) -> Option<&T> {
        self.0.get(index)
    }

    /// The servers in index order, as many as there were when the walk began.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> + ExactSizeIterator + Clone {
        (0..self.len()).map(move |i| &self.0[i])
    }

    /// Appends a server; its index.
    pub fn push(&self, server: T) -> usize {
        self.0.push(server)
    }
}

impl<T> Default for ServerList<T> {
    fn default() -> Self {
        ServerList(boxcar::Vec::new())
    }
}

impl<T> Index<usize> for ServerList<T> {
    type Output = T;

    fn index(&self, index: usize) -> &T {
        &self.0[index]
    }
}

impl<T> IndexMut<usize> for ServerList<T> {
    /// (While the configuration is being built: nobody else reads it yet.)
    fn index_mut(&mut self, index: usize) -> &mut T {
        match self.0.get_mut(index) {
            Some(server) => server,
            None => panic!("server index {index} out of bounds"),
        }
    }
}

impl<T> FromIterator<T> for ServerList<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        ServerList(iter.into_iter().collect())
    }
}

impl<T> From<Vec<T>> for ServerList<T> {
    fn from(v: Vec<T>) -> Self {
        v.into_iter().collect()
    }
}

impl<'a, T> IntoIterator for &'a ServerList<T> {
    type Item = &'a T;
    type IntoIter = Box<dyn Iterator<Item = &'a T> + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for ServerList<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::ServerList;

    #[test]
    fn a_list_grows_while_it_is_read() {
        let list: ServerList<u32> = vec![1, 2].into();
        let before: Vec<_> = list.iter().collect();
        std::thread::scope(|s| {
            s.spawn(|| list.push(3));
        });
        assert_eq!(before, [&1, &2]);
        assert_eq!(list.iter().copied().collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!((list.len(), list[2], list.get(3)), (3, 3, None));
    }
}
