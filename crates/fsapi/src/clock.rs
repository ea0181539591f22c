//! A clock (second-chance LRU) over ids, for the layers that keep a
//! bounded number of a costly resource (descriptors, fids) for an
//! unbounded number of files: the 9P client's fids, hostfs's `O_PATH`
//! descriptors, the FUSE front end's vfs descriptors.
//!
//! The clock only orders ids; the table that owns the resource keeps, per
//! id, whether it holds one and a "referenced" bit set on every use. The
//! hand passes each id once per sweep: a referenced (or busy) id loses
//! its bit and stays, an unreferenced one gives its resource up. An id may
//! stand on the clock after its resource went (the table says
//! [`Visit::Gone`]); such ids are dropped as the hand meets them, and
//! [`Clock::compact`] bounds how many pile up.

use std::collections::{HashSet, VecDeque};

/// What the owner of an id says when the hand reaches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Visit {
    /// The id holds nothing (any more): drop it from the clock.
    Gone,
    /// Recently used or in use: keep it for another round.
    Spare,
    /// Release its resource now.
    Evict,
}

#[derive(Default, Debug)]
pub struct Clock {
    hand: VecDeque<u64>,
}

impl Clock {
    /// `id` just got its resource.
    pub fn push(&mut self, id: u64) {
        self.hand.push_back(id);
    }

    pub fn len(&self) -> usize {
        self.hand.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hand.is_empty()
    }

    /// Move the hand until `excess` resources were released, or every id
    /// was visited twice (all in use: nothing can go now). `visit` decides
    /// for each id (and clears its referenced bit when it says `Spare`);
    /// it is called once per id released with `Evict`. Returns how many
    /// were released.
    pub fn sweep(&mut self, excess: usize, mut visit: impl FnMut(u64) -> Visit) -> usize {
        let mut released = 0;
        let mut budget = 2 * self.hand.len();
        while released < excess && budget > 0 {
            budget -= 1;
            let Some(id) = self.hand.pop_front() else {
                break;
            };
            match visit(id) {
                Visit::Gone => {}
                Visit::Spare => self.hand.push_back(id),
                Visit::Evict => released += 1,
            }
        }
        released
    }

    /// Drop ids that hold nothing, and repeats, once they are more than
    /// the `live` ids that hold something (cheap to call after every
    /// change).
    pub fn compact(&mut self, live: usize, holds: impl Fn(u64) -> bool) {
        if self.hand.len() > 2 * live + 64 {
            let mut seen = HashSet::new();
            self.hand.retain(|&id| holds(id) && seen.insert(id));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn referenced_ids_get_a_second_chance_and_busy_ones_never_go() {
        let mut c = Clock::default();
        // id -> (referenced, busy)
        let mut t: HashMap<u64, (bool, bool)> = HashMap::new();
        for id in 0..6 {
            c.push(id);
            t.insert(id, (false, false));
        }
        t.insert(0, (true, false));
        t.insert(1, (false, true));
        let visit = |t: &mut HashMap<u64, (bool, bool)>, id| match t.get_mut(&id) {
            None => Visit::Gone,
            Some(e) if e.0 || e.1 => {
                e.0 = false;
                Visit::Spare
            }
            Some(_) => {
                t.remove(&id);
                Visit::Evict
            }
        };
        assert_eq!(c.sweep(2, |id| visit(&mut t, id)), 2);
        // 0 was referenced, 1 busy: 2 and 3 went.
        assert!(t.contains_key(&0) && t.contains_key(&1));
        assert!(!t.contains_key(&2) && !t.contains_key(&3));
        // Everything but the busy one can go; asking for more stops.
        assert_eq!(c.sweep(10, |id| visit(&mut t, id)), 3);
        assert_eq!(t.len(), 1);
        c.compact(0, |id| t.contains_key(&id));
        assert_eq!(c.len(), 1);
    }
}
