//! Keeping the kernel cache on disk under its size limit without listing
//! it after every compilation.
//!
//! [`evict`] lists a cache directory and deletes its least recently used
//! entries once they take more than the limit. Listing costs one `stat`
//! per file: with a full cache (tens of thousands of files) that was about
//! 80 ms, which every compilation paid on top of the compiler's run.
//! [`CacheSizes`] remembers, per directory, what this process found at its
//! last listing plus what it has written since, and [`bound_after_build`]
//! lists the directory only the first time this process writes into it
//! and whenever that count passes the limit.
//!
//! What another process writes meanwhile is not counted until one of our
//! listings sees it, so with several writers the cache can pass its limit
//! by what the others wrote since our last listing; each writer lists the
//! directory once its own count passes the limit, so the overshoot stays
//! bounded by what the writers add between two listings (as before, the
//! bound is best effort).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use watershed_fields::shared_object;

/// Bounds the kernel cache in `directory` to `limit` bytes: when its
/// entries (`ws_*` sources and libraries, grouped by key) take more, the
/// least recently written or used ones are deleted until they take at most
/// three quarters of it. The entry `keep` (just written) is never deleted.
/// Deleting a library another process has loaded is harmless (the mapping
/// stays); one it is about to load is rebuilt (`compile::library_for`
/// treats an entry that fails to load as a miss). Returns how many entries
/// went.
pub fn evict(directory: &Path, limit: u64, keep: &str) -> std::io::Result<usize> {
    evict_counting(directory, limit, keep).map(|outcome| outcome.evicted)
}

/// What one listing of a cache directory did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Eviction {
    /// Entries deleted.
    pub evicted: usize,
    /// Bytes of the entries left.
    pub bytes_left: u64,
}

/// [`evict`], also saying how many bytes the entries left take.
pub fn evict_counting(directory: &Path, limit: u64, keep: &str) -> std::io::Result<Eviction> {
    shared_object::sweep_orphaned_temporaries(directory);
    let mut entries: HashMap<String, (u64, std::time::SystemTime, Vec<PathBuf>)> = HashMap::new();
    let mut total = 0u64;
    for item in std::fs::read_dir(directory)? {
        let item = item?;
        let name = item.file_name().to_string_lossy().into_owned();
        let Some(stem) = entry_key(&name) else {
            continue;
        };
        let metadata = item.metadata()?;
        let modified = metadata.modified()?;
        total = total.saturating_add(metadata.len());
        let entry = entries
            .entry(stem.to_string())
            .or_insert((0, modified, Vec::new()));
        entry.0 = entry.0.saturating_add(metadata.len());
        entry.1 = entry.1.max(modified);
        entry.2.push(item.path());
    }
    if total <= limit {
        return Ok(Eviction {
            evicted: 0,
            bytes_left: total,
        });
    }
    let mut oldest_first: Vec<_> = entries.into_iter().filter(|(k, _)| k != keep).collect();
    oldest_first.sort_by(|a, b| a.1.1.cmp(&b.1.1).then_with(|| a.0.cmp(&b.0)));
    let target = limit / 4 * 3;
    let mut evicted = 0;
    for (_, (bytes, _, paths)) in oldest_first {
        if total <= target {
            break;
        }
        for path in paths {
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        total = total.saturating_sub(bytes);
        evicted += 1;
    }
    Ok(Eviction {
        evicted,
        bytes_left: total,
    })
}

/// The entry a cache file belongs to: `ws_KEY` for `ws_KEY.c`,
/// `ws_KEY.so` and `ws_KEY.so.sum`; `None` for any other file.
fn entry_key(name: &str) -> Option<&str> {
    name.strip_suffix(".so")
        .or_else(|| name.strip_suffix(".so.sum"))
        .or_else(|| name.strip_suffix(".c"))
        .filter(|stem| stem.starts_with("ws_"))
}

/// What one process knows of its cache directories' sizes: per directory,
/// the bytes its last listing found plus those it wrote since.
///
/// ```
/// use std::path::Path;
/// use watershed_backends::codegen::cache_bound::CacheSizes;
///
/// let mut sizes = CacheSizes::default();
/// let cache = Path::new("/tmp/kernels");
/// // Never listed by this process: list it.
/// assert!(sizes.needs_listing(cache, 100, 1000));
/// sizes.listed(cache, 600);
/// // 600 + 300 bytes are within the limit; 900 + 200 are not.
/// assert!(!sizes.needs_listing(cache, 300, 1000));
/// assert!(sizes.needs_listing(cache, 200, 1000));
/// ```
#[derive(Debug, Default)]
pub struct CacheSizes {
    /// (directory, bytes): a process uses one or a few directories.
    known: Vec<(PathBuf, u64)>,
}

impl CacheSizes {
    /// Knows no directory yet (every directory is listed on its first
    /// build).
    pub const fn new() -> Self {
        CacheSizes { known: Vec::new() }
    }

    /// The bytes this process counts in `directory`, if it listed it.
    pub fn known_bytes(&self, directory: &Path) -> Option<u64> {
        self.known
            .iter()
            .find(|(known, _)| known == directory)
            .map(|(_, bytes)| *bytes)
    }

    /// Counts an entry of `added` bytes just written into `directory`, and
    /// says whether the directory must now be listed: this process has
    /// never listed it, or its count passes `limit`.
    pub fn needs_listing(&mut self, directory: &Path, added: u64, limit: u64) -> bool {
        match self.known.iter_mut().find(|(known, _)| known == directory) {
            None => true,
            Some((_, bytes)) => {
                *bytes = bytes.saturating_add(added);
                *bytes > limit
            }
        }
    }

    /// Records what a listing of `directory` left: `bytes_left` bytes.
    pub fn listed(&mut self, directory: &Path, bytes_left: u64) {
        match self.known.iter_mut().find(|(known, _)| known == directory) {
            Some((_, bytes)) => *bytes = bytes_left,
            None => self.known.push((directory.to_path_buf(), bytes_left)),
        }
    }
}

/// Keeps `directory` under `limit` bytes after the entry `key` was written
/// into it: counts the entry's bytes in `sizes` and lists the directory
/// ([`evict_counting`]) only when [`CacheSizes::needs_listing`] says so.
/// Returns how many entries went.
pub fn bound_after_build(
    sizes: &Mutex<CacheSizes>,
    directory: &Path,
    key: &str,
    limit: u64,
) -> std::io::Result<usize> {
    let added: u64 = ["c", "so", "so.sum"]
        .iter()
        .filter_map(|extension| {
            std::fs::metadata(directory.join(format!("{key}.{extension}"))).ok()
        })
        .map(|metadata| metadata.len())
        .sum();
    // One listing at a time per process: two threads that both pass the
    // limit would otherwise list and evict together.
    let mut sizes = sizes
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if !sizes.needs_listing(directory, added, limit) {
        return Ok(0);
    }
    let outcome = evict_counting(directory, limit, key)?;
    sizes.listed(directory, outcome.bytes_left);
    Ok(outcome.evicted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fresh_directory(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("ws_cache_bound_{name}_{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn write_entry(dir: &Path, key: &str, bytes: usize) {
        std::fs::write(dir.join(format!("{key}.c")), vec![b'c'; bytes / 4]).unwrap();
        std::fs::write(dir.join(format!("{key}.so")), vec![b's'; bytes - bytes / 4]).unwrap();
    }

    fn entries(dir: &Path) -> usize {
        std::fs::read_dir(dir)
            .unwrap()
            .filter(|item| {
                let name = item.as_ref().unwrap().file_name();
                name.to_string_lossy().ends_with(".so")
            })
            .count()
    }

    /// The first build lists the directory; later builds within the limit
    /// do not (a file written by "another process" meanwhile is not seen);
    /// the build whose count passes the limit lists it and evicts down to
    /// three quarters, counting what the other process wrote.
    #[test]
    fn the_directory_is_listed_first_and_when_the_count_passes_the_limit() {
        let dir = fresh_directory("count");
        let sizes = Mutex::new(CacheSizes::default());
        // Entries a moment apart, so that their ages order them.
        let pause = || std::thread::sleep(std::time::Duration::from_millis(20));
        write_entry(&dir, "ws_a", 400);
        assert_eq!(bound_after_build(&sizes, &dir, "ws_a", 1000).unwrap(), 0);
        assert_eq!(sizes.lock().unwrap().known_bytes(&dir).unwrap(), 400);
        // Another writer's 500 bytes: not counted by this process.
        pause();
        write_entry(&dir, "ws_other", 500);
        pause();
        write_entry(&dir, "ws_b", 300);
        assert_eq!(bound_after_build(&sizes, &dir, "ws_b", 1000).unwrap(), 0);
        assert_eq!(sizes.lock().unwrap().known_bytes(&dir).unwrap(), 700);
        assert_eq!(
            entries(&dir),
            3,
            "no listing, no eviction, though 1200 bytes are there"
        );
        // 700 + 400 passes 1000: the listing finds 1600 bytes and deletes
        // the oldest entries (ws_a, then the other writer's) down to 750
        // or less; the new one stays.
        pause();
        write_entry(&dir, "ws_c", 400);
        assert_eq!(bound_after_build(&sizes, &dir, "ws_c", 1000).unwrap(), 2);
        assert_eq!(sizes.lock().unwrap().known_bytes(&dir).unwrap(), 700);
        assert!(!dir.join("ws_a.so").exists() && !dir.join("ws_other.so").exists());
        assert!(dir.join("ws_b.so").exists() && dir.join("ws_c.so").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Files that are not cache entries are neither counted nor deleted.
    #[test]
    fn other_files_are_not_entries() {
        assert_eq!(entry_key("ws_ab.so.sum"), Some("ws_ab"));
        assert_eq!(entry_key("ws_ab.c"), Some("ws_ab"));
        assert_eq!(entry_key("ws_ab.so"), Some("ws_ab"));
        assert_eq!(entry_key("README"), None);
        assert_eq!(entry_key("other.so"), None);
        assert_eq!(entry_key("ws_ab.so.tmp-12-3"), None);
    }
}
