//! How much memory the machine has available, and the check that refuses
//! a host allocation that would exhaust it, naming what asked for it,
//! before the kernel's out-of-memory killer ends the process without a
//! word.
//!
//! The figure is Linux's `MemAvailable` (`/proc/meminfo`): what can be
//! allocated without swapping. Reading it costs a file read, so
//! [`check_host_allocation`] reads it for every allocation of at least
//! [`CHECK_EVERY_BYTES`] and once per that many bytes of smaller ones (a
//! run that allocates 100,000 small fields is checked as it grows). Where
//! the figure is unknown (not Linux) nothing is refused.

use crate::error::{FieldError, FieldResult};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Allocations at least this large are checked one by one; smaller ones
/// once per this many bytes.
pub const CHECK_EVERY_BYTES: usize = 64 << 20;

/// Memory the machine can still allocate without swapping, in bytes
/// (`MemAvailable` of `/proc/meminfo`), or `None` where unknown.
pub fn available_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_mem_available(&text)
}

/// `MemAvailable` of a `/proc/meminfo` text, in bytes.
fn parse_mem_available(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let mut words = line.split_whitespace().skip(1);
    let value: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") => value.checked_mul(1024),
        None => Some(value),
        Some(_) => None,
    }
}

static UNCHECKED: AtomicUsize = AtomicUsize::new(0);

/// Refuses a new host allocation of `bytes` for `label` (a field's name)
/// when it exceeds the memory available ([`FieldError::MemoryExhausted`],
/// naming `label`); see the module docs for when the figure is read.
pub fn check_host_allocation(bytes: usize, label: &str) -> FieldResult<()> {
    let since = UNCHECKED
        .fetch_add(bytes, Ordering::Relaxed)
        .saturating_add(bytes);
    if bytes < CHECK_EVERY_BYTES && since < CHECK_EVERY_BYTES {
        return Ok(());
    }
    UNCHECKED.store(0, Ordering::Relaxed);
    match available_bytes() {
        Some(available) => refuse_beyond(bytes, available, label),
        None => Ok(()),
    }
}

/// The decision of [`check_host_allocation`] for `available` bytes (the
/// smaller allocations since the last reading are already out of it).
fn refuse_beyond(bytes: usize, available: u64, label: &str) -> FieldResult<()> {
    if bytes as u64 <= available {
        return Ok(());
    }
    Err(FieldError::MemoryExhausted {
        field: label.to_string(),
        bytes,
        available,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_available_is_read_in_bytes() {
        let text = "MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   20000000 kB\n";
        assert_eq!(parse_mem_available(text), Some(20_000_000 * 1024));
        assert_eq!(parse_mem_available("MemTotal: 5 kB\n"), None);
        assert_eq!(parse_mem_available("MemAvailable: lots kB\n"), None);
    }

    #[test]
    fn an_allocation_beyond_the_available_memory_is_refused_by_name() {
        assert!(refuse_beyond(1 << 30, 2 << 30, "phi").is_ok());
        match refuse_beyond(3 << 30, 2 << 30, "phi17") {
            Err(FieldError::MemoryExhausted {
                field,
                bytes,
                available,
            }) => {
                assert_eq!(field, "phi17");
                assert_eq!(bytes, 3 << 30);
                assert_eq!(available, 2 << 30);
            }
            other => panic!("expected MemoryExhausted, got {other:?}"),
        }
        let message = refuse_beyond(3 << 30, 2 << 30, "phi17")
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("`phi17`") && message.contains("3072 MiB"),
            "{message}"
        );
    }

    #[test]
    fn this_machine_reports_its_available_memory() {
        if cfg!(target_os = "linux") {
            let available = available_bytes().expect("Linux has /proc/meminfo");
            assert!(available > 0);
            // Far more than any machine has: refused, naming the field.
            let error = check_host_allocation(usize::MAX / 4, "huge").unwrap_err();
            assert!(error.to_string().contains("`huge`"), "{error}");
        }
    }
}
