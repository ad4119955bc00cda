//! Shared objects of the kernel caches (the C back end's and the emulated
//! GPU's), checked before they are loaded.
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

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The checksum file of the object at `path` (`path` with `.sum` added).
pub fn checksum_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(".sum");
    PathBuf::from(name)
}

/// 64-bit FNV-1a of `bytes`.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn checksum_text(bytes: &[u8]) -> String {
    format!("{} {:016x}\n", bytes.len(), fnv1a(bytes))
}

/// A name no other process or thread uses, beside `path`.
fn temporary(path: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut name = path.as_os_str().to_os_string();
    name.push(format!(".tmp-{}-{n}", std::process::id()));
    PathBuf::from(name)
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

#[cfg(test)]
mod tests {
    use super::*;

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
