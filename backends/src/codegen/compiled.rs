//! The compiled forms of lowered kernels, kept one way for every back
//! end: a [`FormTable`] per back end (the C forms with or without the
//! finiteness check, beside `native_of`; the CUDA forms with or without
//! it, beside `nvrtc::cuda_of`), keyed by the kernel's identity
//! ([`Kernel::identity`], never reused in a process) and the [`Form`].
//! `codegen::is_compiled` asks either.
//!
//! Lowering shares one [`Kernel`] among every tree of the same structure on
//! the same grid spacing, so a form is compiled once per kernel, and a
//! launch finds it again with one lookup instead of generating the source
//! to find it by name (about 80 us for CUDA). Below this memo, compiled C
//! is cached on disk by its source's hash (`compile.rs`) and PTX by its
//! kernel name (`nvrtc.rs`). The tables are bounded like the lowering
//! cache: when one holds [`CAPACITY`] forms it is emptied, and forms in use
//! stay alive through the `Arc`s their users hold.

use super::emit::FiniteCheck;
use crate::error::OperatorResult;
use crate::kernel::Kernel;
use std::collections::HashMap;
use std::sync::{OnceLock, RwLock};
use watershed_fields::hashing::QuickHash;

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

/// A table of compiled forms of type `T`: each back end keeps one, as a
/// `static`, beside the type it compiles to (`codegen::native_of`'s C
/// forms, `nvrtc::cuda_of`'s CUDA forms).
pub(crate) struct FormTable<T> {
    forms: OnceLock<RwLock<Forms<T>>>,
}

/// A table's map (read far more often than written: a read lock).
type Forms<T> = HashMap<(u64, Form), T, QuickHash>;

impl<T: Clone> FormTable<T> {
    /// An empty table.
    pub(crate) const fn new() -> Self {
        FormTable {
            forms: OnceLock::new(),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Forms<T>> {
        self.forms
            .get_or_init(Default::default)
            .read()
            .unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Forms<T>> {
        self.forms
            .get_or_init(Default::default)
            .write()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// The form of `kernel`, made by `make` on first use. `make` runs
    /// outside the lock: another thread may make the same form meanwhile,
    /// and the first one stored is kept (both are equal). An error is
    /// returned and not kept.
    pub(crate) fn get_or_make(
        &self,
        kernel: &Kernel,
        form: Form,
        make: impl FnOnce() -> OperatorResult<T>,
    ) -> OperatorResult<T> {
        let key = (kernel.identity, form);
        if let Some(found) = self.read().get(&key) {
            return Ok(found.clone());
        }
        let made = make()?;
        let mut forms = self.write();
        if forms.len() >= CAPACITY && !forms.contains_key(&key) {
            forms.clear();
        }
        Ok(forms.entry(key).or_insert(made).clone())
    }

    /// Whether the table holds `form` of `kernel`.
    pub(crate) fn contains(&self, kernel: &Kernel, form: Form) -> bool {
        self.read().contains_key(&(kernel.identity, form))
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
            uniforms: Vec::new(),
            location: None,
            result: 0,
            identity: Kernel::next_identity(),
        }
    }

    #[test]
    fn a_form_is_made_once_per_kernel_and_form() {
        let table: FormTable<Option<u32>> = FormTable::new();
        let (first, second) = (kernel(), kernel());
        let checked = Form::C(FiniteCheck::Checked);
        let mut calls = 0;
        for _ in 0..3 {
            let made = table.get_or_make(&first, checked, || {
                calls += 1;
                Ok(None)
            });
            assert!(matches!(made, Ok(None)));
        }
        assert_eq!(calls, 1, "made once, then found");
        assert!(table.contains(&first, checked));
        assert!(!table.contains(&first, Form::C(FiniteCheck::Unchecked)));
        assert!(!table.contains(&second, checked));
        // An error is returned and not kept: the next call tries again.
        let failed = table.get_or_make(&second, checked, || {
            Err(OperatorError::Backend {
                what: "a test".into(),
                reason: "refused".into(),
            })
        });
        assert!(matches!(failed, Err(OperatorError::Backend { .. })));
        assert!(!table.contains(&second, checked));
        assert_eq!(
            table.get_or_make(&second, checked, || Ok(Some(7))).unwrap(),
            Some(7)
        );
    }
}
