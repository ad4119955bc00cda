//! Compiling generated C with the system compiler, caching the shared
//! objects on disk, and loading them.
//!
//! * Compiler: `$CC`, else `cc`; flags `-O3 -march=native` plus
//!   `-ffp-contract=off` (no fused multiply-adds but `exp`'s explicit
//!   `fma` calls, which the interpreter makes too: results equal the
//!   interpreter's bits) and `-fno-math-errno` (lets `sqrt` vectorise; no
//!   value changes). `WATERSHED_C_PORTABLE=1` drops `-march=native` for
//!   objects that must run on other machines; `WATERSHED_CFLAGS` adds flags
//!   ([`extra_flags`] refuses those that assume finite values).
//! * Cache: `$WATERSHED_KERNEL_CACHE`, else `$XDG_CACHE_HOME/watershed/kernels`,
//!   else `~/.cache/watershed/kernels`. An entry's name is a 128-bit hash
//!   of the source, the flags, the compiler's version and the CPU's
//!   features. It is written under a temporary name and renamed into
//!   place with a checksum file beside it by
//!   `watershed_fields::shared_object::load_or_build`, the compile-and-load
//!   path this back end shares with the emulated GPU; an entry that does not match its
//!   checksum (truncated, overwritten, written before checksums) or does
//!   not load is a miss: it is rebuilt with a note in the log, never
//!   loaded (a truncated object would kill the process with SIGBUS). The
//!   directory is kept under `$WATERSHED_KERNEL_CACHE_MB` (default 1024)
//!   by [`super::cache_bound`], which lists it only when needed.
//! * Libraries stay loaded for the life of the process (kernels hold their
//!   function pointers).

use super::cache_bound::{CacheSizes, bound_after_build};
use super::emit::{self, FiniteCheck, Unsupported};
use crate::error::{CompileFailure, OperatorError, OperatorResult};
use crate::kernel::Kernel;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use watershed_fields::shared_object::{self, ObjectError, ObjectSource};

/// The C signature of every generated CPU kernel (see [`emit::c_function`]).
pub(crate) type KernelFn = unsafe extern "C" fn(
    f: *const *const f64,
    fs: *const i64,
    p: *const f64,
    g: *const f64,
    t: *mut f64,
    tsy: i64,
    tsz: i64,
    s: *mut f64,
    width: i64,
    rowcap: i64,
    halo: i64,
    x0: i64,
    x1: i64,
    j0: i64,
    rows: i64,
    k0: i64,
    planes: i64,
) -> i64;

/// A kernel compiled to machine code.
pub struct NativeKernel {
    pub(crate) function: KernelFn,
    /// The library holding `function` (kept loaded).
    _library: Arc<libloading::Library>,
    /// Cache key (also the function's name).
    key: String,
    /// Whether the function tests what it writes (else it returns 0).
    finite_check: FiniteCheck,
}

impl std::fmt::Debug for NativeKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NativeKernel({})", self.key)
    }
}

impl NativeKernel {
    /// Whether the function reports values it wrote that are not finite;
    /// when not, its return value says nothing and a caller that watches
    /// for NaN scans the rows itself.
    pub fn checks_finite(&self) -> bool {
        self.finite_check == FiniteCheck::Checked
    }

    /// The cache key, which is also the C function's name.
    pub fn key(&self) -> &str {
        &self.key
    }
}

/// The system C compiler found for this process.
#[derive(Debug, Clone)]
pub struct Compiler {
    /// The program run (`$CC` or `cc`).
    pub program: String,
    /// First line of `--version`.
    pub version: String,
    /// `gcc`, `clang` or `unknown`, from `--version` (`cc` is often gcc).
    pub family: &'static str,
    /// Flags used for every kernel.
    pub flags: Vec<String>,
}

/// The C compiler, detected once: `Err` says why there is none.
pub fn c_compiler() -> Result<&'static Compiler, String> {
    static FOUND: OnceLock<Result<Compiler, String>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            let program = std::env::var("CC")
                .ok()
                .filter(|c| !c.trim().is_empty())
                .unwrap_or_else(|| "cc".to_string());
            let output = Command::new(&program)
                .arg("--version")
                .output()
                .map_err(|e| format!("the C compiler `{program}` cannot be run ({e}); install a C compiler (gcc or clang) or set CC for compiled kernels"))?;
            if !output.status.success() {
                return Err(format!(
                    "`{program} --version` failed; install a C compiler (gcc or clang) or set CC for compiled kernels"
                ));
            }
            let text = String::from_utf8_lossy(&output.stdout);
            let version = text.lines().next().unwrap_or("").to_string();
            let family = if text.contains("clang") {
                "clang"
            } else if text.contains("Free Software Foundation") || text.contains("gcc") {
                "gcc"
            } else {
                "unknown"
            };
            let mut flags: Vec<String> = ["-O3", "-std=c11", "-fPIC", "-shared"]
                .into_iter()
                .map(String::from)
                .collect();
            if !std::env::var("WATERSHED_C_PORTABLE").is_ok_and(|v| !v.is_empty() && v != "0") {
                flags.push("-march=native".to_string());
            }
            flags.extend(
                ["-ffp-contract=off", "-fno-math-errno", "-fno-trapping-math"]
                    .into_iter()
                    .map(String::from),
            );
            check_settings()?;
            if let Ok(extra) = std::env::var("WATERSHED_CFLAGS") {
                flags.extend(extra_flags(&extra)?);
            }
            Ok(Compiler {
                program,
                version,
                family,
                flags,
            })
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Checks the variables that shape compiled kernels, `WATERSHED_CFLAGS`
/// ([`extra_flags`]) and `WATERSHED_KERNEL_CACHE_MB`: `Err` names the one
/// whose value cannot be used, and why.
pub fn check_settings() -> Result<(), String> {
    if let Ok(extra) = std::env::var("WATERSHED_CFLAGS") {
        extra_flags(&extra)?;
    }
    cache_limit_from(std::env::var("WATERSHED_KERNEL_CACHE_MB").ok().as_deref())?;
    Ok(())
}

/// Flags that let the compiler assume values are finite or reassociate
/// arithmetic. Either silently breaks a kernel: the finiteness test
/// (`bits(v - v)`) folds to 0, and the rounding steps of the vector math
/// (`(t + 1.5 * 2^52) - 1.5 * 2^52`) fold away, so `exp` returns garbage.
const FORBIDDEN_FLAGS: [&str; 7] = [
    "-Ofast",
    "-ffast-math",
    "-ffinite-math-only",
    "-funsafe-math-optimizations",
    "-fassociative-math",
    "-fno-honor-nans",
    "-fno-honor-infinities",
];

/// The flags of `WATERSHED_CFLAGS` (`text`), or why they cannot be used:
/// one of `FORBIDDEN_FLAGS` is refused by name. Contraction
/// (`-ffp-contract=fast`) is allowed: it changes the last bits of a
/// result, never whether it is finite.
pub fn extra_flags(text: &str) -> Result<Vec<String>, String> {
    let flags: Vec<String> = text.split_whitespace().map(String::from).collect();
    // Only flags themselves can be checked: a response file (`@file`)
    // would bring in flags unseen, and a word without a dash would be
    // compiled or linked into every kernel.
    if let Some(bad) = flags.iter().find(|flag| !flag.starts_with('-')) {
        return Err(format!(
            "WATERSHED_CFLAGS contains `{bad}`, which is not a flag{}: give the compiler flags themselves, each starting with `-`",
            if bad.starts_with('@') {
                " but a response file, whose flags could not be checked"
            } else {
                ""
            }
        ));
    }
    if let Some(bad) = flags
        .iter()
        .find(|flag| FORBIDDEN_FLAGS.contains(&flag.as_str()))
    {
        return Err(format!(
            "WATERSHED_CFLAGS contains `{bad}`, which lets the compiler assume values are finite or reassociate arithmetic: the kernels' NaN checks and the rounding steps of their `exp` would be folded away. Remove it (`-ffp-contract=fast` is allowed)"
        ));
    }
    Ok(flags)
}

/// Counters of the C back end since the process started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CompileStatistics {
    /// Kernels given a compiled form.
    pub kernels: u64,
    /// Compiler runs (the rest came from the disk cache or memory).
    pub compilations: u64,
    /// Shared objects loaded from the disk cache.
    pub disk_hits: u64,
    /// Cache entries that did not load and were rebuilt.
    pub rebuilt: u64,
    /// Kernels the emitter does not support (run on the interpreter).
    pub interpreted: u64,
    /// Milliseconds spent in the compiler.
    pub compile_milliseconds: u64,
}

static KERNELS: AtomicU64 = AtomicU64::new(0);
static COMPILATIONS: AtomicU64 = AtomicU64::new(0);
static DISK_HITS: AtomicU64 = AtomicU64::new(0);
static REBUILT: AtomicU64 = AtomicU64::new(0);
static INTERPRETED: AtomicU64 = AtomicU64::new(0);
static COMPILE_MS: AtomicU64 = AtomicU64::new(0);

/// The C back end's counters.
pub fn statistics() -> CompileStatistics {
    CompileStatistics {
        kernels: KERNELS.load(Ordering::Relaxed),
        compilations: COMPILATIONS.load(Ordering::Relaxed),
        disk_hits: DISK_HITS.load(Ordering::Relaxed),
        rebuilt: REBUILT.load(Ordering::Relaxed),
        interpreted: INTERPRETED.load(Ordering::Relaxed),
        compile_milliseconds: COMPILE_MS.load(Ordering::Relaxed),
    }
}

/// 128-bit FNV-1a of `parts` (stable across Rust versions and runs,
/// unlike `std`'s hasher), as 32 hex digits.
pub(crate) fn stable_hash(parts: &[&str]) -> String {
    let mut halves = [0xcbf2_9ce4_8422_2325u64, 0x6c62_272e_07bb_0142u64];
    for (h, salt) in halves.iter_mut().zip([0u8, 0x5a]) {
        for part in parts {
            for &b in part.as_bytes().iter().chain(&[0xff]) {
                *h ^= u64::from(b ^ salt);
                *h = h.wrapping_mul(0x0000_0100_0000_01b3);
            }
        }
    }
    format!("{:016x}{:016x}", halves[0], halves[1])
}

/// The CPU's feature flags (Linux: `/proc/cpuinfo`), part of cache keys.
fn cpu_features() -> &'static str {
    static FEATURES: OnceLock<String> = OnceLock::new();
    FEATURES.get_or_init(|| {
        std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|text| {
                text.lines()
                    .find(|l| l.starts_with("flags"))
                    .map(String::from)
            })
            .unwrap_or_default()
    })
}

/// The directory compiled kernels are cached in (created on demand).
pub fn cache_directory() -> PathBuf {
    if let Some(dir) = std::env::var_os("WATERSHED_KERNEL_CACHE").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("watershed").join("kernels")
}

/// The most bytes the kernel cache keeps on disk:
/// `$WATERSHED_KERNEL_CACHE_MB` mebibytes, else 1024. A value that is not
/// a whole number makes [`c_compiler`] refuse, naming the variable (so
/// the C back end is not used with a cache bound nobody asked for); here
/// it reads as the default.
pub fn cache_limit_bytes() -> u64 {
    cache_limit_from(std::env::var("WATERSHED_KERNEL_CACHE_MB").ok().as_deref())
        .unwrap_or(1024 << 20)
}

/// The cache bound for the variable's value `value` (`None`: unset).
fn cache_limit_from(value: Option<&str>) -> Result<u64, String> {
    match value.map(str::trim) {
        None | Some("") => Ok(1024 << 20),
        Some(text) => text
            .parse::<u64>()
            .map(|mb| mb.saturating_mul(1 << 20))
            .map_err(|_| {
                format!(
                    "WATERSHED_KERNEL_CACHE_MB = `{text}` is not a whole number of mebibytes; give one (e.g. 512) or unset it for 1024"
                )
            }),
    }
}

/// Loads the library of cache entry `key` holding `source`
/// ([`shared_object::load_or_build`]: memory, else the cache directory,
/// else the compiler; an entry that is not whole, does not load or lacks
/// the symbol `key` is rebuilt). A source the compiler refused is refused
/// again from memory, with the same source and log, without a second
/// compiler run.
pub fn library_for(key: &str, source: &str) -> OperatorResult<Arc<libloading::Library>> {
    let compiler = c_compiler().map_err(|why| OperatorError::Backend {
        what: "compiling a kernel".to_string(),
        reason: why,
    })?;
    let directory = cache_directory();
    let command = |source: &Path, object: &Path| {
        let mut command = Command::new(&compiler.program);
        command
            .args(&compiler.flags)
            .arg("-o")
            .arg(object)
            .args(["-x", "c"])
            .arg(source)
            .args(["-x", "none", "-lm"]);
        command
    };
    let request = shared_object::ObjectRequest {
        directory: &directory,
        key,
        source,
        extension: "c",
        command: &command,
        symbol: key,
    };
    let count = |took: std::time::Duration| {
        COMPILE_MS.fetch_add(took.as_millis() as u64, Ordering::Relaxed);
        COMPILATIONS.fetch_add(1, Ordering::Relaxed);
    };
    match shared_object::load_or_build(&request) {
        Ok((library, found)) => {
            match found {
                ObjectSource::Memory => {}
                ObjectSource::Disk => {
                    DISK_HITS.fetch_add(1, Ordering::Relaxed);
                }
                ObjectSource::Built(took) => {
                    count(took);
                    // The cache stays bounded: a new entry may evict the
                    // oldest (listing the directory only when this
                    // process's count of it passes the limit). Best
                    // effort: a directory that cannot be listed or
                    // cleaned (another process evicting at the same
                    // time) only leaves the cache larger.
                    static SIZES: Mutex<CacheSizes> = Mutex::new(CacheSizes::new());
                    let _ = bound_after_build(&SIZES, &directory, key, cache_limit_bytes());
                }
                ObjectSource::Rebuilt(took) => {
                    count(took);
                    REBUILT.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok(library)
        }
        Err(ObjectError::Refused {
            command, log, ran, ..
        }) => {
            if let Some(took) = ran {
                count(took);
            }
            Err(OperatorError::Compile(Box::new(CompileFailure {
                dialect: "C".to_string(),
                kernel: key.to_string(),
                command,
                source_text: source.to_string(),
                log,
            })))
        }
        Err(ObjectError::Io { what, reason }) => Err(OperatorError::Backend {
            what,
            reason: format!(
                "{reason}; set WATERSHED_KERNEL_CACHE to a writable directory or WATERSHED_BACKEND=interpreter"
            ),
        }),
        Err(ObjectError::Load { path, reason }) => Err(OperatorError::Backend {
            what: format!("loading {}", path.display()),
            reason,
        }),
    }
}

/// The cache key and full translation unit for `kernel` (`Err`: the
/// emitter does not support it).
pub fn translation_unit(
    kernel: &Kernel,
    finite_check: FiniteCheck,
) -> Result<(String, String), Unsupported> {
    let compiler = c_compiler().map_err(Unsupported)?;
    let body = emit::c_function(kernel, "WS_KERNEL_NAME", finite_check)?;
    let prelude = emit::prelude(crate::vmath::Dialect::C);
    let key = format!(
        "ws_{}",
        stable_hash(&[
            &prelude,
            &body,
            &compiler.flags.join(" "),
            &compiler.version,
            cpu_features(),
        ])
    );
    let source = format!("{prelude}\n{}", body.replace("WS_KERNEL_NAME", &key));
    Ok((key, source))
}

/// Compiles `kernel` (or finds it cached). `Ok(None)` when the emitter does
/// not support it.
pub(crate) fn compile_kernel(
    kernel: &Kernel,
    finite_check: FiniteCheck,
) -> OperatorResult<Option<Arc<NativeKernel>>> {
    let (key, source) = match translation_unit(kernel, finite_check) {
        Ok(unit) => unit,
        Err(_) => {
            INTERPRETED.fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        }
    };
    let library = library_for(&key, &source)?;
    // SAFETY: the symbol was generated by `emit::c_function` with exactly
    // the signature of `KernelFn`.
    let function: KernelFn = unsafe {
        *library
            .get::<KernelFn>(key.as_bytes())
            .map_err(|e| OperatorError::Backend {
                what: format!("finding {key} in its library"),
                reason: e.to_string(),
            })?
    };
    KERNELS.fetch_add(1, Ordering::Relaxed);
    Ok(Some(Arc::new(NativeKernel {
        function,
        _library: library,
        key,
        finite_check,
    })))
}

/// What gcc says about vectorising `source` (`-fopt-info-vec-optimized`),
/// compiled with the kernels' flags into a scratch directory: a test and
/// a debugging aid (`loop vectorized` lines name the loops).
pub fn vectorisation_report(source: &str) -> OperatorResult<String> {
    let compiler = c_compiler().map_err(|why| OperatorError::Backend {
        what: "vectorisation report".to_string(),
        reason: why,
    })?;
    // One directory per call (removed at the end), so that concurrent
    // reports never remove each other's files.
    static REPORTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = REPORTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("watershed-vec-{}-{call}", std::process::id()));
    let io = |e: std::io::Error| OperatorError::Backend {
        what: "vectorisation report".to_string(),
        reason: e.to_string(),
    };
    let report = || -> OperatorResult<String> {
        std::fs::create_dir_all(&dir).map_err(io)?;
        let source_path = shared_object::temporary(&dir.join("kernel.c"));
        std::fs::write(&source_path, source).map_err(io)?;
        let object = source_path.with_extension("so");
        let output = Command::new(&compiler.program)
            .args(&compiler.flags)
            .arg("-fopt-info-vec-optimized")
            .arg("-o")
            .arg(&object)
            .args(["-x", "c"])
            .arg(&source_path)
            .output()
            .map_err(io)?;
        Ok(format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    };
    let outcome = report();
    let _ = std::fs::remove_dir_all(&dir);
    outcome
}

#[cfg(test)]
mod tests {
    use super::{FORBIDDEN_FLAGS, cache_limit_from, extra_flags};

    #[test]
    fn flags_that_assume_finite_values_are_refused_by_name() {
        for flag in FORBIDDEN_FLAGS {
            let why = extra_flags(&format!("-funroll-loops {flag} -g"))
                .expect_err("a forbidden flag must be refused");
            assert!(why.contains(&format!("`{flag}`")), "{why}");
            assert!(why.contains("WATERSHED_CFLAGS"), "{why}");
        }
    }

    #[test]
    fn response_files_and_words_that_are_not_flags_are_refused() {
        let why = extra_flags("-O2 @/tmp/flags").unwrap_err();
        assert!(
            why.contains("`@/tmp/flags`") && why.contains("response file"),
            "{why}"
        );
        let why = extra_flags("-O2 extra.o").unwrap_err();
        assert!(why.contains("`extra.o`, which is not a flag:"), "{why}");
    }

    #[test]
    fn a_kernel_cache_bound_that_is_not_a_number_is_refused_by_name() {
        assert_eq!(cache_limit_from(None), Ok(1024 << 20));
        assert_eq!(cache_limit_from(Some(" 8 ")), Ok(8 << 20));
        let why = cache_limit_from(Some("lots")).unwrap_err();
        assert!(
            why.starts_with("WATERSHED_KERNEL_CACHE_MB = `lots`"),
            "{why}"
        );
        assert!(cache_limit_from(Some("-1")).is_err());
    }

    #[test]
    fn other_flags_pass_through_in_order() {
        assert_eq!(
            extra_flags("  -ffp-contract=fast\t-funroll-loops -mno-avx512f ").unwrap(),
            ["-ffp-contract=fast", "-funroll-loops", "-mno-avx512f"]
        );
        assert!(extra_flags("").unwrap().is_empty());
        // A flag that merely starts like a forbidden one is not refused.
        assert_eq!(
            extra_flags("-ffast-math-is-not-a-flag").unwrap(),
            ["-ffast-math-is-not-a-flag"]
        );
    }
}
