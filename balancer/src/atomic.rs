//! Atomic output files: every file the balancer writes (allocation, its sidecar,
//! `cell_memory_usage.json`) appears complete or not at all, and never replaces an input
//! ([`refuse_input`]).
//!
//! An [`AtomicFile`] is written unnamed where Linux allows it (`O_TMPFILE` in the target's
//! directory), so SIGKILL or a crash leaves nothing; [`AtomicFile::commit`] links it into
//! place (`linkat` through `/proc/self/fd`). `linkat` cannot replace a file, so when the
//! target exists the data is linked to a temporary name only at the end and renamed over
//! the target at once. Where `O_TMPFILE` is unsupported (EOPNOTSUPP, EISDIR, EINVAL) a named
//! temporary file is written and renamed. Named temporaries are removed on SIGINT, SIGTERM
//! and SIGHUP by a handler installed with the first one (a thread of signal-hook's, which
//! then ends the process as the signal's default action would), and so are the directories
//! [`create_dir_all`] made, where still empty. Files get mode 0666 less the umask, like any
//! newly created file. An output path that exists and is not a regular file (a FIFO, a
//! device node, a socket, a directory; a symlink to a regular file is fine) is refused,
//! never replaced ([`refuse_special`]): checked when the file is started and again just
//! before it is put in place.
//!
//! Why this is public: writing files atomically is part of writing allocation files.
//! [`stage_allocation`](crate::stage_allocation),
//! [`AllocationCosts::stage`](crate::AllocationCosts::stage) (the sidecar) and
//! [`DryRun::stage_json_file`](crate::DryRun::stage_json_file) hand back an [`AtomicFile`],
//! written but not yet in place, so that a caller commits them together with outputs of its
//! own ([`commit_all`]) once its checks have passed: an allocation file never appears
//! without its sidecar, and a run that fails half-way leaves nothing. A caller's own outputs
//! (`ballast` writes its plots and `rebalance-corenrn`'s `files.dat` this way) follow the
//! same rules with [`AtomicFile`], [`write_file`], [`refuse_input`], [`refuse_special`] and
//! [`create_dir_all`].
use std::fs::File;
use std::io::{self, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, Once};

use rustix::fs::{AtFlags, Mode, OFlags, CWD};
use rustix::io::Errno;

use crate::error::{BalancerError, Result};

/// Named temporary files alive now; removed by the signal handler.
static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
/// Directories [`create_dir_all`] made, outermost first; removed (where empty) by the
/// signal handler.
static MADE_DIRS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static HANDLER: Once = Once::new();
static COUNTER: AtomicU64 = AtomicU64::new(0);

fn live() -> MutexGuard<'static, Vec<PathBuf>> {
    lock(&LIVE)
}

/// `m` locked, also after a panic while it was held (the lists stay usable).
fn lock(m: &'static Mutex<Vec<PathBuf>>) -> MutexGuard<'static, Vec<PathBuf>> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Installs (once) the SIGINT/SIGTERM/SIGHUP handler that removes the named temporaries.
/// It holds the registry lock while it removes them and ends the process, so a commit in
/// progress finishes first and none starts after. A signal the process was started ignoring
/// (`nohup` ignores SIGHUP, a shell's background job SIGINT) stays ignored: catching it
/// would end a run its user asked to survive.
fn install_handler() {
    HANDLER.call_once(|| {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let ignored = ignored_signals();
        let wanted: Vec<i32> = [SIGINT, SIGTERM, SIGHUP]
            .into_iter()
            .filter(|&s| ignored & (1u64 << (s - 1)) == 0)
            .collect();
        // Without the address space to start its thread (`crate::spawn`), or without the
        // handler, the default actions stay: temporaries may be left, as without a handler.
        if wanted.is_empty() || !crate::spawn::fits(1, 0) {
            return;
        }
        let Ok(mut signals) = signal_hook::iterator::Signals::new(wanted) else {
            return;
        };
        let _ = crate::spawn::detached("ballast-signals", move || {
            if let Some(signal) = signals.forever().next() {
                let guard = live();
                for path in guard.iter() {
                    let _ = std::fs::remove_file(path);
                }
                let dirs = lock(&MADE_DIRS);
                for dir in dirs.iter().rev() {
                    let _ = std::fs::remove_dir(dir);
                }
                let _ = signal_hook::low_level::emulate_default_handler(signal);
                std::process::exit(128 + signal);
            }
        });
    });
}

/// `std::fs::create_dir_all(dir)`, noting the directories it makes: a signal that ends the
/// process before its outputs are in place removes them again where they are still empty
/// (an output directory made for a run that was interrupted is not left behind).
pub fn create_dir_all(dir: &Path) -> io::Result<()> {
    let missing: Vec<PathBuf> = dir
        .ancestors()
        .filter(|d| !d.as_os_str().is_empty())
        .take_while(|d| std::fs::symlink_metadata(d).is_err())
        .map(Path::to_path_buf)
        .collect();
    if missing.is_empty() {
        return std::fs::create_dir_all(dir);
    }
    install_handler();
    for d in missing.iter().rev() {
        match std::fs::create_dir(d) {
            Ok(()) => lock(&MADE_DIRS).push(d.clone()),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && d.is_dir() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The signals this process ignores: the `SigIgn` mask of /proc/self/status (bit n - 1 for
/// signal n, in hex; proc(5)); none when it cannot be read.
fn ignored_signals() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("SigIgn:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .unwrap_or(0)
}

fn unregister(guard: &mut MutexGuard<'static, Vec<PathBuf>>, path: &Path) {
    if let Some(i) = guard.iter().position(|p| p == path) {
        guard.swap_remove(i);
    }
}

/// `dir/.NAME.PID-N.tmp` for the target `dir/NAME`.
fn temp_name(dir: &Path, target: &Path) -> PathBuf {
    let name = target
        .file_name()
        .map_or("ballast".into(), |n| n.to_string_lossy().into_owned());
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    dir.join(format!(".{name}.{}-{n}.tmp", std::process::id()))
}

/// The directory a file `path` goes into (`.` for a bare file name).
pub fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// How an [`AtomicFile`] holds its data until the commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// An unnamed `O_TMPFILE` inode, linked into place by the commit.
    Unnamed,
    /// A named temporary file (registered for the signal handler), renamed by the commit.
    Named,
}

/// An output file being written; see the module doc. Dropped without
/// [`commit`](AtomicFile::commit), it leaves nothing.
#[derive(Debug)]
pub struct AtomicFile {
    target: PathBuf,
    dir: PathBuf,
    file: File,
    /// The named temporary (method [`Method::Named`]); `None` once committed or removed.
    temp: Option<PathBuf>,
}

impl AtomicFile {
    /// Starts writing `target`: unnamed in its directory where the file system supports
    /// it, else a named temporary there. Errors name the directory.
    pub fn create(target: &Path) -> Result<AtomicFile> {
        Self::create_with(target, Method::Unnamed)
    }

    /// [`AtomicFile::create`] with a chosen method ([`Method::Unnamed`] falls back to
    /// [`Method::Named`] where `O_TMPFILE` is unsupported).
    pub fn create_with(target: &Path, method: Method) -> Result<AtomicFile> {
        refuse_special(target)?;
        let dir = parent_dir(target).to_owned();
        install_handler();
        if method == Method::Unnamed {
            let flags = OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC;
            match rustix::fs::openat(CWD, &dir, flags, Mode::from_raw_mode(0o666)) {
                Ok(fd) => {
                    return Ok(AtomicFile {
                        target: target.to_owned(),
                        dir,
                        file: File::from(fd),
                        temp: None,
                    })
                }
                Err(Errno::OPNOTSUPP | Errno::ISDIR | Errno::INVAL) => {}
                Err(e) => return Err(dir_error(&dir, e.into())),
            }
        }
        let mut guard = live();
        let (file, temp) = create_named(&dir, target).map_err(|e| dir_error(&dir, e))?;
        guard.push(temp.clone());
        Ok(AtomicFile {
            target: target.to_owned(),
            dir,
            file,
            temp: Some(temp),
        })
    }

    /// The file being written (for `Write`, `Seek`, `set_len`).
    pub fn file(&mut self) -> &mut File {
        &mut self.file
    }

    /// Where the file goes.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// How the data is held until the commit.
    pub fn method(&self) -> Method {
        if self.temp.is_some() {
            Method::Named
        } else {
            Method::Unnamed
        }
    }

    /// Syncs the data and puts the file in place (replacing an existing target).
    pub fn commit(self) -> Result<()> {
        self.sync()?;
        self.place()
    }

    /// Syncs the data (`fsync`) without putting the file in place.
    fn sync(&self) -> Result<()> {
        self.file
            .sync_all()
            .map_err(|e| BalancerError::io(&self.target, e))
    }

    /// Puts the synced file in place (replacing an existing target).
    fn place(mut self) -> Result<()> {
        let target = self.target.clone();
        let mut guard = live();
        // Made a FIFO or a device since the file was started: the temporary goes, the node stays.
        refuse_special(&target)?;
        if let Some(temp) = self.temp.take() {
            let renamed = std::fs::rename(&temp, &target);
            if renamed.is_err() {
                let _ = std::fs::remove_file(&temp);
            }
            unregister(&mut guard, &temp);
            return renamed.map_err(|e| BalancerError::io(&target, e));
        }
        let proc_path = format!("/proc/self/fd/{}", self.file.as_raw_fd());
        let link = |to: &Path| rustix::fs::linkat(CWD, proc_path.as_str(), CWD, to, AtFlags::SYMLINK_FOLLOW);
        match link(&target) {
            Ok(()) => return Ok(()),
            Err(Errno::EXIST) => {}
            // No /proc: copy the data into a named temporary below.
            Err(Errno::NOENT) if !Path::new("/proc/self/fd").is_dir() => return self.commit_by_copy(guard),
            Err(e) => return Err(BalancerError::io(&target, e.into())),
        }
        // The target exists: link to a fresh temporary name, then rename over it.
        for _ in 0..100 {
            let temp = temp_name(&self.dir, &target);
            match link(&temp) {
                Ok(()) => {
                    guard.push(temp.clone());
                    let renamed = std::fs::rename(&temp, &target);
                    if renamed.is_err() {
                        let _ = std::fs::remove_file(&temp);
                    }
                    unregister(&mut guard, &temp);
                    return renamed.map_err(|e| BalancerError::io(&target, e));
                }
                Err(Errno::EXIST) => continue,
                Err(e) => return Err(BalancerError::io(&target, e.into())),
            }
        }
        Err(BalancerError::io(
            &target,
            io::Error::new(io::ErrorKind::AlreadyExists, "no free temporary name"),
        ))
    }

    /// Commit of an unnamed file without `/proc`: its data copied to a named temporary.
    fn commit_by_copy(mut self, mut guard: MutexGuard<'static, Vec<PathBuf>>) -> Result<()> {
        let target = self.target.clone();
        let (mut named, temp) = create_named(&self.dir, &target).map_err(|e| dir_error(&self.dir, e))?;
        guard.push(temp.clone());
        let copied = (|| {
            self.file.rewind()?;
            io::copy(&mut self.file, &mut named)?;
            named.sync_all()?;
            std::fs::rename(&temp, &target)
        })();
        if copied.is_err() {
            let _ = std::fs::remove_file(&temp);
        }
        unregister(&mut guard, &temp);
        copied.map_err(|e| BalancerError::io(&target, e))
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if let Some(temp) = self.temp.take() {
            let mut guard = live();
            let _ = std::fs::remove_file(&temp);
            unregister(&mut guard, &temp);
        }
    }
}

/// Creates `dir/.NAME.PID-N.tmp` (mode 0666 less the umask), new.
fn create_named(dir: &Path, target: &Path) -> io::Result<(File, PathBuf)> {
    use std::os::unix::fs::OpenOptionsExt;
    loop {
        let temp = temp_name(dir, target);
        match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o666)
            .open(&temp)
        {
            Ok(f) => return Ok((f, temp)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

fn dir_error(dir: &Path, e: io::Error) -> BalancerError {
    BalancerError::io(
        dir,
        io::Error::new(e.kind(), format!("cannot create a file in this directory: {e}")),
    )
}

/// Writes `bytes` to `target` atomically.
pub fn write_file(target: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = AtomicFile::create(target)?;
    f.write_all(bytes).map_err(|e| BalancerError::io(target, e))?;
    f.commit()
}

/// Commits `files`: syncs them all, side by side (each `fsync` waits on the disk), then puts
/// them in place in order. On a failure the error says which were written, which one failed
/// and which were not written (a failed sync: none written).
pub fn commit_all(files: Vec<AtomicFile>) -> Result<Vec<PathBuf>> {
    let targets: Vec<PathBuf> = files.iter().map(|f| f.target.clone()).collect();
    let synced: Vec<Result<()>> = std::thread::scope(|s| {
        let others: Vec<_> = files
            .iter()
            .skip(1)
            .map(|f| crate::spawn::side(s, move || f.sync()))
            .collect();
        let first = files.first().map_or(Ok(()), AtomicFile::sync);
        std::iter::once(first)
            .chain(others.into_iter().map(crate::spawn::Side::join))
            .collect()
    });
    if let Some((i, error)) = synced
        .into_iter()
        .enumerate()
        .find_map(|(i, r)| r.err().map(|e| (i, e)))
    {
        return Err(BalancerError::PartialWrite {
            written: Vec::new(),
            not_written: targets
                .iter()
                .enumerate()
                .filter(|&(j, _)| j != i)
                .map(|(_, t)| t.clone())
                .collect(),
            error: Box::new(error),
        });
    }
    for (i, f) in files.into_iter().enumerate() {
        if let Err(error) = f.place() {
            return Err(BalancerError::PartialWrite {
                written: targets[..i].to_vec(),
                not_written: targets[i + 1..].to_vec(),
                error: Box::new(error),
            });
        }
    }
    Ok(targets)
}

/// What a file that is not a regular file is, for messages (`None` for a regular file).
pub(crate) fn special_kind(meta: &std::fs::Metadata) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    Some(if t.is_file() {
        return None;
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    })
}

/// Errors when `output` exists and is not a regular file, symlinks followed: an output only
/// ever replaces a regular file (a FIFO or a device node, `/dev/null` as root, would be
/// replaced by a regular file). A missing path, or a symlink to a regular file, is fine.
pub fn refuse_special(output: &Path) -> Result<()> {
    let Ok(meta) = std::fs::metadata(output) else {
        return Ok(());
    };
    match special_kind(&meta) {
        None => Ok(()),
        Some(kind) => Err(BalancerError::InvalidParameter(format!(
            "refusing to write {}: it exists and is {kind}, not a regular file; an output only replaces a regular file (or a symlink to one): write elsewhere",
            output.display()
        ))),
    }
}

/// An input file, named by the option that gave it (for messages).
#[derive(Debug, Clone)]
pub struct Input {
    /// The input file.
    pub path: PathBuf,
    /// How the user gave it (an option, `--memory-usage`, or a description), for messages.
    pub option: String,
}

impl Input {
    /// The input `path`, given by `option`.
    pub fn new(path: impl Into<PathBuf>, option: impl Into<String>) -> Input {
        Input {
            path: path.into(),
            option: option.into(),
        }
    }
}

/// Errors when `output` is one of `inputs`: the same file (device and inode) or the same
/// canonical path. An output that does not exist yet is no input.
pub fn refuse_input(output: &Path, inputs: &[Input]) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let Ok(out) = std::fs::metadata(output) else {
        return Ok(());
    };
    let out_canon = std::fs::canonicalize(output).ok();
    for input in inputs {
        let same_inode =
            std::fs::metadata(&input.path).is_ok_and(|m| m.dev() == out.dev() && m.ino() == out.ino());
        let same_path = out_canon.is_some() && std::fs::canonicalize(&input.path).ok() == out_canon;
        if same_inode || same_path {
            return Err(BalancerError::InvalidParameter(format!(
                "refusing to write {}: it is the input {} ({}); an output never replaces an input: write elsewhere",
                output.display(),
                input.path.display(),
                input.option
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// The Rust runtime starts every program ignoring SIGPIPE: the mask read shows it.
    #[test]
    fn ignored_signals_reads_the_process_mask() {
        let sigpipe = signal_hook::consts::SIGPIPE;
        assert_ne!(ignored_signals() & (1u64 << (sigpipe - 1)), 0);
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn both_methods_write_new_and_replace_existing_files() {
        for method in [Method::Unnamed, Method::Named] {
            let dir = tempfile::tempdir().unwrap();
            let target = dir.path().join("out.bin");
            let mut f = AtomicFile::create_with(&target, method).unwrap();
            f.write_all(b"first").unwrap();
            // Nothing visible before the commit but, for Named, its temporary.
            let before = entries(dir.path());
            match f.method() {
                Method::Unnamed => assert!(before.is_empty(), "{before:?}"),
                Method::Named => assert!(
                    before.len() == 1 && before[0].starts_with(".out.bin.") && before[0].ends_with(".tmp"),
                    "{before:?}"
                ),
            }
            f.commit().unwrap();
            assert_eq!(std::fs::read(&target).unwrap(), b"first");
            let mut g = AtomicFile::create_with(&target, method).unwrap();
            g.write_all(b"second").unwrap();
            assert_eq!(std::fs::read(&target).unwrap(), b"first");
            g.commit().unwrap();
            assert_eq!(std::fs::read(&target).unwrap(), b"second");
            assert_eq!(entries(dir.path()), ["out.bin"]);
            // 0666 less the umask (the test's umask is 022 or stricter).
            let mode = std::fs::metadata(&target).unwrap().permissions().mode() & 0o777;
            assert!(mode & 0o600 == 0o600 && mode & 0o022 == 0, "mode {mode:o}");
        }
    }

    #[test]
    fn dropped_files_leave_nothing() {
        for method in [Method::Unnamed, Method::Named] {
            let dir = tempfile::tempdir().unwrap();
            let mut f = AtomicFile::create_with(&dir.path().join("x"), method).unwrap();
            f.write_all(b"data").unwrap();
            drop(f);
            assert!(entries(dir.path()).is_empty());
            assert!(
                !live().iter().any(|p| p.starts_with(dir.path())),
                "still registered for the signal handler"
            );
        }
    }

    #[test]
    fn commit_all_names_what_was_written() {
        let dir = tempfile::tempdir().unwrap();
        let a = AtomicFile::create(&dir.path().join("a")).unwrap();
        let b = AtomicFile::create(&dir.path().join("b")).unwrap();
        let c = AtomicFile::create(&dir.path().join("c")).unwrap();
        // b's target becomes a non-empty directory: its commit fails.
        std::fs::create_dir_all(dir.path().join("b/sub")).unwrap();
        let e = commit_all(vec![a, b, c]).unwrap_err().to_string();
        assert!(
            e.contains("wrote ")
                && e.contains("/a")
                && e.contains("/b")
                && e.contains("not written: ")
                && e.contains("/c"),
            "{e}"
        );
        assert!(dir.path().join("a").is_file() && !dir.path().join("c").exists());
    }

    /// A FIFO and a character device made in `dir` (the device numbers of `/dev/null`, so
    /// writing it would be harmless; never the real `/dev`); the device only as root.
    fn special_nodes(dir: &Path) -> Vec<PathBuf> {
        use rustix::fs::{makedev, mknodat, FileType};
        let fifo = dir.join("fifo");
        mknodat(CWD, &fifo, FileType::Fifo, Mode::from_raw_mode(0o666), 0).unwrap();
        let mut nodes = vec![fifo];
        let dev = dir.join("null");
        match mknodat(
            CWD,
            &dev,
            FileType::CharacterDevice,
            Mode::from_raw_mode(0o666),
            makedev(1, 3),
        ) {
            Ok(()) => nodes.push(dev),
            Err(e) => eprintln!("SKIP the device node case: mknod: {e} (needs root)"),
        }
        nodes
    }

    #[test]
    fn special_files_are_refused_never_replaced() {
        use std::os::unix::fs::FileTypeExt;
        let dir = tempfile::tempdir().unwrap();
        for node in special_nodes(dir.path()) {
            let kind = std::fs::symlink_metadata(&node).unwrap().file_type();
            for method in [Method::Unnamed, Method::Named] {
                let e = AtomicFile::create_with(&node, method).unwrap_err().to_string();
                assert!(
                    e.contains("refusing to write")
                        && e.contains(&node.display().to_string())
                        && e.contains("not a regular file"),
                    "{e}"
                );
            }
            let e = write_file(&node, b"x").unwrap_err().to_string();
            assert!(e.contains("refusing to write"), "{e}");
            // Through a symlink too.
            let link = dir
                .path()
                .join(format!("{}.link", node.file_name().unwrap().to_string_lossy()));
            std::os::unix::fs::symlink(&node, &link).unwrap();
            assert!(write_file(&link, b"x").is_err());
            let now = std::fs::symlink_metadata(&node).unwrap().file_type();
            assert!(now.is_fifo() == kind.is_fifo() && now.is_char_device() == kind.is_char_device());
        }
        // Made a FIFO after the file was started: refused at the commit, nothing left.
        for method in [Method::Unnamed, Method::Named] {
            let late = dir.path().join(format!("late-{method:?}"));
            let mut f = AtomicFile::create_with(&late, method).unwrap();
            f.write_all(b"data").unwrap();
            rustix::fs::mknodat(
                CWD,
                &late,
                rustix::fs::FileType::Fifo,
                Mode::from_raw_mode(0o666),
                0,
            )
            .unwrap();
            let e = f.commit().unwrap_err().to_string();
            assert!(e.contains("FIFO"), "{e}");
            assert!(std::fs::symlink_metadata(&late).unwrap().file_type().is_fifo());
        }
        assert!(entries(dir.path()).iter().all(|e| !e.ends_with(".tmp")));
        // A symlink to a regular file is an output like any other.
        let regular = dir.path().join("regular");
        std::fs::write(&regular, b"old").unwrap();
        let link = dir.path().join("to-regular");
        std::os::unix::fs::symlink(&regular, &link).unwrap();
        write_file(&link, b"new").unwrap();
        assert_eq!(std::fs::read(&link).unwrap(), b"new");
    }

    #[test]
    fn inputs_are_refused_by_inode_and_path() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.json");
        std::fs::write(&input, b"{}").unwrap();
        let hard = dir.path().join("hard.json");
        std::fs::hard_link(&input, &hard).unwrap();
        let inputs = [Input::new(&input, "--memory-usage")];
        for out in [input.clone(), hard, dir.path().join("./in.json")] {
            let e = refuse_input(&out, &inputs).unwrap_err().to_string();
            assert!(
                e.contains("refusing to write") && e.contains("--memory-usage"),
                "{e}"
            );
        }
        refuse_input(&dir.path().join("other.json"), &inputs).unwrap();
        std::fs::write(dir.path().join("other.json"), b"{}").unwrap();
        refuse_input(&dir.path().join("other.json"), &inputs).unwrap();
    }
}
