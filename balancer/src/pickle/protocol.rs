//! Opcodes of framing and protocol: PROTO (versions 0..=5), FRAME (checked against the
//! data left, then ignored: frames need no buffering here), STOP (the result, with nothing
//! after it), and protocol 5's buffers (READONLY_BUFFER a no-op, NEXT_BUFFER refused).
use super::value::Val;
use super::vm::{Vm, VmResult};
use crate::error::BalancerError;

impl Vm<'_> {
    #[inline(always)]
    pub(super) fn proto(&mut self, at: usize) -> VmResult<()> {
        let v = self.u8(at)?;
        if v > 5 {
            return Err(self.err(at, format!("unsupported pickle protocol {v}")));
        }
        Ok(())
    }

    #[inline(always)]
    pub(super) fn frame(&mut self, at: usize) -> VmResult<()> {
        let n = self.u64(at)?;
        let left = (self.data.len() - self.pos) as u64;
        if n > left {
            return Err(self.truncated(at, &format!("frame ({n} bytes, {left} left)")));
        }
        Ok(())
    }

    /// The value STOP returns: the top of the stack, provided STOP is the last byte.
    #[inline(always)]
    pub(super) fn stop(&mut self, at: usize) -> VmResult<Val> {
        let v = self.pop(at)?;
        if self.pos != self.data.len() {
            return Err(self.err(
                at,
                format!(
                    "trailing garbage: {} bytes after the STOP opcode",
                    self.data.len() - self.pos
                ),
            ));
        }
        Ok(v)
    }

    #[inline(always)]
    pub(super) fn readonly_buffer(&mut self, at: usize) -> VmResult<()> {
        self.top(at)?;
        Ok(())
    }

    /// The error for NEXT_BUFFER: out-of-band buffers are never read.
    #[cold]
    pub(super) fn next_buffer(&self, at: usize) -> BalancerError {
        self.err(at, "out-of-band buffers (NEXT_BUFFER) are not supported")
    }
}
