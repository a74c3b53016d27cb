//! The native path's unexpected queue: messages taken out of MPI before a receive took
//! them, in the order receives must find them (MPI's non-overtaking rule: from one source
//! with one tag, in send order).
//!
//! Most come out of MPI unmatched (drained, or refused by a blocking receive) and go to the
//! back, or back where the queue ended when they came out. A message that a posted
//! receive had matched in MPI, whose receive was then withdrawn (its wait failed: a
//! deferred large message, or one found by cancelling the receive), was matched ahead of
//! every message of its source and tag still in MPI or taken out since that receive was
//! posted: it goes to the front. Several of these keep the order in which their receives
//! were posted (receive ids grow in posting order), however many calls apart they come
//! back: the first `front.len()` entries are those messages, with their receive ids.

use std::collections::VecDeque;

use crate::protocol::request::RequestId;

/// A queue of entries `T` (the native path's: `(channel, message)`).
pub(super) struct Unexpected<T> {
    q: VecDeque<T>,
    /// The receive id of each of the first `front.len()` entries (ascending): messages
    /// matched by a receive that was withdrawn.
    front: Vec<RequestId>,
}

impl<T> Default for Unexpected<T> {
    fn default() -> Self {
        Unexpected {
            q: VecDeque::new(),
            front: Vec::new(),
        }
    }
}

impl<T> Unexpected<T> {
    pub(super) fn len(&self) -> usize {
        self.q.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        self.q.iter()
    }

    pub(super) fn get(&self, i: usize) -> Option<&T> {
        self.q.get(i)
    }

    /// A message taken out of MPI unmatched: last so far.
    pub(super) fn push_back(&mut self, e: T) {
        self.q.push_back(e);
    }

    /// A message taken out of MPI unmatched at a time the queue was `at` long: at that
    /// place (never ahead of the matched messages at the front).
    pub(super) fn insert(&mut self, at: usize, e: T) {
        let at = at.clamp(self.front.len(), self.q.len());
        self.q.insert(at, e);
    }

    /// A message matched in MPI by receive `recv` (withdrawn): ahead of every unmatched
    /// one, behind those matched by receives posted before `recv`.
    pub(super) fn push_matched(&mut self, recv: RequestId, e: T) {
        let at = self.front.partition_point(|&k| k < recv);
        self.front.insert(at, recv);
        self.q.insert(at, e);
    }

    /// Takes entry `i`.
    pub(super) fn remove(&mut self, i: usize) -> Option<T> {
        let e = self.q.remove(i)?;
        if i < self.front.len() {
            self.front.remove(i);
        }
        Some(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(u: &mut Unexpected<&'static str>) -> Vec<&'static str> {
        std::iter::from_fn(|| u.remove(0)).collect()
    }

    /// Issue 33: receives 10 and 11 (same source and tag) matched large messages A and B
    /// that could not be reserved. A came back in one retry, B in a later one: A, sent
    /// first, must stay first (the old `retry_deferred` counted the front places per call,
    /// so B went to place 0, ahead of A).
    #[test]
    fn matched_messages_keep_their_receives_order_across_calls() {
        let mut u = Unexpected::default();
        u.push_back("drained 1");
        u.push_matched(RequestId::new(10), "A");
        u.push_back("drained 2");
        u.push_matched(RequestId::new(11), "B");
        assert_eq!(drain(&mut u), ["A", "B", "drained 1", "drained 2"]);
    }

    /// A message found by cancelling receive 12 comes back after A (receive 10) and before
    /// B (receive 11's, still deferred then): receive order, not arrival order.
    #[test]
    fn matched_messages_sort_by_receive_whatever_order_they_come_back_in() {
        let mut u = Unexpected::default();
        u.push_matched(RequestId::new(10), "A");
        u.push_matched(RequestId::new(12), "C");
        u.push_back("drained");
        u.push_matched(RequestId::new(11), "B");
        assert_eq!(drain(&mut u), ["A", "B", "C", "drained"]);
    }

    /// Taking an entry from the middle of the front keeps the rest in place; a message
    /// put back where the queue ended earlier never goes ahead of the matched ones.
    #[test]
    fn removal_and_put_back_keep_the_front() {
        let mut u = Unexpected::default();
        u.push_back("x");
        u.push_matched(RequestId::new(10), "A");
        u.push_matched(RequestId::new(11), "B");
        assert_eq!(u.remove(1), Some("B"));
        u.insert(0, "put back");
        u.push_matched(RequestId::new(12), "C");
        assert_eq!(u.get(0), Some(&"A"));
        assert_eq!(u.len(), 4);
        assert_eq!(drain(&mut u), ["A", "C", "put back", "x"]);
        assert!(u.is_empty());
    }
}
