//! Input files that must be regular files (allocation files, their sidecars, CoreNEURON's
//! `files.dat`): opened without blocking (opening a FIFO for reading would wait for a
//! writer), checked with `fstat` on the descriptor opened (not the path, which may change
//! in between), refused when not a regular file, and read with a limit on the bytes
//! actually read: a file that reports a size of 0 (`/dev/zero`, `/proc` files) or grows
//! while read cannot make the reader allocate more than the limit.
use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use rustix::fs::{Mode, OFlags};

/// Why a regular input file could not be read.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// Opening or reading failed.
    Io(io::Error),
    /// The path is not a regular file (symlinks followed): what it is.
    NotRegular(&'static str),
    /// The file holds more than the limit: its size (at open, or as read).
    TooLarge(u64),
    /// The file's size changed while it was read: its size at open and after.
    Changed { at_open: u64, now: u64 },
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "{e}"),
            ReadError::NotRegular(kind) => write!(f, "it is {kind}, not a regular file"),
            ReadError::TooLarge(n) => write!(f, "{n} bytes or more"),
            ReadError::Changed { at_open, now } => write!(
                f,
                "the file changed while it was read ({at_open} bytes when opened, {now} bytes now): is it still being written? Read it once it is complete"
            ),
        }
    }
}

impl ReadError {
    /// As an `io::Error` (for the error types that hold one with the path).
    pub(crate) fn into_io(self) -> io::Error {
        match self {
            ReadError::Io(e) => e,
            other => io::Error::other(other.to_string()),
        }
    }

    /// The balancer's error naming `path`.
    pub(crate) fn at(self, path: &Path) -> crate::error::BalancerError {
        crate::error::BalancerError::Io {
            path: path.to_owned(),
            error: self.into_io(),
        }
    }
}

impl From<io::Error> for ReadError {
    fn from(e: io::Error) -> Self {
        ReadError::Io(e)
    }
}

/// A regular file opened for reading ([`open_regular`]).
#[derive(Debug)]
pub(crate) struct RegularFile {
    /// The file, at its start.
    pub file: File,
    /// Its size when it was opened, bytes.
    pub size: u64,
}

/// Opens `path` for reading without blocking on a FIFO and returns it with its size at
/// open; errors unless it is a regular file.
pub(crate) fn open_regular(path: &Path) -> Result<RegularFile, ReadError> {
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io::Error::from)?;
    let file = File::from(fd);
    let meta = file.metadata()?;
    if let Some(kind) = crate::atomic::special_kind(&meta) {
        return Err(ReadError::NotRegular(kind));
    }
    // Reads of a regular file never block; the flag is cleared all the same.
    let flags = rustix::fs::fcntl_getfl(&file).map_err(io::Error::from)?;
    rustix::fs::fcntl_setfl(&file, flags - OFlags::NONBLOCK).map_err(io::Error::from)?;
    Ok(RegularFile {
        file,
        size: meta.len(),
    })
}

/// Reads the regular file `path` whole: at most `limit` bytes ([`ReadError::TooLarge`]
/// beyond, by its size at open or by the bytes actually read), and exactly the size it had
/// when opened ([`ReadError::Changed`] when it ends before or goes on after). The buffer is
/// reserved with `try_reserve_exact` (out of memory is an `io::ErrorKind::OutOfMemory`).
pub(crate) fn read_regular(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    let RegularFile { file, size } = open_regular(path)?;
    if size > limit {
        return Err(ReadError::TooLarge(size));
    }
    read_exactly(file, size)
}

/// The `size` bytes of `file` (its size when opened), refusing a file that changed.
pub(crate) fn read_exactly(file: File, size: u64) -> Result<Vec<u8>, ReadError> {
    let mut bytes = Vec::new();
    let len = usize::try_from(size).map_err(|_| ReadError::TooLarge(size))?;
    bytes
        .try_reserve_exact(len)
        .map_err(|_| io::Error::from(io::ErrorKind::OutOfMemory))?;
    // One byte more than the size tells a file that grew.
    let read = (&file).take(size.saturating_add(1)).read_to_end(&mut bytes)? as u64;
    if read != size {
        return Err(changed(&file, size));
    }
    Ok(bytes)
}

/// [`ReadError::Changed`] for `file`, `at_open` bytes when opened (its size now from
/// `fstat`).
pub(crate) fn changed(file: &File, at_open: u64) -> ReadError {
    let now = file.metadata().map_or(at_open, |m| m.len());
    ReadError::Changed { at_open, now }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_regular_files_and_refuses_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        std::fs::write(&f, b"hello").unwrap();
        assert_eq!(read_regular(&f, 5).unwrap(), b"hello");
        assert!(matches!(read_regular(&f, 4), Err(ReadError::TooLarge(5))));
        // A FIFO without a writer: refused at once, not waited on.
        let fifo = dir.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let e = read_regular(&fifo, 1 << 20).unwrap_err().to_string();
        assert_eq!(e, "it is a FIFO (named pipe), not a regular file");
        // A symlink to a device that reports 0 bytes and never ends (read-only /dev/zero).
        let zero = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let e = read_regular(&zero, 1 << 20).unwrap_err().to_string();
        assert_eq!(e, "it is a character device, not a regular file");
        assert!(read_regular(dir.path(), 1).is_err());
    }

    #[test]
    fn a_file_that_grows_or_shrinks_while_read_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        std::fs::write(&f, b"0123456789").unwrap();
        let RegularFile { file, size } = open_regular(&f).unwrap();
        assert_eq!(size, 10);
        let mut append = std::fs::OpenOptions::new().append(true).open(&f).unwrap();
        std::io::Write::write_all(&mut append, b"more").unwrap();
        match read_exactly(file, size) {
            Err(ReadError::Changed { at_open: 10, now: 14 }) => {}
            r => panic!("{:?}", r.map(|b| b.len())),
        }
        let RegularFile { file, size } = open_regular(&f).unwrap();
        std::fs::File::create(&f).unwrap().set_len(3).unwrap();
        match read_exactly(file, size) {
            Err(ReadError::Changed { at_open: 14, now: 3 }) => {}
            r => panic!("{:?}", r.map(|b| b.len())),
        }
    }
}
