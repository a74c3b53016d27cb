//! The allocation file's gzip stream written on the calling thread: the bytes gzp's
//! `ParCompress<Gzip>` writes (the writer's compressing threads), for when no thread can
//! start (`ulimit -v`: each thread takes its stack and a malloc arena, `crate::spawn`).
//!
//! gzp cuts its input in blocks of the configured size (a block leaves once more bytes
//! follow it, so the last holds 1 to `block` bytes), deflates each with a compressor reset
//! between blocks (raw deflate, a sync flush after each block but the last, which finishes
//! the stream), and frames them as one gzip member: its 10-byte header (for level 1:
//! `XFL` 4, `OS` 255, no name, mtime 0) and the CRC-32 and size (mod 2^32) of the whole
//! input. This writer does the same in the same order, so the file is byte for byte the
//! threaded one (checked by the tests against gzp itself).
use std::io::{self, Write};

use flate2::{Compress, Compression, Crc, FlushCompress, Status};

/// gzp's gzip header for levels up to `Compression::fast()` (gzp `deflate::Gzip::header`).
const HEADER: [u8; 10] = [31, 139, 8, 0, 0, 0, 0, 0, 4, 255];

/// Address space this writer takes beyond the blocks: the deflate state (flate2's Rust
/// backend: miniz_oxide's `CompressorOxide`, its hash chains and buffers, about 300 KiB),
/// rounded up.
pub(super) const DEFLATE_STATE: u64 = 1 << 20;

/// Bytes the writer holds: a block of input and its compressed output, besides
/// [`DEFLATE_STATE`].
pub(super) fn buffers(block: usize) -> u64 {
    (block + output_capacity(block)) as u64
}

/// Room for the compressed output of a `len`-byte block: gzp's (`deflate::output_buffer_size`:
/// 10% more than the input, at least 128 bytes), and 1 KiB more, so that a block whose
/// output fills it did not fit gzp's either. The compressor's bytes do not depend on the
/// room it is given (it keeps what does not fit for the next call).
fn output_capacity(len: usize) -> usize {
    len + (len / 10).max(128) + 1024
}

/// A gzip stream of `block`-byte blocks deflated one after the other at level 1.
pub(super) struct SerialGzip<W: Write> {
    out: W,
    block: usize,
    pending: Vec<u8>,
    compressed: Vec<u8>,
    deflate: Compress,
    crc: Crc,
}

impl<W: Write> SerialGzip<W> {
    /// Writes the header to `out`. Errors: `OutOfMemory` when the buffers cannot be had
    /// (nothing aborts), or `out`'s error.
    pub(super) fn new(mut out: W, block: usize) -> io::Result<Self> {
        let mut pending = Vec::new();
        let mut compressed = Vec::new();
        pending
            .try_reserve_exact(block)
            .and_then(|()| compressed.try_reserve_exact(output_capacity(block)))
            .map_err(|e| io::Error::new(io::ErrorKind::OutOfMemory, e))?;
        out.write_all(&HEADER)?;
        Ok(SerialGzip {
            out,
            block,
            pending,
            compressed,
            deflate: Compress::new(Compression::fast(), false),
            crc: Crc::new(),
        })
    }

    /// Deflates the pending block (`last`: finishing the stream) and writes it out.
    fn emit(&mut self, last: bool) -> io::Result<()> {
        self.crc.update(&self.pending);
        self.compressed.clear();
        let flush = if last {
            FlushCompress::Finish
        } else {
            FlushCompress::Sync
        };
        // A block whose output fits the room is complete after one call (a sync flush that
        // filled the room may have more to give); one that does not (input that does not
        // compress) goes on with more room.
        let mut done = 0usize;
        loop {
            let before = self.deflate.total_in();
            let status = self
                .deflate
                .compress_vec(&self.pending[done..], &mut self.compressed, flush)
                .map_err(io::Error::other)?;
            done += (self.deflate.total_in() - before) as usize;
            let complete = done == self.pending.len()
                && if last {
                    status == Status::StreamEnd
                } else {
                    self.compressed.len() < self.compressed.capacity()
                };
            if complete {
                break;
            }
            self.compressed
                .try_reserve(self.compressed.capacity().max(4096))
                .map_err(|e| io::Error::new(io::ErrorKind::OutOfMemory, e))?;
        }
        self.deflate.reset();
        self.pending.clear();
        self.out.write_all(&self.compressed)
    }

    /// Deflates what is left as the last block, writes the trailer and flushes `out`.
    pub(super) fn finish(mut self) -> io::Result<W> {
        self.emit(true)?;
        self.out.write_all(&self.crc.sum().to_le_bytes())?;
        self.out.write_all(&self.crc.amount().to_le_bytes())?;
        self.out.flush()?;
        Ok(self.out)
    }
}

impl<W: Write> Write for SerialGzip<W> {
    fn write(&mut self, mut buf: &[u8]) -> io::Result<usize> {
        let n = buf.len();
        while !buf.is_empty() {
            // A full block leaves once a byte follows it (as gzp's).
            if self.pending.len() == self.block {
                self.emit(false)?;
            }
            let take = (self.block - self.pending.len()).min(buf.len());
            self.pending.extend_from_slice(&buf[..take]);
            buf = &buf[take..];
        }
        Ok(n)
    }

    /// Nothing to do before [`SerialGzip::finish`]: a flush here would cut a short block,
    /// which gzp does not.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use gzp::par::compress::{ParCompress, ParCompressBuilder};
    use gzp::ZWriter;

    use super::*;

    /// gzp's stream of `data` written in `pieces`-byte writes, with `block`-byte blocks.
    fn gzp_bytes(data: &[u8], block: usize, pieces: usize) -> Vec<u8> {
        let mut out = Vec::new();
        std::thread::scope(|s| {
            let mut gz: ParCompress<'_, gzp::deflate::Gzip, _> = ParCompressBuilder::new()
                .buffer_size(block)
                .unwrap()
                .num_threads(2)
                .unwrap()
                .compression_level(Compression::fast())
                .from_borrowed_writer(&mut out, s);
            for p in data.chunks(pieces) {
                gz.write_all(p).unwrap();
            }
            gz.finish().unwrap();
        });
        out
    }

    fn serial_bytes(data: &[u8], block: usize, pieces: usize) -> Vec<u8> {
        let mut gz = SerialGzip::new(Vec::new(), block).unwrap();
        for p in data.chunks(pieces) {
            gz.write_all(p).unwrap();
        }
        gz.finish().unwrap()
    }

    /// Bytes like a pickle's (small integers, repeated opcodes), from a seed.
    fn pickle_like(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..len)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if i % 5 == 0 {
                    b'J'
                } else {
                    (x % 16) as u8
                }
            })
            .collect()
    }

    #[test]
    fn the_bytes_are_gzps() {
        let block = 1 << 15; // gzp's smallest
        for len in [
            1,
            100,
            block - 1,
            block,
            block + 1,
            2 * block,
            2 * block + 7,
            9 * block + 3,
        ] {
            for pieces in [1, 1000, block, 3 * block + 1] {
                let data = pickle_like(len, len as u64);
                let ours = serial_bytes(&data, block, pieces);
                assert!(
                    ours == gzp_bytes(&data, block, pieces),
                    "{len} bytes in writes of {pieces}"
                );
                let mut back = Vec::new();
                flate2::read::GzDecoder::new(&ours[..])
                    .read_to_end(&mut back)
                    .unwrap();
                assert!(back == data, "{len} bytes");
            }
        }
    }

    /// Random bytes do not compress: the blocks outgrow gzp's output capacity and the
    /// stream is still whole (gzp's own output is not compared: it would be cut short).
    #[test]
    fn incompressible_blocks_are_written_whole() {
        let block = 1 << 15; // gzp's smallest
        let mut x = 7u64;
        let data: Vec<u8> = (0..5 * block + 9)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let ours = serial_bytes(&data, block, 777);
        let mut back = Vec::new();
        flate2::read::GzDecoder::new(&ours[..])
            .read_to_end(&mut back)
            .unwrap();
        assert!(back == data);
    }
}
