//! The work completions a CQ poll keeps when an arrival is refused (the engine could not
//! allocate its message: out of memory): the refused completion and the rest of its batch,
//! which `ibv_poll_cq` already took out of the CQ, are taken first, in order, at the next
//! poll; the refused arrival's receive slot stays its own (not reposted) until then. Generic
//! over the completion and the error, so that the order is unit-tested without a device.

/// What taking one completion gave: `Ok(Ok(()))` taken; `Ok(Err(e))` an arrival refused
/// with `e`, nothing done with it (kept to take again); `Err` an error that fails the poll.
pub(super) type Taken<E> = Result<Result<(), E>, E>;

/// The completions kept from earlier polls, oldest first.
pub(super) struct Kept<W> {
    wcs: Vec<W>,
}

/// Empty, without room: only to stand in while the fabric's own is taken out.
impl<W> Default for Kept<W> {
    fn default() -> Kept<W> {
        Kept { wcs: Vec::new() }
    }
}

impl<W> Kept<W> {
    /// Room for one CQ batch of `batch` completions, reserved now: keeping never allocates
    /// (it happens when memory ran out). A fresh batch is taken only when nothing is kept,
    /// so one batch of room is enough.
    pub(super) fn with_capacity(batch: usize) -> Kept<W> {
        Kept {
            wcs: Vec::with_capacity(batch),
        }
    }

    /// The completions kept now (for the `trace` counters).
    #[cfg(any(test, feature = "trace"))]
    pub(super) fn len(&self) -> usize {
        self.wcs.len()
    }

    /// Whether nothing is kept.
    pub(super) fn is_empty(&self) -> bool {
        self.wcs.is_empty()
    }

    /// Takes the kept completions, oldest first, with `take` until one is refused again: it
    /// and those after it stay kept, and its refusal is returned. An error from `take`
    /// drops that completion and keeps those after it (the poll fails with the error).
    pub(super) fn replay<E>(&mut self, mut take: impl FnMut(&W) -> Taken<E>) -> Result<Option<E>, E> {
        let mut i = 0;
        let mut out = Ok(None);
        while i < self.wcs.len() {
            match take(&self.wcs[i]) {
                Ok(Ok(())) => i += 1,
                Ok(Err(e)) => {
                    out = Ok(Some(e));
                    break;
                }
                Err(e) => {
                    i += 1;
                    out = Err(e);
                    break;
                }
            }
        }
        self.wcs.drain(..i);
        out
    }

    /// Takes `batch` (fresh from the CQ, while nothing is kept), each completion as
    /// `own(&batch[k])`, in order with `take` until one is refused: it and the rest of the
    /// batch are kept, and its refusal is returned. An error from `take` drops that
    /// completion and keeps the rest of the batch (the poll fails with the error).
    pub(super) fn take_batch<T, E>(
        &mut self,
        batch: &[T],
        own: impl Fn(&T) -> W,
        mut take: impl FnMut(&W) -> Taken<E>,
    ) -> Result<Option<E>, E> {
        debug_assert!(self.wcs.is_empty() && batch.len() <= self.wcs.capacity());
        for (k, wc) in batch.iter().enumerate() {
            let w = own(wc);
            match take(&w) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    self.wcs.push(w);
                    self.wcs.extend(batch[k + 1..].iter().map(&own));
                    return Ok(Some(e));
                }
                Err(e) => {
                    self.wcs.extend(batch[k + 1..].iter().map(&own));
                    return Err(e);
                }
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(wc: u32) -> String {
        format!("cannot allocate the message of completion {wc}")
    }

    /// Takes completions as a fabric does: each in `taken`, except that those in `refuse`
    /// are refused (once each, removed from it) and `fail` is an error.
    fn taker<'a>(
        taken: &'a mut Vec<u32>,
        refuse: &'a mut Vec<u32>,
        fail: Option<u32>,
    ) -> impl FnMut(&u32) -> Taken<String> + 'a {
        move |&w| {
            if let Some(i) = refuse.iter().position(|&r| r == w) {
                refuse.remove(i);
                return Ok(Err(refusal(w)));
            }
            if fail == Some(w) {
                return Err(format!("completion {w} is bad"));
            }
            taken.push(w);
            Ok(Ok(()))
        }
    }

    #[test]
    fn a_refused_completion_and_the_rest_of_its_batch_are_taken_first_in_order() {
        let mut kept = Kept::<u32>::with_capacity(8);
        let room = kept.wcs.capacity();
        let (mut taken, mut refuse) = (Vec::new(), vec![3, 3]);
        // Refused twice: at the first poll (kept with 4..=8), then again when taken first.
        let e = kept
            .take_batch(
                &[1u8, 2, 3, 4, 5, 6, 7, 8],
                |&b| u32::from(b),
                taker(&mut taken, &mut refuse, None),
            )
            .unwrap()
            .expect("refused");
        assert_eq!(e, refusal(3));
        assert_eq!(
            (taken.as_slice(), kept.wcs.as_slice()),
            (&[1, 2][..], &[3, 4, 5, 6, 7, 8][..])
        );
        let e = kept
            .replay(taker(&mut taken, &mut refuse, None))
            .unwrap()
            .expect("refused again");
        assert_eq!(e, refusal(3));
        assert_eq!(kept.len(), 6, "a refusal while taking the kept ones lost some");
        // Then it fits: every completion is taken once, in the CQ's order, and then the next
        // batch.
        assert!(kept
            .replay(taker(&mut taken, &mut refuse, None))
            .unwrap()
            .is_none());
        assert_eq!(kept.len(), 0);
        assert!(kept
            .take_batch(
                &[9u8, 10],
                |&b| u32::from(b),
                taker(&mut taken, &mut refuse, None)
            )
            .unwrap()
            .is_none());
        assert_eq!(taken, (1..=10).collect::<Vec<u32>>());
        // Keeping never allocated (it happens when memory ran out).
        assert_eq!(kept.wcs.capacity(), room);
    }

    #[test]
    fn a_refusal_in_the_middle_of_the_kept_ones_keeps_it_and_those_after_it() {
        let mut kept = Kept::<u32>::with_capacity(8);
        let (mut taken, mut refuse) = (Vec::new(), vec![2, 5]);
        let e = kept
            .take_batch(
                &[1u8, 2, 3, 4, 5, 6],
                |&b| u32::from(b),
                taker(&mut taken, &mut refuse, None),
            )
            .unwrap();
        assert!(e.is_some());
        let e = kept
            .replay(taker(&mut taken, &mut refuse, None))
            .unwrap()
            .expect("5 refused");
        assert_eq!(e, refusal(5));
        assert_eq!(
            (taken.as_slice(), kept.wcs.as_slice()),
            (&[1, 2, 3, 4][..], &[5, 6][..])
        );
        assert!(kept
            .replay(taker(&mut taken, &mut refuse, None))
            .unwrap()
            .is_none());
        assert_eq!(taken, vec![1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn an_error_drops_its_completion_and_keeps_the_rest() {
        let mut kept = Kept::<u32>::with_capacity(4);
        let (mut taken, mut refuse) = (Vec::new(), Vec::new());
        let r = kept.take_batch(
            &[1u8, 2, 3, 4],
            |&b| u32::from(b),
            taker(&mut taken, &mut refuse, Some(2)),
        );
        assert_eq!(r, Err("completion 2 is bad".to_string()));
        assert_eq!((taken.as_slice(), kept.wcs.as_slice()), (&[1][..], &[3, 4][..]));
        assert!(kept
            .replay(taker(&mut taken, &mut refuse, None))
            .unwrap()
            .is_none());
        assert_eq!(taken, vec![1, 3, 4]);
    }
}
