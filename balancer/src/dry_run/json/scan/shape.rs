//! The dry run's shape as the scan reads it: the top-level object (its three known keys,
//! the unknown ones read and named), objects of numbers, and `pop_metype_gids`, whose
//! second half a large input has scanned by another thread from a guessed place.
use super::lex::TRAILING_CHARACTERS;
use super::{Input, Scanner, DEPTH};
use crate::dry_run::json::types::{Entries, Gids, Number, Object, Root, RootObject};

/// How many scans took the other thread's result.
#[cfg(test)]
pub(crate) static HANDOFFS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A progress callback that ignores its position.
fn ignore(_: usize) {}

impl Scanner<'_> {
    /// The whole input: one value, then only whitespace.
    pub(super) fn root(&mut self) -> Option<Root> {
        let root = match self.peek() {
            Some(b'{') => Root::Object(Box::new(self.root_object()?)),
            _ => {
                self.any(false)?;
                Root::Other
            }
        };
        match self.peek() {
            Some(_) => self.peek_error(TRAILING_CHARACTERS),
            None => Some(root),
        }
    }

    /// The top-level object (its `{` peeked): each key once in first-seen order (the
    /// known ones and the first unknown ones; the others only counted: millions of keys
    /// keep nothing), a repeated known key's value replaced.
    fn root_object(&mut self) -> Option<RootObject> {
        let mut keys: Entries<()> = Entries::new();
        let (mut unknown, mut unknown_more) = (0, 0u64);
        let (mut memory, mut synapses, mut populations) = (None, None, None);
        self.enter()?;
        let mut first = true;
        while self.next_key(&mut first)? {
            let key = self.string()?;
            self.colon()?;
            match key.as_str() {
                "metype_memory" => memory = Some(self.object_of(Scanner::number_value)?),
                "metype_cell_syn_average" => synapses = Some(self.object_of(Scanner::number_value)?),
                "pop_metype_gids" => populations = Some(self.populations_value()?),
                _ => {
                    self.any(false)?;
                    if keys.get(&key).is_some() {
                        continue;
                    }
                    if unknown == crate::dry_run::json::validate::UNKNOWN_KEYS_NAMED {
                        unknown_more += 1;
                        continue;
                    }
                    unknown += 1;
                }
            }
            if keys.insert(key, ()).is_none() {
                return self.fail(super::Fault::Names);
            }
        }
        self.leave();
        Some(RootObject {
            keys: keys.list.into_iter().map(|(k, ())| k).collect(),
            unknown_more,
            memory,
            synapses,
            populations,
        })
    }

    /// `entries.insert(key, value)`, or [`super::Fault::Names`] when the memory cannot
    /// be had.
    fn insert<V>(&mut self, entries: &mut Entries<V>, key: String, value: V) -> Option<()> {
        let done = entries.insert(key, value);
        if done.is_none() {
            return self.fail(super::Fault::Names);
        }
        done
    }

    /// `list.push(item)`, or [`super::Fault::Names`] when the memory cannot be had.
    fn push<T>(&mut self, list: &mut Vec<T>, item: T) -> Option<()> {
        if list.try_reserve(1).is_err() {
            return self.fail(super::Fault::Names);
        }
        list.push(item);
        Some(())
    }

    /// A value that should be an object of `value`s: its entries, or another kind (read,
    /// then dropped).
    pub(super) fn object_of<V>(
        &mut self,
        mut value: impl FnMut(&mut Self) -> Option<V>,
    ) -> Option<Object<V>> {
        if self.peek() != Some(b'{') {
            self.any(false)?;
            return Some(Object::Other);
        }
        let mut entries = Entries::new();
        self.map(&mut |s, key| {
            let v = value(s)?;
            s.insert(&mut entries, key, v)
        })?;
        Some(Object::Entries(entries))
    }

    /// A value that should be a number: its f64, or another kind (read, then dropped).
    pub(super) fn number_value(&mut self) -> Option<Number> {
        match self.peek() {
            Some(b'-' | b'0'..=b'9') => Some(Number(self.number()?.as_f64())),
            _ => {
                self.any(false)?;
                Some(Number(None))
            }
        }
    }
}

/// What a scan from the middle of `pop_metype_gids` read.
struct Tail {
    /// The rest of the population it started in: `"metype": [gids]`, in order.
    rest: Vec<(String, Gids)>,
    /// The populations after it, read whole (on the scan's own thread).
    populations: Vec<(String, Object<Gids>)>,
    /// Where `pop_metype_gids` ends: the scan from the start goes on from there.
    end: u64,
}

impl Scanner<'_> {
    /// A scan from here, assumed to be the `"` of a metype key inside a population object
    /// after a comma, to the end of `pop_metype_gids`; `None` when the text does not read
    /// that way from here (this was not such a place, or the text is not JSON there).
    fn scan_from(&mut self) -> Option<Tail> {
        // Inside the top-level object, `pop_metype_gids` and a population.
        self.depth = DEPTH - 3;
        let mut rest = Vec::new();
        let mut first = false;
        loop {
            let key = self.string()?;
            self.colon()?;
            let gids = self.gids_value()?;
            self.push(&mut rest, (key, gids))?;
            if !self.next_key(&mut first)? {
                break;
            }
        }
        self.leave();
        // The next populations, then the end.
        let mut populations = Vec::new();
        while self.next_key(&mut first)? {
            let name = self.string()?;
            self.colon()?;
            let metypes = self.object_of(Scanner::gids_value)?;
            self.push(&mut populations, (name, metypes))?;
        }
        let end = self.pos() + 1;
        Some(Tail {
            rest,
            populations,
            end,
        })
    }

    /// The first place from here from which [`Scanner::scan_from`] may read: a `]` , `"`
    /// sequence (the end of a gid array and the next metype key), at its `"`. Only a
    /// guess: the scan from the start takes it when it gets there in that state.
    fn split(&mut self) -> Option<u64> {
        loop {
            loop {
                match self.text()[self.at..].iter().position(|&b| b == b']') {
                    Some(p) => {
                        self.at += p;
                        break;
                    }
                    None => {
                        self.at = self.filled;
                        if !self.more() {
                            return None;
                        }
                    }
                }
            }
            self.at += 1;
            if self.peek() == Some(b',') {
                self.at += 1;
                if self.peek() == Some(b'"') {
                    return Some(self.pos());
                }
            }
        }
    }

    /// A value that should be `pop_metype_gids`' object of objects of gid arrays.
    fn populations_value(&mut self) -> Option<Object<Object<Gids>>> {
        if self.peek() != Some(b'{') {
            self.any(false)?;
            return Some(Object::Other);
        }
        let outer = self.depth;
        let pops = self.populations()?;
        self.depth = outer;
        Some(Object::Entries(pops))
    }

    /// `pop_metype_gids` (its `{` peeked). A large input's second half is read and
    /// scanned by another thread from a guessed place ([`Scanner::split`] from the
    /// middle); when this scan reaches that place between two metypes of a population, it
    /// takes the other thread's result from there (what it would have read itself) and
    /// goes on after it, else it reads on itself.
    fn populations(&mut self) -> Option<Entries<Object<Gids>>> {
        let input: Input = self.input;
        let mid = input.size / 2;
        let parallel = input.size >= input.parallel_from;
        std::thread::scope(|scope| {
            let (guess_tx, guess_rx) = std::sync::mpsc::channel();
            let mut other = parallel.then(|| {
                // `Some(None)` when no thread can start: its sender is dropped, so
                // this scan reads on itself.
                crate::spawn::scoped(scope, move || {
                    // Its gid arrays come from this thread's allocator arena: grown
                    // at once for about what the half holds (4 B per gid of at least
                    // 6 B of text: "1234,\n"; the arrays are exact).
                    crate::arena::warm(usize::try_from((input.size - mid) / 6 * 4).unwrap_or(usize::MAX));
                    let mut s = Scanner::new(input, mid, u64::MAX, &ignore);
                    let guess = s.split();
                    // The receiver waits for this, or is gone.
                    let _ = guess_tx.send(guess);
                    guess?;
                    let tail = s.scan_from()?;
                    s.fault.is_none().then_some(tail)
                })
            });
            // Where the other scan started, once this one is past the middle.
            let mut guess: Option<Option<u64>> = None;
            self.enter()?;
            let mut pops = Entries::new();
            let mut first_pop = true;
            while self.next_key(&mut first_pop)? {
                let name = self.string()?;
                self.colon()?;
                if self.peek() != Some(b'{') {
                    self.any(false)?;
                    self.insert(&mut pops, name, Object::Other)?;
                    continue;
                }
                self.enter()?;
                let mut metypes = Entries::new();
                let mut first = true;
                loop {
                    let after_comma = !first;
                    if !self.next_key(&mut first)? {
                        break;
                    }
                    if let (true, Some(handle)) = (after_comma, &mut other) {
                        if self.pos() >= mid {
                            let at = *guess.get_or_insert_with(|| guess_rx.recv().ok().flatten());
                            if at == Some(self.pos()) {
                                let tail = handle.take().and_then(|h| h.join().ok()).flatten();
                                match tail {
                                    Some(tail) => {
                                        #[cfg(test)]
                                        HANDOFFS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                        for (k, g) in tail.rest {
                                            self.insert(&mut metypes, k, g)?;
                                        }
                                        self.insert(&mut pops, name, Object::Entries(metypes))?;
                                        for (name, metypes) in tail.populations {
                                            self.insert(&mut pops, name, metypes)?;
                                        }
                                        self.seek(tail.end);
                                        (self.progress)(tail.end as usize);
                                        return Some(pops);
                                    }
                                    None => other = None,
                                }
                            }
                        }
                    }
                    let key = self.string()?;
                    self.colon()?;
                    let gids = self.gids_value()?;
                    self.insert(&mut metypes, key, gids)?;
                }
                self.leave();
                self.insert(&mut pops, name, Object::Entries(metypes))?;
            }
            self.leave();
            Some(pops)
        })
    }
}
