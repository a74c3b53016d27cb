//! Opcodes of the stack and the memo: MARK, POP (the top value, or the mark when its frame is
//! empty), POP_MARK, DUP; PUT, BINPUT, LONG_BINPUT and MEMOIZE store the top of the stack,
//! GET, BINGET and LONG_BINGET push a stored value (a mutable container by reference, as in
//! Python).
use super::value::Val;
use super::vm::{Vm, VmResult};

impl Vm<'_> {
    #[inline(always)]
    fn memo_get(&self, idx: u32, at: usize) -> VmResult<Val> {
        self.memo
            .get(&idx)
            .cloned()
            .ok_or_else(|| self.err(at, format!("memo key {idx} not found")))
    }

    #[inline(always)]
    fn memo_put(&mut self, idx: u32, at: usize) -> VmResult<()> {
        let v = self.top(at)?.clone();
        self.memo.insert(idx, v);
        Ok(())
    }

    #[inline(always)]
    pub(super) fn mark(&mut self) {
        self.marks.push(self.stack.len());
    }

    /// POP: the top value, or, when the top frame is empty, the mark itself.
    #[inline(always)]
    pub(super) fn pop_op(&mut self, at: usize) -> VmResult<()> {
        if self.stack.len() > self.frame_start() {
            self.stack.pop();
        } else {
            self.pop_mark(at)?;
        }
        Ok(())
    }

    #[inline(always)]
    pub(super) fn pop_mark_op(&mut self, at: usize) -> VmResult<()> {
        self.pop_mark(at)?;
        Ok(())
    }

    #[inline(always)]
    pub(super) fn dup(&mut self, at: usize) -> VmResult<()> {
        let v = self.top(at)?.clone();
        self.push(v);
        Ok(())
    }

    #[inline(always)]
    pub(super) fn put(&mut self, at: usize) -> VmResult<()> {
        let l = self.line_str(at)?;
        let idx = l
            .parse()
            .map_err(|_| self.err(at, format!("bad PUT index {l:?}")))?;
        self.memo_put(idx, at)
    }

    #[inline(always)]
    pub(super) fn binput(&mut self, at: usize) -> VmResult<()> {
        let idx = self.u8(at)? as u32;
        self.memo_put(idx, at)
    }

    #[inline(always)]
    pub(super) fn long_binput(&mut self, at: usize) -> VmResult<()> {
        let idx = self.u32(at)?;
        self.memo_put(idx, at)
    }

    #[inline(always)]
    pub(super) fn memoize(&mut self, at: usize) -> VmResult<()> {
        let idx = self.memo.len() as u32;
        self.memo_put(idx, at)
    }

    #[inline(always)]
    pub(super) fn get(&mut self, at: usize) -> VmResult<()> {
        let l = self.line_str(at)?;
        let idx = l
            .parse()
            .map_err(|_| self.err(at, format!("bad GET index {l:?}")))?;
        let v = self.memo_get(idx, at)?;
        self.push(v);
        Ok(())
    }

    #[inline(always)]
    pub(super) fn binget(&mut self, at: usize) -> VmResult<()> {
        let idx = self.u8(at)? as u32;
        let v = self.memo_get(idx, at)?;
        self.push(v);
        Ok(())
    }

    #[inline(always)]
    pub(super) fn long_binget(&mut self, at: usize) -> VmResult<()> {
        let idx = self.u32(at)?;
        let v = self.memo_get(idx, at)?;
        self.push(v);
        Ok(())
    }
}
