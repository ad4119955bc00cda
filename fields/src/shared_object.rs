//! Shared objects of the kernel caches (the C back end's and the emulated
//! GPU's): compiled from source once ([`load_or_build`], the one
//! compile-and-load path both use), installed whole, checked before they
//! are loaded.
//!
//! Loading a truncated or overwritten shared object maps pages past its
//! end and kills the process with SIGBUS, no message and no way to
//! recover. So an object is installed with a checksum file beside it
//! (`NAME.sum`: its length and a 64-bit FNV-1a hash of its bytes), both
//! written under temporary names and renamed into place, object first;
//! before it is loaded, [`verify`] compares the object with its checksum.
//! Whatever does not match (no checksum file, another length, another
//! hash: a writer killed half-way, a disk error, another program's file)
//! is a cache miss that the caller rebuilds; [`note_rebuilt`] says so in
//! the log.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// The checksum file of the object at `path` (`path` with `.sum` added).
pub fn checksum_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(".sum");
    PathBuf::from(name)
}

/// 64-bit FNV-1a of `bytes`: a hash stable across builds and runs (for
/// checksums and cache names).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn checksum_text(bytes: &[u8]) -> String {
    format!("{} {:016x}\n", bytes.len(), fnv1a(bytes))
}

/// A name no other process or thread uses, beside `path`
/// (`NAME.tmp-PID-N`; [`sweep_orphaned_temporaries`] reads it back).
pub fn temporary(path: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut name = path.as_os_str().to_os_string();
    name.push(format!(".tmp-{}-{n}", std::process::id()));
    PathBuf::from(name)
}

/// Removes the temporary files (`NAME.tmp-PID-N`, see [`temporary`]) that
/// a compiling process killed mid-way left in `directory`: those whose
/// process no longer runs (where that can be told: Linux's `/proc`).
/// Best effort; returns how many went.
pub fn sweep_orphaned_temporaries(directory: &Path) -> usize {
    let Ok(items) = std::fs::read_dir(directory) else {
        return 0;
    };
    let mut removed = 0;
    for item in items.flatten() {
        let name = item.file_name().to_string_lossy().into_owned();
        let Some(pid) = orphan_pid(&name) else {
            continue;
        };
        let running = !Path::new("/proc").is_dir() || Path::new(&format!("/proc/{pid}")).exists();
        if !running && std::fs::remove_file(item.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// The writer's process id in a temporary's name `NAME.tmp-PID-N`.
fn orphan_pid(name: &str) -> Option<u32> {
    let (_, tail) = name.rsplit_once(".tmp-")?;
    let (pid, counter) = tail.split_once('-')?;
    counter.parse::<u64>().ok()?;
    pid.parse().ok()
}

/// Moves the finished object `built` to `path` and writes its checksum
/// file beside it (both through renames, so a reader sees whole files).
pub fn install(built: &Path, path: &Path) -> std::io::Result<()> {
    let bytes = std::fs::read(built)?;
    let sum = checksum_path(path);
    let sum_temporary = temporary(&sum);
    std::fs::write(&sum_temporary, checksum_text(&bytes))?;
    let renamed = std::fs::rename(built, path).and_then(|()| std::fs::rename(&sum_temporary, &sum));
    if renamed.is_err() {
        let _ = std::fs::remove_file(&sum_temporary);
    }
    renamed
}

/// Whether the object at `path` is whole: `Err` says what does not match.
pub fn verify(path: &Path) -> Result<(), String> {
    let sum = checksum_path(path);
    let expected = std::fs::read_to_string(&sum)
        .map_err(|e| format!("its checksum file {} cannot be read ({e})", sum.display()))?;
    let bytes = std::fs::read(path).map_err(|e| format!("it cannot be read ({e})"))?;
    let actual = checksum_text(&bytes);
    if actual == expected {
        Ok(())
    } else {
        Err(format!(
            "it holds {} bytes with hash {}, its checksum file says {}",
            bytes.len(),
            actual.trim().split(' ').nth(1).unwrap_or("?"),
            expected.trim()
        ))
    }
}

/// Logs that the cached object at `path` failed [`verify`] for `reason`
/// and is being rebuilt.
pub fn note_rebuilt(path: &Path, reason: &str) {
    tracing::warn!(
        object = %path.display(),
        "cached kernel is not whole ({reason}); rebuilding it"
    );
}

/// One shared object to load from a cache directory, compiled from its
/// source when the directory does not hold it whole.
pub struct ObjectRequest<'a> {
    /// The cache directory (created on demand).
    pub directory: &'a Path,
    /// The entry's name: the object is `KEY.so`, its source `KEY.EXT`
    /// beside it. It must say everything the object depends on (source,
    /// compiler, flags): an entry is never checked against its source.
    pub key: &'a str,
    /// The source text.
    pub source: &'a str,
    /// The source file's extension (`c`, `cpp`).
    pub extension: &'a str,
    /// The compiler's command line for a source file and an object file.
    pub command: &'a dyn Fn(&Path, &Path) -> Command,
    /// A symbol the object must define: one that loads without it is a
    /// corrupt entry, rebuilt.
    pub symbol: &'a str,
}

/// How [`load_or_build`] found its object.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ObjectSource {
    /// Already loaded by this process.
    Memory,
    /// Loaded from the cache directory.
    Disk,
    /// Compiled now (it was absent), taking this long.
    Built(Duration),
    /// Compiled again (the entry was not whole or did not load).
    Rebuilt(Duration),
}

/// Why an object could not be had.
#[derive(Debug, Clone, PartialEq)]
pub enum ObjectError {
    /// A file operation failed (`what` names the file).
    Io {
        /// What was being done.
        what: String,
        /// The system's error.
        reason: String,
    },
    /// The compiler refused the source (kept at `source_path` for a look);
    /// remembered, so the same request is refused again without a second
    /// compiler run.
    Refused {
        /// The command line that ran.
        command: String,
        /// What the compiler said.
        log: String,
        /// Where the source is kept.
        source_path: PathBuf,
        /// How long the compiler ran for this call; `None` when the
        /// refusal came from memory.
        ran: Option<Duration>,
    },
    /// The object was built but does not load.
    Load {
        /// The object.
        path: PathBuf,
        /// The loader's message.
        reason: String,
    },
}

impl std::fmt::Display for ObjectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ObjectError::Io { what, reason } => write!(f, "{what}: {reason}"),
            ObjectError::Refused {
                command,
                log,
                source_path,
                ..
            } => write!(f, "`{command}` refused {}:\n{log}", source_path.display()),
            ObjectError::Load { path, reason } => {
                write!(f, "cannot load {}: {reason}", path.display())
            }
        }
    }
}

/// A command line as text (program and arguments, space separated).
fn describe(command: &Command) -> String {
    std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|part| part.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Per-process memos of the loader, by object path.
#[derive(Default)]
struct Memos {
    loaded: HashMap<PathBuf, Arc<libloading::Library>>,
    refused: HashMap<PathBuf, ObjectError>,
    /// One lock per object: threads asking for one new object at once
    /// wait for the first one's compilation instead of each running the
    /// compiler (8 threads asking for 3 new kernels ran it 24 times).
    gates: HashMap<PathBuf, Arc<Mutex<()>>>,
}

fn memos() -> std::sync::MutexGuard<'static, Memos> {
    static MEMOS: OnceLock<Mutex<Memos>> = OnceLock::new();
    MEMOS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// The object `request` names, loaded: from this process's memory, else
/// from the cache directory when the entry there is whole (its checksum
/// matches) and defines the symbol, else compiled from the source (again,
/// for an entry that was not whole: noted in the log) and installed. The
/// library stays loaded for the life of the process.
pub fn load_or_build(
    request: &ObjectRequest<'_>,
) -> Result<(Arc<libloading::Library>, ObjectSource), ObjectError> {
    let path = request.directory.join(format!("{}.so", request.key));
    if let Some(found) = memos().loaded.get(&path) {
        return Ok((found.clone(), ObjectSource::Memory));
    }
    let gate = memos().gates.entry(path.clone()).or_default().clone();
    let _building = gate.lock().unwrap_or_else(|p| p.into_inner());
    {
        let memos = memos();
        if let Some(found) = memos.loaded.get(&path) {
            return Ok((found.clone(), ObjectSource::Memory));
        }
        if let Some(refusal) = memos.refused.get(&path) {
            let mut refusal = refusal.clone();
            if let ObjectError::Refused { ran, .. } = &mut refusal {
                *ran = None;
            }
            return Err(refusal);
        }
    }
    let result = load_or_build_uncached(request, &path);
    let mut memos = memos();
    match result {
        Ok((library, source)) => {
            let library = memos.loaded.entry(path).or_insert(library).clone();
            Ok((library, source))
        }
        Err(refusal @ ObjectError::Refused { .. }) => {
            // The compiler's verdict on this source does not change within
            // a process. (I/O failures are not remembered: the directory
            // may become writable.)
            memos.refused.insert(path, refusal.clone());
            Err(refusal)
        }
        Err(other) => Err(other),
    }
}

/// Opens the object at `path`, which must define `symbol`.
fn open(path: &Path, symbol: &str) -> Result<libloading::Library, String> {
    // SAFETY: the caches hold objects compiled from generated code without
    // initialisers of its own (a C++ shim runs only its runtime's); loading
    // one runs nothing else.
    let library = unsafe { libloading::Library::new(path) }.map_err(|e| e.to_string())?;
    // SAFETY: only looks the symbol up; nothing is called.
    let defined = unsafe { library.get::<*const ()>(symbol.as_bytes()) }.is_ok();
    if defined {
        Ok(library)
    } else {
        Err(format!("it does not define {symbol}"))
    }
}

/// [`load_or_build`] without the memos.
fn load_or_build_uncached(
    request: &ObjectRequest<'_>,
    path: &Path,
) -> Result<(Arc<libloading::Library>, ObjectSource), ObjectError> {
    let mut rebuilding = false;
    if path.exists() {
        // A truncated or overwritten object would kill the process when
        // loaded (SIGBUS): check it against its checksum first.
        let whole = verify(path).inspect_err(|why| note_rebuilt(path, why));
        match whole.and_then(|()| open(path, request.symbol)) {
            Ok(library) => {
                // Mark it used, so that eviction keeps it over unused ones.
                if let Ok(file) = std::fs::File::options().append(true).open(path) {
                    let _ = file.set_modified(std::time::SystemTime::now());
                }
                return Ok((Arc::new(library), ObjectSource::Disk));
            }
            Err(_) => rebuilding = true,
        }
    }
    let took = build(request, path)?;
    let library = open(path, request.symbol).map_err(|reason| ObjectError::Load {
        path: path.to_path_buf(),
        reason,
    })?;
    let source = if rebuilding {
        ObjectSource::Rebuilt(took)
    } else {
        ObjectSource::Built(took)
    };
    Ok((Arc::new(library), source))
}

/// Compiles the request's source into `path` (through temporary names,
/// then renamed into place with its checksum); the source is kept beside
/// the object. Returns how long the compiler ran.
fn build(request: &ObjectRequest<'_>, path: &Path) -> Result<Duration, ObjectError> {
    let io = |what: String, e: std::io::Error| ObjectError::Io {
        what,
        reason: e.to_string(),
    };
    std::fs::create_dir_all(request.directory)
        .map_err(|e| io(format!("creating {}", request.directory.display()), e))?;
    let source_path = path.with_extension(request.extension);
    let source_temporary = temporary(&source_path);
    std::fs::write(&source_temporary, request.source)
        .map_err(|e| io(format!("writing {}", source_temporary.display()), e))?;
    let object_temporary = temporary(path);
    let mut command = (request.command)(&source_temporary, &object_temporary);
    let described = describe(&command);
    let started = std::time::Instant::now();
    let output = command.output();
    let took = started.elapsed();
    let output = match output {
        Ok(output) => output,
        Err(e) => {
            let _ = std::fs::remove_file(&source_temporary);
            let program = command.get_program().to_string_lossy().into_owned();
            return Err(io(format!("running `{program}`"), e));
        }
    };
    // Keep the source beside the object, or for a look at a refusal (best
    // effort).
    let kept = std::fs::rename(&source_temporary, &source_path).is_ok();
    if !kept {
        let _ = std::fs::remove_file(&source_temporary);
    }
    if !output.status.success() {
        let _ = std::fs::remove_file(&object_temporary);
        return Err(ObjectError::Refused {
            command: described,
            log: String::from_utf8_lossy(&output.stderr).into_owned(),
            source_path,
            ran: Some(took),
        });
    }
    install(&object_temporary, path).map_err(|e| {
        let _ = std::fs::remove_file(&object_temporary);
        io(format!("installing {}", path.display()), e)
    })?;
    Ok(took)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporaries_of_processes_that_are_gone_are_swept_and_others_kept() {
        let dir = tempfile::tempdir().unwrap();
        // No process has pid 4194305: Linux's pid_max is at most 2^22.
        let gone = dir.path().join("ws_ab.so.tmp-4194305-0");
        let mine = dir
            .path()
            .join(format!("ws_cd.c.tmp-{}-3", std::process::id()));
        let kept = dir.path().join("ws_ef.so");
        for path in [&gone, &mine, &kept] {
            std::fs::write(path, b"x").unwrap();
        }
        if std::path::Path::new("/proc").is_dir() {
            assert_eq!(sweep_orphaned_temporaries(dir.path()), 1);
            assert!(!gone.exists());
        }
        assert!(mine.exists() && kept.exists());
    }

    /// The C compiler's command line for the loader's tests (`$CC`, else
    /// `cc`).
    fn c_command(source: &Path, object: &Path) -> Command {
        let mut command = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()));
        command
            .args(["-shared", "-fPIC", "-o"])
            .arg(object)
            .args(["-x", "c"])
            .arg(source);
        command
    }

    #[test]
    fn an_object_is_built_once_then_found_and_a_broken_entry_is_rebuilt() {
        if Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
            .arg("--version")
            .output()
            .is_err()
        {
            eprintln!("skipped: no C compiler");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let run = |(key, source): (&str, &str)| {
            load_or_build(&ObjectRequest {
                directory: dir.path(),
                key,
                source,
                extension: "c",
                command: &c_command,
                symbol: key,
            })
        };
        let good = (
            "ws_loader_good",
            "double ws_loader_good(double x) { return x; }\n",
        );
        let (_, first) = run(good).unwrap();
        assert!(matches!(first, ObjectSource::Built(_)), "{first:?}");
        assert!(dir.path().join("ws_loader_good.c").exists(), "source kept");
        verify(&dir.path().join("ws_loader_good.so")).unwrap();
        let (_, second) = run(good).unwrap();
        assert_eq!(second, ObjectSource::Memory);

        // An entry another process left truncated is rebuilt, not loaded.
        let other = (
            "ws_loader_other",
            "double ws_loader_other(double x) { return -x; }\n",
        );
        let built = tempfile::tempdir().unwrap();
        let bytes = {
            let object = built.path().join("o.so");
            let source = built.path().join("o.c");
            std::fs::write(&source, other.1).unwrap();
            assert!(c_command(&source, &object).status().unwrap().success());
            std::fs::read(&object).unwrap()
        };
        let path = dir.path().join("ws_loader_other.so");
        let whole = built.path().join("whole.so");
        std::fs::write(&whole, &bytes).unwrap();
        install(&whole, &path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        let (_, found) = run(other).unwrap();
        assert!(matches!(found, ObjectSource::Rebuilt(_)), "{found:?}");
        verify(&path).unwrap();

        // A refusal names the command and keeps the source; the second
        // request is refused from memory.
        let broken = ("ws_loader_broken", "double ws_loader_broken( { not C }\n");
        match run(broken) {
            Err(ObjectError::Refused {
                command,
                source_path,
                ran: Some(_),
                ..
            }) => {
                assert!(command.contains("-shared"), "{command}");
                assert!(source_path.ends_with("ws_loader_broken.c"));
                assert!(source_path.exists());
            }
            other => panic!("expected a fresh refusal, got {other:?}"),
        }
        assert!(matches!(
            run(broken),
            Err(ObjectError::Refused { ran: None, .. })
        ));
    }

    #[test]
    fn temporaries_name_their_writer() {
        assert_eq!(orphan_pid("ws_ab.so.tmp-4242-7"), Some(4242));
        assert_eq!(orphan_pid("ws_ab.so"), None);
        assert_eq!(orphan_pid("ws_ab.so.tmp-x-7"), None);
        let name = temporary(Path::new("/x/k.so"));
        let name = name.file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(orphan_pid(&name), Some(std::process::id()));
    }

    #[test]
    fn an_installed_object_verifies_and_any_change_is_caught() {
        let dir = tempfile::tempdir().unwrap();
        let built = dir.path().join("built");
        let path = dir.path().join("k.so");
        let bytes: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&built, &bytes).unwrap();
        install(&built, &path).unwrap();
        assert!(!built.exists());
        verify(&path).unwrap();
        // Truncated.
        std::fs::write(&path, &bytes[..1000]).unwrap();
        let why = verify(&path).unwrap_err();
        assert!(why.contains("1000 bytes"), "{why}");
        // One bit flipped.
        let mut flipped = bytes.clone();
        flipped[2000] ^= 0x10;
        std::fs::write(&path, &flipped).unwrap();
        assert!(verify(&path).unwrap_err().contains("hash"));
        // No checksum file (a cache from before the checksums).
        std::fs::write(&path, &bytes).unwrap();
        verify(&path).unwrap();
        std::fs::remove_file(checksum_path(&path)).unwrap();
        assert!(verify(&path).unwrap_err().contains("checksum file"));
    }
}
