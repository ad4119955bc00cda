//! Code generation: lowered kernels become C compiled at run time by the
//! system compiler (the CPU back end) or CUDA C compiled by NVRTC (the GPU
//! back end), from one emitter ([`emit`]).
//!
//! The row interpreter ([`crate::cpu`]) stays the reference and the
//! fallback: without a C compiler every kernel runs on it (after one
//! notice), and a kernel the emitter does not support yet (a mask given as
//! an explicit point list) runs on it too, counted in
//! [`statistics`]. `WATERSHED_BACKEND=interpreter|c` chooses for the
//! whole process; `AssignOptions::backend` (in `watershed-operators`) for one assignment.
//!
//! Every back end runs the *generic* kernel of an expression
//! ([`watershed_lowering::lower_cached`]: parameters are arguments), so a
//! new `dt` or a stage coefficient never triggers a compilation, and the
//! interpreter, the compiled C and CUDA (`--fmad=false`) give the same
//! bits. (The interpreter once ran kernels with the parameters' values
//! folded in as constants: the lowering then merged them into other
//! weights, which changed the last bit against C.)
//!
//! Design note (the emitter's shape, the compile cache, the safety
//! argument):
#![doc = include_str!("design.md")]

pub mod cache_bound;
pub mod compile;
pub mod compiled;
pub mod emit;
pub mod launch;
pub mod nvrtc;

use crate::cache::{LoweredKernel, lower_cached};
use crate::error::{OperatorError, OperatorResult};
use crate::ir::Node;
use crate::kernel::Kernel;
pub use compile::{CompileStatistics, NativeKernel, c_compiler, statistics};
pub use compiled::Form;
use compiled::FormTable;
pub use emit::FiniteCheck;
use std::sync::{Arc, OnceLock};
use watershed_fields::Patch;

/// Which back end runs kernels on the CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum Backend {
    /// The process default: `WATERSHED_BACKEND` if set, else compiled C
    /// when a C compiler is found, else the interpreter.
    #[default]
    Default,
    /// The row interpreter (the reference).
    Interpreter,
    /// C kernels compiled at run time; kernels the emitter does not support
    /// run on the interpreter.
    C,
}

impl Backend {
    /// The process default ([`Backend::Default`] resolved once):
    /// `WATERSHED_BACKEND` (`interpreter` or `c`) when set, else compiled C
    /// when a C compiler is found, else the interpreter after one notice.
    /// An error, naming the variable, when `WATERSHED_BACKEND`,
    /// `WATERSHED_CFLAGS` or `WATERSHED_KERNEL_CACHE_MB` has a value that
    /// cannot be used, or when `WATERSHED_BACKEND=c` asks for compiled
    /// kernels and there is no C compiler: a setting is never ignored.
    pub fn process_default() -> OperatorResult<Backend> {
        static CHOSEN: OnceLock<Result<Backend, String>> = OnceLock::new();
        CHOSEN
            .get_or_init(|| Backend::choose(std::env::var("WATERSHED_BACKEND").ok().as_deref()))
            .clone()
            .map_err(|reason| OperatorError::Backend {
                what: "choosing the CPU back end".into(),
                reason,
            })
    }

    /// The back end for the value `requested` of `WATERSHED_BACKEND`
    /// (`None`: unset), or why it cannot be had.
    fn choose(requested: Option<&str>) -> Result<Backend, String> {
        compile::check_settings()?;
        let forced = match requested.map(str::trim) {
            None | Some("") => None,
            Some("interpreter") => return Ok(Backend::Interpreter),
            Some("c") | Some("C") => Some(Backend::C),
            Some(other) => {
                return Err(format!(
                    "WATERSHED_BACKEND = `{other}` is not a back end; use `interpreter` or `c`, or unset it for compiled C where a C compiler exists"
                ));
            }
        };
        match (c_compiler(), forced) {
            (Ok(_), _) => Ok(Backend::C),
            (Err(why), Some(_)) => Err(format!(
                "WATERSHED_BACKEND=c asks for compiled kernels, but {why}; or use WATERSHED_BACKEND=interpreter"
            )),
            (Err(why), None) => {
                eprintln!("watershed: kernels run on the row interpreter: {why}.");
                Ok(Backend::Interpreter)
            }
        }
    }

    /// This choice with [`Backend::Default`] resolved (see
    /// [`Self::process_default`] for its errors).
    pub fn resolved(self) -> OperatorResult<Backend> {
        match self {
            Backend::Default => Backend::process_default(),
            chosen => Ok(chosen),
        }
    }
}

/// A kernel ready to run: the lowered program bound to a tree, and its
/// compiled form when the chosen back end has one.
#[derive(Debug, Clone)]
pub struct Runnable {
    /// The lowered kernel (what the interpreter runs, and what the native
    /// code was generated from).
    pub lowered: Arc<LoweredKernel>,
    /// The compiled kernel, or `None` to interpret.
    pub native: Option<Arc<NativeKernel>>,
}

/// The compiled form of `kernel`, compiling it on first use (kept by
/// [`compiled`], disk cache below it). `Ok(None)`: the emitter does not
/// support this kernel.
pub fn native_of(
    kernel: &Kernel,
    finite_check: FiniteCheck,
) -> OperatorResult<Option<Arc<NativeKernel>>> {
    C_FORMS.get_or_make(kernel, Form::C(finite_check), || {
        compile::compile_kernel(kernel, finite_check)
    })
}

/// The C forms compiled so far; `None`: the emitter does not support the
/// kernel (it runs on the interpreter), remembered so that it is not
/// generated again.
static C_FORMS: FormTable<Option<Arc<NativeKernel>>> = FormTable::new();

/// Whether `form` of `kernel` has been compiled (or, for C, found
/// unsupported) and is kept ([`compiled`]).
pub fn is_compiled(kernel: &Kernel, form: Form) -> bool {
    match form {
        Form::C(_) => C_FORMS.contains(kernel, form),
        Form::Cuda { .. } => nvrtc::CUDA_FORMS.contains(kernel, form),
    }
}

/// Lowers `root` for `backend`: the generic kernel (parameters read as
/// values at run time), with its compiled form for C (testing what it
/// writes for finiteness with [`FiniteCheck::Checked`]); the interpreter
/// (and a kernel C does not support) runs the same kernel.
pub fn lower_for(
    root: &Arc<Node>,
    patch: &Patch,
    into_target: bool,
    backend: Backend,
    finite_check: FiniteCheck,
) -> OperatorResult<Runnable> {
    if backend.resolved()? == Backend::C {
        let generic = lower_cached(root, patch, into_target)?;
        if let Some(native) = native_of(&generic.kernel, finite_check)? {
            return Ok(Runnable {
                lowered: generic,
                native: Some(native),
            });
        }
    }
    // The interpreter runs the same generic kernel: folding parameter
    // values into constants let the lowering merge them into other
    // weights (`b * (u + dt * rhs)` into `b u + (b dt) rhs`), which
    // changed the last bit against the compiled C (2.8e-17 in the heat
    // case): one kernel, one rounding, the same bits on every back end.
    let lowered = lower_cached(root, patch, into_target)?;
    Ok(Runnable {
        lowered,
        native: None,
    })
}

/// The generated source of the kernel that assigns `root` into a target on
/// `patch`, in `dialect`, with its helpers: what the back ends compile (the
/// analogue of Devito's `print(op)`). The function is named `kernel`.
///
/// ```
/// use watershed_fields::{CellCentre, Device, Grid, SpatialField};
/// use watershed_backends::codegen::generated_source;
/// use watershed_language::vmath::Dialect;
/// use watershed_language::{exp, field};
/// let patch = Grid::new([8, 8, 8], [1.0; 3], [0.0; 3])?.whole_domain(1);
/// let phi = SpatialField::<CellCentre>::new("phi", &patch, Device::Cpu)?;
/// let expr = exp(field(&phi)) * 2.0;
/// let c = generated_source(expr.node(), &patch, Dialect::C)?;
/// assert!(c.contains("long long kernel(") && c.contains("ws_exp("));
/// let cuda = generated_source(expr.node(), &patch, Dialect::Cuda)?;
/// assert!(cuda.contains("__global__ void kernel("));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn generated_source(
    root: &Arc<Node>,
    patch: &Patch,
    dialect: crate::vmath::Dialect,
) -> OperatorResult<String> {
    let body = kernel_source(root, patch, dialect, "kernel")?;
    Ok(format!("{}\n{body}", emit::prelude(dialect)))
}

/// The generated function named `name` that assigns `root` into a target
/// on `patch`, in `dialect`, without the helpers ([`emit::prelude`]) it
/// calls: for listing several kernels under one prelude. An expression
/// the emitter does not support is [`watershed_language::OperatorError::Backend`] (it
/// runs on the row interpreter).
pub fn kernel_source(
    root: &Arc<Node>,
    patch: &Patch,
    dialect: crate::vmath::Dialect,
    name: &str,
) -> OperatorResult<String> {
    let lowered = lower_cached(root, patch, true)?;
    match dialect {
        crate::vmath::Dialect::C => emit::c_function(&lowered.kernel, name, FiniteCheck::Checked),
        crate::vmath::Dialect::Cuda => emit::cuda_function(&lowered.kernel, name),
    }
    .map_err(|why| crate::error::OperatorError::Backend {
        what: format!("generating code for {root}"),
        reason: format!("{}: it runs on the row interpreter", why.0),
    })
}
