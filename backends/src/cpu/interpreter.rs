//! The row interpreter: a kernel's instructions run over one block, or the
//! block handed to compiled C (native arguments).

use super::blocks::Block;
use super::blocks::Plan;
use super::blocks::kind_index;
use super::lanes::Extent;
use super::lanes::OutStream;
use super::lanes::Resolved;
use super::lanes::Stream;
use super::lanes::select;
use super::linear::MAX_FUSED_PRODUCTS;
use super::linear::factor_shape;
use super::linear::fill_points;
use super::linear::linear;
use super::linear::{grouped_linear, product_pass};
use super::math::dispatch_binary;
use super::math::dispatch_unary;
use super::scratch::Scratch;
use super::transfer::transfer_row;
use crate::codegen::NativeKernel;
use crate::kernel::Instruction;
use crate::kernel::Kernel;
use crate::kernel::MAX_GROUP_SOURCES;
use crate::kernel::OUTPUT;
use crate::kernel::Operand;
use crate::kernel::Source;
use crate::vocabulary::FieldData;
use crate::vocabulary::TargetData;
use smallvec::SmallVec;
use watershed_fields::FieldLayout;
use watershed_fields::LocationKind;
use watershed_fields::Patch;

/// The arguments of a compiled kernel that do not change between blocks.
pub(super) struct NativeArguments<'a> {
    pub(super) kernel: &'a NativeKernel,
    /// Per field slot: its point (0, 0, 0) (may lie outside the allocation
    /// for fields without ghosts; only used with in-bounds offsets).
    pub(super) pointers: SmallVec<[*const f64; 8]>,
    /// Per field slot: y and z strides, and the geometry (from the plan).
    pub(super) plan: &'a Plan,
}

// SAFETY: the pointers are only read, under the same rules as
// `FieldData`'s (see its `Send`/`Sync`).

unsafe impl Send for NativeArguments<'_> {}
// SAFETY: as above.

unsafe impl Sync for NativeArguments<'_> {}

/// Everything a block needs, shared by all threads.
pub(super) struct Context<'a> {
    pub(super) kernel: &'a Kernel,
    /// The compiled kernel and its fixed arguments; `None`: interpret.
    pub(super) native: Option<NativeArguments<'a>>,
    pub(super) fields: &'a [FieldData<'a>],
    /// Parameter values by slot, read once when the evaluation started.
    pub(super) parameters: &'a [f64],
    /// The kernel's uniform values for those parameters
    /// ([`Kernel::uniform_values`]): what the weights they name are.
    pub(super) uniforms: SmallVec<[f64; 8]>,
    /// The patch, for the layouts coordinates and masks read.
    pub(super) patch: &'a Patch,
    /// The layout of each location on the patch, by [`LocationKind::ALL`]
    /// order, made on first use (most kernels read none).
    pub(super) layouts: [std::sync::OnceLock<Box<FieldLayout>>; 4],
    /// Points per register row (largest block width plus halos).
    pub(super) width: usize,
    /// Rows per register.
    pub(super) rows: usize,
    pub(super) halo: isize,
}

impl Context<'_> {
    /// The layout of `kind` on the patch.
    pub(super) fn layout(&self, kind: LocationKind) -> &FieldLayout {
        self.layouts[kind_index(kind)].get_or_init(|| Box::new(FieldLayout::new(self.patch, kind)))
    }

    pub(super) fn register_len(&self) -> usize {
        self.width * self.rows
    }

    pub(super) fn scratch(&self) -> Scratch {
        Scratch::take(self.kernel.registers.max(1) * self.register_len())
    }

    /// Runs the compiled kernel over `block`, after checking the block's
    /// first and last read of every field and its target rows against
    /// the allocations (as the interpreter's stream asserts do).
    pub(super) fn run_native(
        &self,
        native: &NativeArguments<'_>,
        scratch: &mut [f64],
        target: Option<&TargetData>,
        block: Block,
    ) -> bool {
        let Block {
            x0,
            x1,
            j0,
            rows,
            k,
            planes,
        } = block;
        let last_row = j0 + rows as isize - 1;
        let last_plane = k + planes as isize - 1;
        // One plane per call when the result is read back from the scratch
        // rows (each plane would overwrite the last).
        assert!(
            planes == 1 || self.kernel.result == OUTPUT,
            "a kernel whose result goes to the scratch runs one plane per call"
        );
        for (slot, field) in self.kernel.fields.iter().enumerate() {
            if field.transfer.is_some() {
                continue; // checked per row by the binding's footprint check
            }
            let f = &self.fields[slot];
            let (min, max) = (field.extent.min, field.extent.max);
            let first = f.origin
                + (x0 + min[0])
                + (j0 + min[1]) * f.strides[1]
                + (k + min[2]) * f.strides[2];
            let last = f.origin
                + (x1 - 1 + max[0])
                + (last_row + max[1]) * f.strides[1]
                + (last_plane + max[2]) * f.strides[2];
            assert!(
                first >= 0 && (last as usize) < f.len,
                "field read outside its data"
            );
        }
        let (t_pointer, tsy, tsz) = match target {
            Some(t) => {
                let first = t.origin + x0 + j0 * t.strides[1] + k * t.strides[2];
                let last =
                    t.origin + (x1 - 1) + last_row * t.strides[1] + last_plane * t.strides[2];
                assert!(
                    first >= 0 && (last as usize) < t.len,
                    "target write outside the target"
                );
                (
                    t.pointer.wrapping_offset(t.origin),
                    t.strides[1] as i64,
                    t.strides[2] as i64,
                )
            }
            None => (std::ptr::null_mut(), 0, 0),
        };
        assert!(
            scratch.len() >= self.kernel.registers * self.register_len(),
            "scratch smaller than the kernel's registers"
        );
        // The plan may come from a preparation: its arrays must still fit
        // this call's slots (one pointer, two strides each).
        assert!(
            native.pointers.len() == self.fields.len()
                && native.plan.strides.len() == 2 * self.fields.len(),
            "kernel arguments do not match the bound fields"
        );
        // SAFETY: the function was generated from `self.kernel` with the
        // signature `KernelFn`; it reads one pointer and two strides per
        // slot (lengths checked above) and the geometry its kernel needs
        // (made from the same kernel and patch); every read lies inside
        // its field (checked above, transfers by the binding), writes go
        // to this block's rows of the target (checked above) or to
        // `scratch` (checked above), and the invariants of the design note
        // hold (no loop-carried dependence through the target: it is read
        // only at a point's own offset or where the kernel does not write).
        unsafe {
            let not_finite = (native.kernel.function)(
                native.pointers.as_ptr(),
                native.plan.strides.as_ptr(),
                self.parameters.as_ptr(),
                native.plan.geometry.as_ptr(),
                t_pointer,
                tsy,
                tsz,
                scratch.as_mut_ptr(),
                self.width as i64,
                self.rows as i64,
                self.halo as i64,
                x0 as i64,
                x1 as i64,
                j0 as i64,
                rows as i64,
                k as i64,
                planes as i64,
            );
            // A kernel generated without the test returns 0 whatever it
            // wrote: its rows may not be finite, for a watching caller to
            // scan.
            not_finite != 0 || !native.kernel.checks_finite()
        }
    }

    /// Runs every instruction of the kernel over `block`. Returns false
    /// when the values written to the target are known to be finite (a
    /// generated kernel with [`FiniteCheck::Checked`] tests what it writes
    /// to `t`), true when they may not be (the interpreter and unchecked
    /// kernels do not test; a watching caller scans).
    ///
    /// [`FiniteCheck::Checked`]: crate::codegen::FiniteCheck::Checked
    pub(super) fn run_block(
        &self,
        scratch: &mut [f64],
        target: Option<&TargetData>,
        block: Block,
    ) -> bool {
        if let Some(native) = &self.native {
            return self.run_native(native, scratch, target, block);
        }
        if block.planes > 1 {
            let mut may_be_bad = false;
            for q in 0..block.planes {
                may_be_bad |= self.run_block(scratch, target, block.plane(q));
            }
            return may_be_bad;
        }
        let kernel = self.kernel;
        let base = scratch.as_mut_ptr();
        let (width, register_len) = (self.width as isize, self.register_len() as isize);
        let Block {
            x0,
            x1,
            j0,
            rows,
            k,
            planes: _,
        } = block;
        let last_row = rows as isize - 1;
        for instruction in &kernel.instructions {
            let out_register = instruction.out();
            let (lo, hi) = if out_register == OUTPUT {
                (0, 0)
            } else {
                kernel.extensions[out_register as usize]
            };
            let start = x0 + lo;
            let n = (x1 + hi - start) as usize;
            let extent = Extent { n, rows };
            let stream = |source: Source| -> Stream {
                match source {
                    Source::Field { slot, offset } => {
                        let f = &self.fields[slot as usize];
                        let first = f.origin
                            + (start + offset[0])
                            + (j0 + offset[1]) * f.strides[1]
                            + (k + offset[2]) * f.strides[2];
                        let end = first + last_row * f.strides[1] + n as isize;
                        // The region check makes this unreachable; it keeps a
                        // bug from reading foreign memory.
                        assert!(
                            first >= 0 && end as usize <= f.len,
                            "field read outside its data"
                        );
                        Stream {
                            // SAFETY: in bounds (checked above).
                            pointer: unsafe { f.pointer.offset(first) },
                            row_stride: f.strides[1],
                        }
                    }
                    Source::Register { register, shift } => {
                        let own = register as isize * register_len;
                        let first = own + (start + shift - x0 + self.halo);
                        let end = first + last_row * width + n as isize;
                        assert!(
                            first >= own && end <= own + register_len,
                            "register read outside its block"
                        );
                        Stream {
                            // SAFETY: in bounds of `scratch` (checked above).
                            pointer: unsafe { base.offset(first) as *const f64 },
                            row_stride: width,
                        }
                    }
                }
            };
            let resolve = |operand: &Operand| -> Resolved {
                match *operand {
                    Operand::Constant(c) => Resolved::Constant(c),
                    Operand::One(s, w) => Resolved::One(stream(s), w),
                    Operand::Two(s0, w0, s1, w1) => Resolved::Two(stream(s0), w0, stream(s1), w1),
                }
            };
            let out = if out_register == OUTPUT {
                let t = target.expect("kernels writing the target run with one");
                let first = t.origin + start + j0 * t.strides[1] + k * t.strides[2];
                let end = first + last_row * t.strides[1] + n as isize;
                assert!(
                    first >= 0 && end as usize <= t.len,
                    "target write outside the target"
                );
                OutStream {
                    // SAFETY: in bounds (checked above).
                    pointer: unsafe { t.pointer.offset(first) },
                    row_stride: t.strides[1],
                }
            } else {
                let own = out_register as isize * register_len;
                let first = own + lo + self.halo;
                assert!(
                    first >= own && first + last_row * width + n as isize <= own + register_len
                );
                OutStream {
                    // SAFETY: in bounds of `scratch` (checked above).
                    pointer: unsafe { base.offset(first) },
                    row_stride: width,
                }
            };
            // SAFETY (every call below): all streams were bounds-checked for
            // this extent; the output is this instruction's own register or
            // this block's rows of the target, which no input overlaps
            // (registers are written once, before their readers; aliasing of
            // fields and target is refused before evaluation).
            unsafe {
                match instruction {
                    Instruction::Linear { form, products, .. } => {
                        let uniforms = &self.uniforms;
                        let terms: smallvec::SmallVec<[(Stream, f64); 8]> = form
                            .terms
                            .iter()
                            .map(|(s, w)| (stream(*s), w.value(uniforms)))
                            .collect();
                        let form_constant = form.constant.value(uniforms);
                        // A constant alone is the first product pass's start value.
                        let mut assigned = false;
                        if !terms.is_empty() || products.is_empty() {
                            // The generated code leaves a zero constant out of
                            // a sum of terms; `-0.0 + v` is `v` bit for bit.
                            let constant = if form.has_no_constant() && !terms.is_empty() {
                                -0.0
                            } else {
                                form_constant
                            };
                            let as_differences = form.is_differences();
                            if form.shares_weights() && !as_differences {
                                let groups: SmallVec<
                                    [(f64, SmallVec<[Stream; MAX_GROUP_SOURCES]>); 8],
                                > = form
                                    .groups()
                                    .iter()
                                    .map(|g| {
                                        (
                                            g.weight.value(uniforms),
                                            g.sources.iter().map(|s| stream(*s)).collect(),
                                        )
                                    })
                                    .collect();
                                grouped_linear(out, extent, constant, &groups);
                            } else {
                                linear(out, extent, constant, &terms, as_differences);
                            }
                            assigned = true;
                        }
                        let products: smallvec::SmallVec<[(f64, Resolved, Resolved); 4]> = products
                            .iter()
                            .map(|(w, l, r)| (w.value(uniforms), resolve(l), resolve(r)))
                            .collect();
                        let mut rest = products.as_slice();
                        while !rest.is_empty() {
                            let shape = (factor_shape(&rest[0].1), factor_shape(&rest[0].2));
                            let count = rest
                                .iter()
                                .take(MAX_FUSED_PRODUCTS)
                                .take_while(|(_, l, r)| (factor_shape(l), factor_shape(r)) == shape)
                                .count();
                            product_pass(out, extent, &rest[..count], !assigned, form_constant);
                            assigned = true;
                            rest = &rest[count..];
                        }
                    }
                    Instruction::Unary { op, arg, .. } => {
                        dispatch_unary!(*op, out, extent, resolve(arg))
                    }
                    Instruction::Binary {
                        op, left, right, ..
                    } => {
                        dispatch_binary!(*op, out, extent, resolve(left), resolve(right))
                    }
                    Instruction::Select {
                        condition,
                        if_true,
                        if_false,
                        ..
                    } => {
                        let (c, t, f) = (resolve(condition), resolve(if_true), resolve(if_false));
                        select(out, extent, c, t, f);
                    }
                    Instruction::Coordinate {
                        axis,
                        location,
                        row_offset,
                        ..
                    } => {
                        let layout = self.layout(*location);
                        fill_points(out, extent, [start, j0, k], *row_offset, |index| {
                            layout.coordinate(index)[*axis]
                        });
                    }
                    Instruction::Mask {
                        set,
                        location,
                        row_offset,
                        ..
                    } => {
                        let layout = self.layout(*location);
                        fill_points(out, extent, [start, j0, k], *row_offset, |index| {
                            f64::from(set.contains(index, layout))
                        });
                    }
                    Instruction::Uniform { uniform, .. } => {
                        let value = self
                            .uniforms
                            .get(*uniform as usize)
                            .copied()
                            .unwrap_or(f64::NAN);
                        for r in 0..rows {
                            let o = std::slice::from_raw_parts_mut(
                                out.pointer.offset(r as isize * out.row_stride),
                                n,
                            );
                            o.fill(value);
                        }
                    }
                    Instruction::Transfer {
                        op,
                        slot,
                        row_offset,
                        ..
                    } => {
                        let field = &self.fields[*slot as usize];
                        for r in 0..rows {
                            let o = std::slice::from_raw_parts_mut(
                                out.pointer.offset(r as isize * out.row_stride),
                                n,
                            );
                            let row = [j0 + r as isize + row_offset[0], k + row_offset[1]];
                            transfer_row(o, *op, field, start, row);
                        }
                    }
                    Instruction::Limited {
                        limiter,
                        velocity,
                        cells,
                        ..
                    } => {
                        let v = resolve(velocity);
                        let [m2, m1, p0, p1] = cells.map(|c| resolve(&c));
                        for r in 0..rows {
                            let o = std::slice::from_raw_parts_mut(
                                out.pointer.offset(r as isize * out.row_stride),
                                n,
                            );
                            for (i, o) in o.iter_mut().enumerate() {
                                *o = if v.at(r, i) >= 0.0 {
                                    limiter.face_value(m2.at(r, i), m1.at(r, i), p0.at(r, i))
                                } else {
                                    limiter.face_value(p1.at(r, i), p0.at(r, i), m1.at(r, i))
                                };
                            }
                        }
                    }
                }
            }
        }
        true
    }

    /// Row `r` of the result register after a block of `n` points per row.
    pub(super) fn result_row<'s>(&self, scratch: &'s [f64], r: usize, n: usize) -> &'s [f64] {
        let at =
            self.kernel.result as usize * self.register_len() + r * self.width + self.halo as usize;
        &scratch[at..at + n]
    }
}

/// The context of `kernel` under `plan`.
pub(super) fn context<'a>(
    kernel: &'a Kernel,
    native: Option<&'a NativeKernel>,
    fields: &'a [FieldData<'a>],
    parameters: &'a [f64],
    patch: &'a Patch,
    plan: &'a Plan,
) -> Context<'a> {
    let native = native.map(|native| NativeArguments {
        kernel: native,
        pointers: fields
            .iter()
            .map(|f| f.pointer.wrapping_offset(f.origin))
            .collect(),
        plan,
    });
    Context {
        kernel,
        native,
        fields,
        parameters,
        uniforms: kernel.uniform_values(parameters),
        patch,
        layouts: Default::default(),
        width: plan.width,
        rows: plan.rows,
        halo: plan.halo,
    }
}
