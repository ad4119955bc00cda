//! The compiled forms of lowered kernels, kept in one place for every back
//! end: the C form with or without its finiteness check and the CUDA form
//! with or without it, keyed by the kernel's identity
//! ([`Kernel::identity`], never reused in a process) and the form.
//!
//! Lowering shares one [`Kernel`] among every tree of the same structure on
//! the same grid spacing, so a form is compiled once per kernel, and a
//! launch finds it again with one lookup instead of generating the source
//! to find it by name (about 80 us for CUDA). Below this memo, compiled C
//! is cached on disk by its source's hash (`compile.rs`) and PTX by its
//! kernel name (`nvrtc.rs`). The tables are bounded like the lowering
//! cache: when one holds [`CAPACITY`] forms it is emptied, and forms in use
//! stay alive through the `Arc`s their users hold.

use super::FiniteCheck;
use super::compile::NativeKernel;
use super::nvrtc::CudaKernel;
use crate::error::OperatorResult;
use crate::kernel::Kernel;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Forms kept per table before it is emptied.
pub const CAPACITY: usize = 4096;

/// Which compiled form of a kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Form {
    /// C for the system compiler, with or without the check that every
    /// value written is finite.
    C(FiniteCheck),
    /// CUDA C compiled to PTX by NVRTC; `checked`: with the finiteness
    /// check.
    Cuda {
        /// Whether the kernel watches for values that are not finite.
        checked: bool,
    },
}

/// One table of compiled forms of type `T`.
struct Table<T> {
    forms: OnceLock<Mutex<HashMap<(u64, Form), T>>>,
}

impl<T: Clone> Table<T> {
    const fn new() -> Self {
        Table {
            forms: OnceLock::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(u64, Form), T>> {
        self.forms
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// The form of `kernel`, made by `make` on first use. `make` runs
    /// outside the lock: another thread may make the same form meanwhile,
    /// and the first one stored is kept (both are equal).
    fn get_or_make(
        &self,
        kernel: &Kernel,
        form: Form,
        make: impl FnOnce() -> OperatorResult<T>,
    ) -> OperatorResult<T> {
        let key = (kernel.identity, form);
        if let Some(found) = self.lock().get(&key) {
            return Ok(found.clone());
        }
        let made = make()?;
        let mut forms = self.lock();
        if forms.len() >= CAPACITY && !forms.contains_key(&key) {
            forms.clear();
        }
        Ok(forms.entry(key).or_insert(made).clone())
    }

    fn contains(&self, kernel: &Kernel, form: Form) -> bool {
        self.lock().contains_key(&(kernel.identity, form))
    }
}

/// C forms; `None`: the emitter does not support the kernel (it runs on
/// the interpreter), remembered so that it is not generated again.
static C_FORMS: Table<Option<Arc<NativeKernel>>> = Table::new();
/// CUDA forms.
static CUDA_FORMS: Table<Arc<CudaKernel>> = Table::new();

/// The C form of `kernel` with `check`, compiled by `make` on first use.
pub(crate) fn c_form(
    kernel: &Kernel,
    check: FiniteCheck,
    make: impl FnOnce() -> OperatorResult<Option<Arc<NativeKernel>>>,
) -> OperatorResult<Option<Arc<NativeKernel>>> {
    C_FORMS.get_or_make(kernel, Form::C(check), make)
}

/// The CUDA form of `kernel` (`checked`: watching for values that are not
/// finite), compiled by `make` on first use.
pub(crate) fn cuda_form(
    kernel: &Kernel,
    checked: bool,
    make: impl FnOnce() -> OperatorResult<Arc<CudaKernel>>,
) -> OperatorResult<Arc<CudaKernel>> {
    CUDA_FORMS.get_or_make(kernel, Form::Cuda { checked }, make)
}

/// Whether `form` of `kernel` has been compiled (or, for C, found
/// unsupported) and is kept.
pub fn is_kept(kernel: &Kernel, form: Form) -> bool {
    match form {
        Form::C(_) => C_FORMS.contains(kernel, form),
        Form::Cuda { .. } => CUDA_FORMS.contains(kernel, form),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::OperatorError;

    fn kernel() -> Kernel {
        Kernel {
            instructions: Vec::new(),
            extensions: Vec::new(),
            registers: 1,
            halo: 0,
            fields: Vec::new(),
            parameters: Vec::new(),
            location: None,
            result: 0,
            identity: Kernel::next_identity(),
        }
    }

    #[test]
    fn a_form_is_made_once_per_kernel_and_form() {
        let (first, second) = (kernel(), kernel());
        let mut calls = 0;
        for _ in 0..3 {
            let made = c_form(&first, FiniteCheck::Checked, || {
                calls += 1;
                Ok(None)
            });
            assert!(matches!(made, Ok(None)));
        }
        assert_eq!(calls, 1, "made once, then found");
        assert!(is_kept(&first, Form::C(FiniteCheck::Checked)));
        assert!(!is_kept(&first, Form::C(FiniteCheck::Unchecked)));
        assert!(!is_kept(&second, Form::C(FiniteCheck::Checked)));
        // An error is returned and not kept: the next call tries again.
        let failed = c_form(&second, FiniteCheck::Checked, || {
            Err(OperatorError::Backend {
                what: "a test".into(),
                reason: "refused".into(),
            })
        });
        assert!(matches!(failed, Err(OperatorError::Backend { .. })));
        assert!(!is_kept(&second, Form::C(FiniteCheck::Checked)));
    }
}
