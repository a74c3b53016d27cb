//! Writing allocation files: the pickle (protocol 3, plain dict/tuple/list/int, the bytes
//! serde-pickle writes), gzip compressed in blocks on several threads into one gzip stream
//! (on the calling thread when no thread can start: `serial_gzip.rs`, the same bytes), and
//! the atomic file.
#[cfg(test)]
use std::collections::BTreeMap;
use std::collections::HashSet;
use std::io::Write;
use std::path::Path;

use gzp::par::compress::{ParCompress, ParCompressBuilder};
use gzp::ZWriter;

#[cfg(test)]
use serde::ser::{SerializeMap, Serializer};
#[cfg(test)]
use serde::Serialize;

use super::serial_gzip::{self, SerialGzip};
#[cfg(test)]
use crate::allocation::Bucket;
use crate::allocation::PopulationAllocation;
use crate::error::{BalancerError, Result};

/// Writes `populations` as one gzip stream (its 128 KiB blocks of pickle compressed side by
/// side, at level 1) of a pickle (protocol 3, serde-pickle's default) of
/// `{population: {(rank, cycle): [gids]}}` using plain Python types only (dict, tuple, list,
/// int), populations in slice order and buckets in (rank, cycle) order.
///
/// Written through an [`crate::atomic::AtomicFile`] (unnamed until linked or renamed into
/// place, fsynced), so `path` is either untouched or completely written. Errors: [`BalancerError::InvalidParameter`]
/// for a duplicated population name (a dict would silently merge them),
/// or one of 4 GiB or more (more than a pickle string holds), [`BalancerError::Io`] for OS
/// failures.
pub fn write_allocation_file(path: &Path, populations: &[PopulationAllocation]) -> Result<()> {
    stage_allocation_file(path, populations)?.commit()
}

/// [`write_allocation_file`] up to the commit: the file written and synced but not in
/// place (see [`crate::atomic`]), so that a command can commit all its outputs together.
pub fn stage_allocation_file(
    path: &Path,
    populations: &[PopulationAllocation],
) -> Result<crate::atomic::AtomicFile> {
    stage_with_threads(path, populations, compress_threads())
}

/// [`stage_allocation_file`] compressing on at most `threads` threads, 0 for none (the
/// bytes do not depend on it: blocks are cut at fixed offsets of the pickle).
fn stage_with_threads(
    path: &Path,
    populations: &[PopulationAllocation],
    threads: usize,
) -> Result<crate::atomic::AtomicFile> {
    let mut seen = HashSet::new();
    for p in populations {
        if u32::try_from(p.name.len()).is_err() {
            return Err(BalancerError::InvalidParameter(format!(
                "a population name of {} bytes in allocation to write to {} (a pickle string holds less than 4 GiB)",
                p.name.len(),
                path.display()
            )));
        }
        if !seen.insert(p.name.as_str()) {
            return Err(BalancerError::InvalidParameter(format!(
                "duplicate population `{}` in allocation to write to {}",
                p.name,
                path.display()
            )));
        }
    }
    // gzp starts a writing thread and `threads` compressing ones, with up to four blocks
    // per compressing thread in flight and a deflate state each: as many as can start
    // (`crate::spawn` counts each thread's stack and malloc arena), else the same stream on
    // this thread (the bytes depend on neither), else a clean error.
    let per_thread = 4 * BLOCK as u64 + serial_gzip::DEFLATE_STATE;
    let threads = (1..=threads)
        .rev()
        .find(|&n| crate::spawn::fits(n + 1, n as u64 * per_thread))
        .unwrap_or(0);
    if threads == 0 && !crate::spawn::fits(0, serial_gzip::DEFLATE_STATE + serial_gzip::buffers(BLOCK)) {
        return Err(BalancerError::io(
            path,
            std::io::Error::new(
                std::io::ErrorKind::OutOfMemory,
                format!(
                    "no address space left (ulimit -v) to compress it: {} left",
                    crate::limits::human_bytes(crate::limits::address_space_left().unwrap_or(0))
                ),
            ),
        ));
    }
    // Unnamed until committed, mode 0666 less the umask (neurodamus run by another user of
    // the group can read it).
    let mut tmp = crate::atomic::AtomicFile::create(path)?;
    let file: &mut std::fs::File = tmp.file();
    // The pickle is streamed (no copy of it in memory) in blocks to threads that compress
    // them side by side (gzp's `Gzip`, as pigz does): each block's deflate data ends in a
    // sync flush (an empty stored block, byte-aligned, not final) but the last's, so that
    // the blocks follow each other in one deflate stream, in one gzip member whose trailer
    // holds the CRC-32 of the whole pickle (combined from the blocks') and its size.
    let writer = std::io::BufWriter::with_capacity(
        1 << 16,
        EarlyWriteback {
            file,
            done: 0,
            started: 0,
        },
    );
    if threads == 0 {
        let written = SerialGzip::new(writer, BLOCK).and_then(|mut gz| {
            write_pickle(&mut gz, populations)?;
            gz.finish().map(drop)
        });
        written.map_err(|e| BalancerError::io(path, e))?;
        return Ok(tmp);
    }
    let written = std::thread::scope(|s| -> std::io::Result<()> {
        // Level 1 of flate2's Rust backend (miniz_oxide), the encoder and level of this writer's
        // first versions: the BININT stream barely compresses better at higher levels, and the
        // other encoders measured either have no sync flush to continue a stream or write a
        // larger file (docs/BENCHMARKS.md, "Dry run end to end").
        let mut gz: ParCompress<'_, gzp::deflate::Gzip, _> = ParCompressBuilder::new()
            .buffer_size(BLOCK)
            .map_err(std::io::Error::other)?
            .num_threads(threads)
            .map_err(std::io::Error::other)?
            .compression_level(flate2::Compression::fast())
            .from_borrowed_writer(writer, s);
        // A failed write has already stopped gzp's threads (the error is the writing
        // thread's): dropping `gz` then joins nothing more, and finishing would panic in
        // gzp. Otherwise finishing joins the threads: an I/O failure of the last blocks
        // shows there.
        write_pickle(&mut gz, populations)?;
        gz.finish().map(drop).map_err(|e| match e {
            gzp::GzpError::Io(e) => e,
            e => std::io::Error::other(e),
        })
    });
    written.map_err(|e| BalancerError::io(path, e))?;
    Ok(tmp)
}

/// The file, asking the kernel to start writing each MiB back to disk once it is written
/// (`posix_fadvise(DONTNEED)` starts writeback without waiting for it), so that the commit's
/// `fsync` waits for the last part only.
struct EarlyWriteback<'a> {
    file: &'a mut std::fs::File,
    /// Bytes written, and up to where writeback was asked for.
    done: u64,
    started: u64,
}

impl Write for EarlyWriteback<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        self.done += n as u64;
        if self.done - self.started >= 1 << 20 {
            // Advice only: a file system without it still gets the commit's fsync.
            let len = std::num::NonZeroU64::new(self.done - self.started);
            let _ = rustix::fs::fadvise(&*self.file, self.started, len, rustix::fs::Advice::DontNeed);
            self.started = self.done;
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// Bytes of pickle per block compressed on its own: small, so that the last blocks, left to
/// one thread while the others have none, are short. A block does not see the previous one's
/// 32 KiB window (so the bytes do not depend on the threads) but gets its own Huffman codes
/// (sizes against one continuous stream: docs/BENCHMARKS.md, "Dry run end to end").
const BLOCK: usize = 1 << 17;

/// Threads compressing blocks: the machine's cores, up to 8 (more would wait on the pickle,
/// which one thread writes; rates: docs/BENCHMARKS.md, "Dry run end to end").
fn compress_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 8)
}

/// Writes the pickle of `populations` to `out`: exactly the bytes serde-pickle writes for
/// [`PopulationsSer`] (protocol 3; a dict's items in batches of 1,000 between MARK and
/// SETITEMS, a list's in batches of 1,000 between MARK and APPENDS, as Python's pickle
/// does; gids below 2^31 as BININT, others as LONG1), which the tests check, built in a
/// buffer of [`PICKLE_BUFFER`] bytes instead of one call per opcode.
fn write_pickle(out: &mut impl Write, populations: &[PopulationAllocation]) -> std::io::Result<()> {
    let mut buf: Vec<u8> = Vec::with_capacity(PICKLE_BUFFER + 5 * BATCH + 64);
    buf.extend_from_slice(&[PROTO, 3]);
    dict_start(&mut buf, populations.len());
    for (n, p) in populations.iter().enumerate() {
        buf.push(BINUNICODE);
        buf.extend_from_slice(&(p.name.len() as u32).to_le_bytes());
        // A name longer than the buffer goes out on its own.
        if p.name.len() > PICKLE_BUFFER {
            out.write_all(&buf)?;
            buf.clear();
            out.write_all(p.name.as_bytes())?;
        } else {
            buf.extend_from_slice(p.name.as_bytes());
        }
        dict_start(&mut buf, p.buckets.len());
        for (k, (b, gids)) in p.buckets.iter().enumerate() {
            buf.push(MARK);
            int(&mut buf, b.rank);
            int(&mut buf, b.cycle);
            buf.push(TUPLE);
            buf.push(EMPTY_LIST);
            if !gids.is_empty() {
                buf.push(MARK);
                for batch in gids.chunks(BATCH) {
                    for &g in batch {
                        int(&mut buf, g);
                    }
                    if batch.len() == BATCH {
                        buf.extend_from_slice(&[APPENDS, MARK]);
                    }
                    if buf.len() >= PICKLE_BUFFER {
                        out.write_all(&buf)?;
                        buf.clear();
                    }
                }
                buf.push(APPENDS);
            }
            dict_item_done(&mut buf, k);
        }
        dict_end(&mut buf, p.buckets.len());
        dict_item_done(&mut buf, n);
    }
    dict_end(&mut buf, populations.len());
    buf.push(STOP);
    out.write_all(&buf)
}

/// Pickle bytes gathered before they are written on.
const PICKLE_BUFFER: usize = 1 << 16;
/// Items per MARK ... APPENDS / SETITEMS batch (Python's pickle and serde-pickle).
const BATCH: usize = 1000;
const PROTO: u8 = 0x80;
const STOP: u8 = b'.';
const MARK: u8 = b'(';
const BININT: u8 = b'J';
const LONG1: u8 = 0x8a;
const BINUNICODE: u8 = b'X';
const EMPTY_DICT: u8 = b'}';
const SETITEMS: u8 = b'u';
const EMPTY_LIST: u8 = b']';
const APPENDS: u8 = b'e';
const TUPLE: u8 = b't';

/// A u32 as serde-pickle writes it.
#[inline]
fn int(buf: &mut Vec<u8>, v: u32) {
    let b = v.to_le_bytes();
    if v < 0x8000_0000 {
        buf.extend_from_slice(&[BININT, b[0], b[1], b[2], b[3]]);
    } else {
        // The final 0 keeps the value positive.
        buf.extend_from_slice(&[LONG1, 5, b[0], b[1], b[2], b[3], 0]);
    }
}

fn dict_start(buf: &mut Vec<u8>, len: usize) {
    buf.push(EMPTY_DICT);
    if len > 0 {
        buf.push(MARK);
    }
}

/// After the `k`-th item (from 0): a full batch is set.
fn dict_item_done(buf: &mut Vec<u8>, k: usize) {
    if k % BATCH == BATCH - 1 {
        buf.extend_from_slice(&[SETITEMS, MARK]);
    }
}

fn dict_end(buf: &mut Vec<u8>, len: usize) {
    if len > 0 {
        buf.push(SETITEMS);
    }
}

/// The allocation as serde-pickle serializes it: the reference [`write_pickle`] is tested
/// against.
#[cfg(test)]
struct PopulationsSer<'a>(&'a [PopulationAllocation]);
#[cfg(test)]
struct BucketsSer<'a>(&'a BTreeMap<Bucket, Vec<u32>>);

#[cfg(test)]
impl Serialize for PopulationsSer<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for p in self.0 {
            map.serialize_entry(p.name.as_str(), &BucketsSer(&p.buckets))?;
        }
        map.end()
    }
}

#[cfg(test)]
impl Serialize for BucketsSer<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (b, gids) in self.0 {
            // A Rust tuple serializes as a pickle tuple: hashable, usable as dict key.
            map.serialize_entry(&(b.rank, b.cycle), gids)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{b, read};
    use super::*;

    #[test]
    fn serde_pickle_value_dict_sorts_keys_but_our_writer_keeps_order() {
        use serde_pickle::{HashableValue as H, Value as V};
        let mut d = BTreeMap::new();
        d.insert(H::String("zeta".into()), V::List(vec![]));
        d.insert(H::String("alpha".into()), V::List(vec![]));
        let bytes = serde_pickle::value_to_vec(&V::Dict(d), Default::default()).unwrap();
        let z = bytes.windows(4).position(|w| w == b"zeta").unwrap();
        let a = bytes.windows(5).position(|w| w == b"alpha").unwrap();
        assert!(a < z, "Value::Dict is a BTreeMap: populations come out sorted");

        let pops = vec![
            PopulationAllocation {
                name: "zeta".into(),
                buckets: BTreeMap::from([(b(0, 0), vec![1])]),
            },
            PopulationAllocation {
                name: "alpha".into(),
                buckets: BTreeMap::new(),
            },
        ];
        let bytes = serde_pickle::to_vec(&PopulationsSer(&pops), Default::default()).unwrap();
        assert_eq!(&bytes[..2], b"\x80\x03", "serde-pickle writes protocol 3");
        assert_eq!(read(&bytes).unwrap(), pops);
    }

    #[test]
    fn write_rejects_duplicate_populations() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("allocation_r1_c1.pkl.gz");
        let p = PopulationAllocation {
            name: "A".into(),
            buckets: BTreeMap::new(),
        };
        let e = write_allocation_file(&path, &[p.clone(), p]).unwrap_err();
        assert!(
            matches!(e, BalancerError::InvalidParameter(ref m) if m.contains("duplicate population `A`"))
        );
        assert!(!path.exists());
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "no temp file left"
        );
    }

    #[test]
    fn write_into_missing_directory_is_io_error() {
        let e = write_allocation_file(Path::new("/nonexistent-dir-xyz/a.pkl.gz"), &[]).unwrap_err();
        assert!(matches!(e, BalancerError::Io { .. }), "{e:?}");
    }

    /// Random allocations: sizes around the batch of 1,000 (lists and dicts), gids at and
    /// above 2^31, empty lists and dicts, long and non-ASCII names.
    #[test]
    fn write_pickle_writes_serde_pickles_bytes() {
        use rand::{Rng, SeedableRng};
        for seed in 0..60u64 {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let npop = [0, 1, 2, 3, 1001][seed as usize % 5];
            let pops: Vec<PopulationAllocation> = (0..npop)
                .map(|p| {
                    let nbuckets = if npop > 3 {
                        1
                    } else {
                        [0, 1, 999, 1000, 1001, 2001][rng.random_range(0..6)]
                    };
                    let buckets = (0..nbuckets)
                        .map(|k| {
                            let len = [0, 1, 999, 1000, 1001, 3000, rng.random_range(0..50)]
                                [rng.random_range(0..7)];
                            let gids = (0..len)
                                .map(|_| match rng.random_range(0..4) {
                                    0 => rng.random::<u32>(),
                                    1 => 0x7fff_ffff + rng.random_range(0..3),
                                    _ => rng.random_range(0..100_000),
                                })
                                .collect();
                            (b(k as u32 * 7 % 5000, rng.random_range(0..3)), gids)
                        })
                        .collect();
                    let name = match p % 3 {
                        0 => format!("pop{p}"),
                        1 => format!("Ünïcödé_{p}_{}", "x".repeat(rng.random_range(0..300))),
                        _ => String::new() + &p.to_string(),
                    };
                    PopulationAllocation { name, buckets }
                })
                .collect();
            let reference = serde_pickle::to_vec(&PopulationsSer(&pops), Default::default()).unwrap();
            let mut ours = Vec::new();
            write_pickle(&mut ours, &pops).unwrap();
            assert!(
                ours == reference,
                "seed {seed}: the pickle differs from serde-pickle's"
            );
        }
    }

    /// A pickle of exactly two blocks still ends in a final deflate block (gzp finishes the
    /// stream with an empty last block after two flushed ones).
    #[test]
    fn a_pickle_of_whole_blocks_is_a_complete_stream() {
        use std::io::Read;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("allocation_r1_c1.pkl.gz");
        let pops = |name_len: usize| {
            vec![PopulationAllocation {
                name: "n".repeat(name_len),
                buckets: [(b(0, 0), (0..40_000u32).collect())].into(),
            }]
        };
        let mut short = Vec::new();
        write_pickle(&mut short, &pops(1)).unwrap();
        // One more byte of name is one more byte of pickle (BINUNICODE, ASCII).
        let pops = pops(1 + 2 * BLOCK - short.len());
        let mut expected = Vec::new();
        write_pickle(&mut expected, &pops).unwrap();
        assert_eq!(expected.len(), 2 * BLOCK);
        write_allocation_file(&path, &pops).unwrap();
        let gz = std::fs::read(&path).unwrap();
        let mut decoder = flate2::bufread::GzDecoder::new(&gz[..]);
        let mut whole = Vec::new();
        decoder.read_to_end(&mut whole).unwrap();
        assert!(whole == expected);
        assert!(decoder.into_inner().is_empty(), "one gzip member");
    }

    /// A pickle of several compressed blocks is one gzip stream: gzip's header (level 1's
    /// XFL 4, no name, mtime 0), one deflate stream holding the whole pickle with a sync flush
    /// after each block but the last, the CRC-32 and size of the pickle, and nothing after.
    #[test]
    fn a_multi_block_file_is_one_gzip_stream() {
        use std::io::Read;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("allocation_r3_c1.pkl.gz");
        // ~3.8 MB of pickle: 29 blocks.
        let pops = vec![PopulationAllocation {
            name: "All".into(),
            buckets: (0..3u32)
                .map(|r| (b(r, 0), (0..250_000u32).map(|g| g * 3 + r).collect()))
                .collect(),
        }];
        write_allocation_file(&path, &pops).unwrap();
        let gz = std::fs::read(&path).unwrap();
        let mut expected = Vec::new();
        write_pickle(&mut expected, &pops).unwrap();
        let blocks = expected.len().div_ceil(BLOCK);
        assert!(blocks > 3, "several blocks: {} bytes", expected.len());
        assert_eq!(gz[..10], [31, 139, 8, 0, 0, 0, 0, 0, 4, 255], "gzip header");
        let (deflate, trailer) = gz[10..].split_at(gz.len() - 18);
        let crc = crc32fast::hash(&expected);
        assert_eq!(trailer[..4], crc.to_le_bytes(), "CRC-32 of the whole pickle");
        assert_eq!(trailer[4..], (expected.len() as u32).to_le_bytes(), "its size");
        // The raw deflate data alone inflates to the pickle and ends where the trailer
        // starts (a final block, then nothing).
        let mut inflate = flate2::Decompress::new(false);
        let mut pickle = Vec::with_capacity(expected.len() + 1);
        let status = inflate
            .decompress_vec(deflate, &mut pickle, flate2::FlushDecompress::Finish)
            .unwrap();
        assert_eq!(status, flate2::Status::StreamEnd);
        assert_eq!(
            inflate.total_in() as usize,
            deflate.len(),
            "nothing after the final block"
        );
        assert!(pickle == expected, "the deflate stream is the pickle");
        // A block's end is byte-aligned by a sync flush's empty stored block (00 00 FF FF).
        let syncs = deflate.windows(4).filter(|w| *w == [0, 0, 0xff, 0xff]).count();
        assert!(syncs >= blocks - 1, "{syncs} sync flushes for {blocks} blocks");
        // One member: a single-member decoder reads it all, leaving nothing.
        let mut decoder = flate2::bufread::GzDecoder::new(&gz[..]);
        let mut whole = Vec::new();
        decoder.read_to_end(&mut whole).unwrap();
        assert!(whole == expected);
        assert!(decoder.into_inner().is_empty(), "one gzip member");
        assert_eq!(read(&whole).unwrap(), pops);
        assert_eq!(super::super::read_allocation_file(&path).unwrap(), pops);
        // The same bytes whatever the number of threads.
        for threads in [0, 1, 3] {
            let other = dir.path().join(format!("allocation_r3_c1.{threads}.pkl.gz"));
            stage_with_threads(&other, &pops, threads)
                .unwrap()
                .commit()
                .unwrap();
            assert!(std::fs::read(&other).unwrap() == gz, "{threads} threads");
        }
    }
}
