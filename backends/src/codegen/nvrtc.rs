//! CUDA C kernels compiled to PTX with NVRTC.
//!
//! NVRTC needs neither a GPU nor a driver, so every CUDA kernel the test
//! suite generates is compiled on machines without one. cudarc loads
//! `libnvrtc` dynamically and panics when it is absent, so
//! [`nvrtc_problem`] checks for it first (the test command installs it
//! from PyPI's `nvidia-cuda-nvrtc` and puts it on `LD_LIBRARY_PATH`).
//! Kernels are compiled with `--fmad=false`: no contraction, so a GPU
//! computes the CPU's bits wherever both use the same operations.

use super::compiled::{Form, FormTable};
use super::emit::{self, Unsupported};
#[cfg(feature = "cuda")]
use crate::error::CompileFailure;
use crate::error::{OperatorError, OperatorResult};
use crate::kernel::Kernel;
use crate::vmath::Dialect;
use crate::vocabulary::Reduction;
use std::sync::Arc;
#[cfg(feature = "cuda")]
use std::sync::OnceLock;

/// Why NVRTC cannot be used, or `None` when it can.
#[cfg(not(feature = "cuda"))]
pub fn nvrtc_problem() -> Option<&'static str> {
    Some(
        "this build of Watershed has no CUDA support (it was built without the `cuda` cargo feature, which is on by default)",
    )
}

/// Why NVRTC cannot be used, or `None` when it can.
#[cfg(feature = "cuda")]
pub fn nvrtc_problem() -> Option<&'static str> {
    static PROBLEM: OnceLock<Option<&'static str>> = OnceLock::new();
    *PROBLEM.get_or_init(|| {
        // SAFETY: only tries to dlopen the library; no NVRTC call is made.
        if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            None
        } else {
            Some(
                "libnvrtc is not on the library path (pip install nvidia-cuda-nvrtc and add its lib directory to LD_LIBRARY_PATH)",
            )
        }
    })
}

/// The CUDA forms compiled so far ([`super::compiled`]).
pub(crate) static CUDA_FORMS: FormTable<Arc<CudaKernel>> = FormTable::new();

/// A kernel in CUDA C and its PTX.
#[derive(Debug, Clone)]
pub struct CudaKernel {
    /// The `__global__` function's name.
    pub name: String,
    /// The whole translation unit given to NVRTC.
    pub source: String,
    /// The PTX NVRTC produced.
    pub ptx: String,
    /// The layout of its by-value argument struct.
    pub arguments: super::launch::CudaArguments,
}

/// The CUDA C translation unit of `kernel` with its function's name.
pub fn cuda_source(kernel: &Kernel) -> Result<(String, String), Unsupported> {
    Ok(named_unit(
        "ws_cuda",
        &emit::cuda_function(kernel, NAME_MARK)?,
    ))
}

/// What the emitters name a function before [`named_unit`] names it.
const NAME_MARK: &str = "WS_KERNEL_NAME";

/// The translation unit of `body` (a function named [`NAME_MARK`]) after
/// the CUDA prelude, and its name: `prefix` and a hash of the unit, so
/// that equal sources share a name and a compiled module.
fn named_unit(prefix: &str, body: &str) -> (String, String) {
    let prelude = emit::prelude(Dialect::Cuda);
    let name = format!(
        "{prefix}_{}",
        super::compile::stable_hash(&[&prelude, body])
    );
    let unit = format!("{prelude}\n{}", body.replace(NAME_MARK, &name));
    (name, unit)
}

/// The CUDA C translation unit that reduces `kernel`'s result
/// ([`emit::cuda_reduction_function`]) with its function's name.
pub fn cuda_reduction_source(
    kernel: &Kernel,
    reduction: Reduction,
) -> Result<(String, String), Unsupported> {
    let body = emit::cuda_reduction_function(kernel, NAME_MARK, reduction)?;
    Ok(named_unit("ws_cuda_reduce", &body))
}

/// The reduction kernel of `kernel`'s result, compiled with NVRTC on first
/// use and kept for the process (by its source's hash, so every kernel of
/// the same structure shares it). An error when the emitter does not
/// support the kernel or NVRTC is absent or refuses it.
pub fn cuda_reduction_of(kernel: &Kernel, reduction: Reduction) -> OperatorResult<Arc<CudaKernel>> {
    let what = format!("the CUDA {reduction:?} reduction");
    let generated =
        cuda_reduction_source(kernel, reduction).map_err(|why| OperatorError::Backend {
            what: format!("generating {what}"),
            reason: format!("{}; reduce on the CPU", why.0),
        })?;
    compiled_once(kernel, &what, generated)
}

/// The CUDA C translation unit of `kernel` watching for values that are
/// not finite ([`emit::cuda_checked_function`]) with its function's name.
pub fn cuda_checked_source(kernel: &Kernel) -> Result<(String, String), Unsupported> {
    let body = emit::cuda_checked_function(kernel, NAME_MARK)?;
    Ok(named_unit("ws_cuda_checked", &body))
}

/// The kernel of `kernel` that watches for values that are not finite,
/// compiled with NVRTC on first use and kept for the process (by
/// [`super::compiled`], so that a launch does not generate the source
/// again to find the module by name).
pub fn cuda_checked_of(kernel: &Kernel) -> OperatorResult<Arc<CudaKernel>> {
    CUDA_FORMS.get_or_make(kernel, Form::Cuda { checked: true }, || {
        let what = "a CUDA kernel that checks its values".to_string();
        let generated = cuda_checked_source(kernel).map_err(|why| OperatorError::Backend {
            what: format!("generating {what}"),
            reason: format!("{}; place the node on the CPU", why.0),
        })?;
        compiled_once(kernel, &what, generated)
    })
}

/// The fill sequence of `kernels` ([`emit::cuda_sequence_function`]),
/// compiled with NVRTC on first use and kept for the process, keyed by
/// the names of the parts' own CUDA kernels (hashes of their sources), so
/// finding it again costs no code generation. Its
/// [`CudaKernel::arguments`] are the first part's: a launch packs each
/// part's struct itself.
pub fn cuda_sequence_of(kernels: &[&Kernel]) -> OperatorResult<Arc<CudaKernel>> {
    type Sequences = std::sync::Mutex<std::collections::HashMap<Vec<String>, Arc<CudaKernel>>>;
    static SEQUENCES: std::sync::OnceLock<Sequences> = std::sync::OnceLock::new();
    let Some(first) = kernels.first() else {
        return Err(OperatorError::Backend {
            what: "generating a CUDA fill sequence".into(),
            reason: "it has no assignment".into(),
        });
    };
    let key = kernels
        .iter()
        .map(|k| cuda_of(k).map(|c| c.name.clone()))
        .collect::<OperatorResult<Vec<String>>>()?;
    let sequences = SEQUENCES.get_or_init(Default::default);
    if let Some(done) = sequences
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&key)
    {
        return Ok(done.clone());
    }
    let what = "a CUDA fill sequence".to_string();
    let body =
        emit::cuda_sequence_function(kernels, NAME_MARK).map_err(|why| OperatorError::Backend {
            what: format!("generating {what}"),
            reason: format!("{}; place the node on the CPU", why.0),
        })?;
    let compiled = compiled_once(first, &what, named_unit("ws_cuda_fills", &body))?;
    let mut sequences = sequences.lock().unwrap_or_else(|p| p.into_inner());
    if sequences.len() >= 4096 {
        sequences.clear();
    }
    sequences.insert(key, compiled.clone());
    Ok(compiled)
}

/// `generated` (a name and a CUDA C source for `kernel`'s arguments)
/// compiled with NVRTC, once per name for the process.
fn compiled_once(
    kernel: &Kernel,
    what: &str,
    (name, source): (String, String),
) -> OperatorResult<Arc<CudaKernel>> {
    type Compiled = std::sync::Mutex<std::collections::HashMap<String, Arc<CudaKernel>>>;
    static COMPILED: std::sync::OnceLock<Compiled> = std::sync::OnceLock::new();
    let compiled = COMPILED.get_or_init(Default::default);
    if let Some(done) = compiled
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&name)
    {
        return Ok(done.clone());
    }
    if let Some(problem) = nvrtc_problem() {
        return Err(OperatorError::Backend {
            what: format!("compiling {what} ({name})"),
            reason: problem.to_string(),
        });
    }
    let Some(kernel) = compile_source(kernel, name.clone(), source)? else {
        return Err(OperatorError::Backend {
            what: format!("compiling {what} ({name})"),
            reason: "NVRTC produced nothing".into(),
        });
    };
    let kernel = Arc::new(kernel);
    compiled
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(name, kernel.clone());
    Ok(kernel)
}

/// Generates `kernel` in CUDA C and compiles it to PTX. `Ok(None)`: the
/// emitter does not support this kernel; an error: NVRTC is absent or
/// refused the source (the error shows the source and NVRTC's log).
pub fn compile_cuda(kernel: &Kernel) -> OperatorResult<Option<CudaKernel>> {
    if let Some(problem) = nvrtc_problem() {
        return Err(OperatorError::Backend {
            what: "compiling a CUDA kernel".to_string(),
            reason: problem.to_string(),
        });
    }
    let Ok((name, source)) = cuda_source(kernel) else {
        return Ok(None);
    };
    compile_source(kernel, name, source)
}

/// Compiles `source` (the CUDA C of `kernel`) with NVRTC.
fn compile_source(
    kernel: &Kernel,
    name: String,
    source: String,
) -> OperatorResult<Option<CudaKernel>> {
    let ptx = compile_unit(&name, &source)?;
    Ok(Some(CudaKernel {
        name,
        ptx,
        source,
        arguments: emit::cuda_arguments(kernel),
    }))
}

/// The PTX of the header-free CUDA C translation unit `source`, whose
/// kernel is `name`, compiled with NVRTC as every generated kernel is
/// (`--fmad=false`): for the few kernels written by hand rather than
/// generated from a [`Kernel`] (the halo's point gathers and scatters).
/// An error when NVRTC is absent or refuses the source (with its log).
pub fn compile_unit(name: &str, source: &str) -> OperatorResult<String> {
    if let Some(problem) = nvrtc_problem() {
        return Err(OperatorError::Backend {
            what: format!("compiling CUDA kernel {name}"),
            reason: problem.to_string(),
        });
    }
    compile_with_nvrtc(name, source)
}

/// NVRTC is not part of this build ([`nvrtc_problem`] said so already).
#[cfg(not(feature = "cuda"))]
fn compile_with_nvrtc(name: &str, _source: &str) -> OperatorResult<String> {
    Err(OperatorError::Backend {
        what: format!("compiling CUDA kernel {name}"),
        reason: nvrtc_problem().unwrap_or_default().to_string(),
    })
}

/// [`compile_unit`] once NVRTC is known to be there.
#[cfg(feature = "cuda")]
fn compile_with_nvrtc(name: &str, source: &str) -> OperatorResult<String> {
    let options = cudarc::nvrtc::CompileOptions {
        fmad: Some(false),
        name: Some(format!("{name}.cu")),
        ..Default::default()
    };
    match cudarc::nvrtc::compile_ptx_with_opts(source, options) {
        Ok(ptx) => Ok(ptx.to_src()),
        Err(e) => {
            let (command, log) = match &e {
                cudarc::nvrtc::CompileError::CompileError { options, log, .. } => (
                    format!("nvrtc {}", options.join(" ")),
                    log.to_string_lossy().into_owned(),
                ),
                other => ("nvrtc".to_string(), format!("{other:?}")),
            };
            Err(OperatorError::Compile(Box::new(CompileFailure {
                dialect: "CUDA C".to_string(),
                kernel: name.to_string(),
                command,
                source_text: source.to_string(),
                log,
            })))
        }
    }
}

/// The CUDA form of `kernel`, compiled with NVRTC on first use (kept by
/// [`super::compiled`], like its C form). An error when the emitter does
/// not support it or NVRTC refuses it.
pub fn cuda_of(kernel: &Kernel) -> OperatorResult<Arc<CudaKernel>> {
    CUDA_FORMS.get_or_make(
        kernel,
        Form::Cuda { checked: false },
        || match compile_cuda(kernel)? {
            Some(compiled) => Ok(Arc::new(compiled)),
            None => {
                let why = emit::cuda_function(kernel, "kernel")
                    .err()
                    .map_or_else(|| "unsupported".to_string(), |u| u.0);
                Err(OperatorError::Backend {
                    what: "generating a CUDA kernel".into(),
                    reason: format!("{why}; place the node on the CPU"),
                })
            }
        },
    )
}
