//! The lowering pass: an IR tree becomes a [`Kernel`] (see the module
//! docs of [`crate::kernel`] for the row program it produces): linear forms
//! kept symbolic, nonlinear operations as register instructions, a
//! stencil's neighbouring rows re-lowered (memoised), then registers
//! compacted, products fused into their readers, and the read extents of
//! every field computed backwards.

use crate::error::{OperatorError, OperatorResult};
use crate::ir::Node;
use crate::kernel::{
    Instruction, Kernel, KernelField, LinearForm, MAX_SHIFT, OUTPUT, Operand, ReadExtent, Register,
    Source, Uniforms, Weight, fusable_factor, usable_weight,
};
use crate::parameter::ParameterCell;
use crate::pointwise::{BinaryOp, UnaryOp};
use crate::stencil::{StencilOp, axis_name, stencil_axis, unit};
use std::collections::HashMap;
use std::sync::Arc;
use watershed_fields::{LocationKind, Patch};

/// A subtree already lowered at some row offset, and its form.
type LoweredSubtree = (Arc<Node>, LinearForm);

struct Lowering<'p> {
    patch: &'p Patch,
    slots: HashMap<u64, u16>,
    fields: Vec<(u64, Arc<str>, LocationKind)>,
    /// Per field slot: read directly (`None`) or through an inter-grid operator.
    transfers: Vec<Option<StencilOp>>,
    parameters: Vec<Arc<ParameterCell>>,
    memo: HashMap<(*const Node, [isize; 2]), LinearForm>,
    /// Common-subexpression elimination: the value hash of each subtree
    /// ([`Node::value_hash`]) and, per (hash, row offset), the subtrees
    /// already lowered. A subtree equal (`==`) to one of them reuses its
    /// form, so a subexpression written out twice is computed once per point.
    hashes: HashMap<*const Node, u64>,
    by_value: HashMap<(u64, [isize; 2]), Vec<LoweredSubtree>>,
    instructions: Vec<Instruction>,
    registers: u16,
    /// The values the same at every point of a call (parameters and
    /// expressions of them), which weights may name.
    uniforms: Uniforms,
    /// The register each uniform value was written to for a nonlinear
    /// reader ([`Instruction::Uniform`]), written once.
    uniform_registers: HashMap<u16, Register>,
}

impl Lowering<'_> {
    fn new_register(&mut self) -> Register {
        let r = self.registers;
        self.registers += 1;
        r
    }

    fn emit(&mut self, make: impl FnOnce(Register) -> Instruction) -> LinearForm {
        let out = self.new_register();
        self.instructions.push(make(out));
        LinearForm::source(Source::Register {
            register: out,
            shift: 0,
        })
    }

    /// An operand for `form`, materialising it when it is too large to
    /// inline or has weights only known at run time (an operand's weights
    /// are numbers).
    fn operand(&mut self, form: LinearForm) -> Operand {
        match form.as_constant() {
            Some(Weight::Number(c)) => return Operand::Constant(c),
            Some(Weight::Uniform(uniform)) => {
                let register = match self.uniform_registers.get(&uniform) {
                    Some(&register) => register,
                    None => {
                        let register = self.new_register();
                        self.instructions.push(Instruction::Uniform {
                            out: register,
                            uniform,
                        });
                        self.uniform_registers.insert(uniform, register);
                        register
                    }
                };
                return Operand::One(Source::Register { register, shift: 0 }, 1.0);
            }
            None => {}
        }
        let number = |w: Weight| w.number();
        if form.has_no_constant() {
            match form.terms.as_slice() {
                [(s, w)] if let Some(w) = number(*w) => return Operand::One(*s, w),
                [(s0, w0), (s1, w1)] if let (Some(w0), Some(w1)) = (number(*w0), number(*w1)) => {
                    return Operand::Two(*s0, w0, *s1, w1);
                }
                _ => {}
            }
        }
        let materialised = self.emit(|out| Instruction::Linear {
            out,
            form,
            products: Vec::new(),
        });
        Operand::One(materialised.terms[0].0, 1.0)
    }

    /// The argument of a stencil at `offset` from the row `row`.
    fn at_offset(
        &mut self,
        node: &Arc<Node>,
        row: [isize; 2],
        offset: [isize; 3],
    ) -> OperatorResult<LinearForm> {
        let neighbour = [row[0] + offset[1], row[1] + offset[2]];
        Ok(self.lower(node, neighbour)?.shifted_x(offset[0]))
    }

    /// The slot of field `id`, read directly (`transfer` `None`) or through
    /// an inter-grid operator; one field cannot be read both ways.
    fn field_slot(
        &mut self,
        id: u64,
        name: &Arc<str>,
        location: LocationKind,
        transfer: Option<StencilOp>,
    ) -> OperatorResult<u16> {
        let next = self.fields.len() as u16;
        let slot = *self.slots.entry(id).or_insert_with(|| next);
        if slot == next {
            self.fields.push((id, name.clone(), location));
            self.transfers.push(transfer);
        } else if self.transfers[slot as usize] != transfer {
            let describe = |t: Option<StencilOp>| t.map_or("directly".to_string(), |op| op.name());
            return Err(OperatorError::InterGrid {
                field: name.to_string(),
                reason: format!(
                    "it is read both {} and {} in one expression; a field lives on one grid, so read it through one operator",
                    describe(self.transfers[slot as usize]),
                    describe(transfer)
                ),
            });
        }
        Ok(slot)
    }

    /// An inter-grid operator: its argument must be a cell field (on the
    /// other grid), with a ratio of 1 or 2 per axis.
    fn lower_transfer(
        &mut self,
        op: StencilOp,
        ratio: [usize; 3],
        args: &[Arc<Node>],
        row: [isize; 2],
    ) -> OperatorResult<LinearForm> {
        let Some(Node::Field { id, name, location }) = args.first().map(|a| a.as_ref()) else {
            return Err(OperatorError::InterGrid {
                field: args
                    .first()
                    .map_or("nothing".to_string(), |a| a.to_string()),
                reason: format!(
                    "{} reads a field on another grid; its argument must be a field, not an expression (assign the expression to a field on that grid first)",
                    op.name()
                ),
            });
        };
        if *location != LocationKind::CellCentre {
            return Err(OperatorError::InterGrid {
                field: name.to_string(),
                reason: format!(
                    "{} is defined for cell-centred fields; the field is at {location:?}",
                    op.name()
                ),
            });
        }
        if let Some(axis) = (0..3).find(|&a| !(1..=2).contains(&ratio[a])) {
            return Err(OperatorError::InterGrid {
                field: name.to_string(),
                reason: format!(
                    "{}: the ratio along {} is {}, but grids are refined by 1 or 2 per axis",
                    op.name(),
                    axis_name(axis),
                    ratio[axis]
                ),
            });
        }
        let slot = self.field_slot(*id, name, *location, Some(op))?;
        Ok(self.emit(|out| Instruction::Transfer {
            out,
            op,
            slot,
            row_offset: row,
        }))
    }

    fn lower(&mut self, node: &Arc<Node>, row: [isize; 2]) -> OperatorResult<LinearForm> {
        let key = (Arc::as_ptr(node), row);
        if let Some(done) = self.memo.get(&key) {
            return Ok(done.clone());
        }
        let value_key = (node.value_hash(&mut self.hashes), row);
        if let Some(equal) = self
            .by_value
            .get(&value_key)
            .and_then(|seen| seen.iter().find(|(tree, _)| tree.as_ref() == node.as_ref()))
        {
            let form = equal.1.clone();
            self.memo.insert(key, form.clone());
            return Ok(form);
        }
        let form = match node.as_ref() {
            Node::Field { id, name, location } => {
                let slot = self.field_slot(*id, name, *location, None)?;
                LinearForm::source(Source::Field {
                    slot,
                    offset: [0, row[0], row[1]],
                })
            }
            Node::Constant(value) => LinearForm::number(*value),
            Node::Parameter { cell } => {
                let slot = match self.parameters.iter().position(|p| p.id() == cell.id()) {
                    Some(slot) => slot,
                    None => {
                        self.parameters.push(cell.clone());
                        self.parameters.len() - 1
                    }
                } as u16;
                LinearForm::constant(self.uniforms.parameter(slot))
            }
            Node::Coordinate { axis, location } => {
                let (axis, location) = (*axis, *location);
                if axis > 2 {
                    return Err(OperatorError::InvalidAxis {
                        what: format!("coordinate({axis})"),
                        axis,
                    });
                }
                self.emit(|out| Instruction::Coordinate {
                    out,
                    axis,
                    location,
                    row_offset: row,
                })
            }
            Node::Mask { set, location } => {
                let (set, location) = (set.clone(), *location);
                self.emit(|out| Instruction::Mask {
                    out,
                    set,
                    location,
                    row_offset: row,
                })
            }
            Node::Unary {
                op: UnaryOp::Negate,
                arg,
            } => self
                .lower(arg, row)?
                .scaled(Weight::Number(-1.0), &mut self.uniforms),
            Node::Unary { op, arg } => {
                let value = self.lower(arg, row)?;
                match value.as_constant() {
                    Some(Weight::Number(c)) => LinearForm::number(op.apply(c)),
                    _ => {
                        let arg = self.operand(value);
                        let op = *op;
                        self.emit(|out| Instruction::Unary { op, out, arg })
                    }
                }
            }
            Node::Binary { op, left, right } => {
                let a = self.lower(left, row)?;
                let b = self.lower(right, row)?;
                let u = &mut self.uniforms;
                match (op, a.as_constant(), b.as_constant()) {
                    (_, Some(Weight::Number(x)), Some(Weight::Number(y))) => {
                        LinearForm::number(op.apply(x, y))
                    }
                    (BinaryOp::Add, _, _) => a.add_scaled(&b, Weight::Number(1.0), u),
                    (BinaryOp::Subtract, _, _) => a.add_scaled(&b, Weight::Number(-1.0), u),
                    // A parameter (or an expression of parameters) scales a
                    // form as a number does: its weights become uniform
                    // values, formed once per call.
                    (BinaryOp::Multiply, Some(x), Some(y)) => LinearForm::constant(u.product(x, y)),
                    (BinaryOp::Multiply, Some(x), None) => b.scaled(x, u),
                    (BinaryOp::Multiply, None, Some(y)) => a.scaled(y, u),
                    (BinaryOp::Divide, Some(x), Some(y)) => LinearForm::constant(u.quotient(x, y)),
                    (BinaryOp::Divide, None, Some(y)) => {
                        let reciprocal = u.quotient(Weight::Number(1.0), y);
                        a.scaled(reciprocal, u)
                    }
                    (BinaryOp::Pow, None, Some(Weight::Number(2.0))) => {
                        // x^2 as one product: correctly rounded (the vector
                        // `pow` is within 2 ulp), and the same for every x,
                        // zeros, infinities and NaN included.
                        let base = self.operand(a);
                        self.emit(|out| Instruction::Binary {
                            op: BinaryOp::Multiply,
                            out,
                            left: base,
                            right: base,
                        })
                    }
                    (BinaryOp::Multiply | BinaryOp::Divide, None, None)
                        if a.has_no_constant()
                            && b.has_no_constant()
                            && let (Some(wa), Some(wb)) =
                                (usable_weight(a.terms[0].1), usable_weight(b.terms[0].1)) =>
                    {
                        // Pull the weights out of both factors into the
                        // consumer's weight: (wa A)(wb B) = (wa wb) (A B), so
                        // the product loop does no scaling (e.g. a face
                        // diffusivity times a gradient is one add, one
                        // subtract and one multiply per point).
                        let left = a.scaled(Weight::Number(1.0 / wa), u);
                        let right = b.scaled(Weight::Number(1.0 / wb), u);
                        let left = self.operand(left);
                        let right = self.operand(right);
                        let op = *op;
                        let product = self.emit(|out| Instruction::Binary {
                            op,
                            out,
                            left,
                            right,
                        });
                        let factor = if op == BinaryOp::Multiply {
                            wa * wb
                        } else {
                            wa / wb
                        };
                        product.scaled(Weight::Number(factor), &mut self.uniforms)
                    }
                    _ => {
                        let left = self.operand(a);
                        let right = self.operand(b);
                        let op = *op;
                        self.emit(|out| Instruction::Binary {
                            op,
                            out,
                            left,
                            right,
                        })
                    }
                }
            }
            Node::Select {
                condition,
                if_true,
                if_false,
            } => {
                let c = self.lower(condition, row)?;
                match c.as_constant() {
                    Some(Weight::Number(c)) if c != 0.0 => self.lower(if_true, row)?,
                    Some(Weight::Number(_)) => self.lower(if_false, row)?,
                    // A condition of parameters is decided per call, by
                    // the back ends (a C kernel holds both loop nests).
                    _ => {
                        let t = self.lower(if_true, row)?;
                        let f = self.lower(if_false, row)?;
                        let condition = self.operand(c);
                        let if_true = self.operand(t);
                        let if_false = self.operand(f);
                        self.emit(|out| Instruction::Select {
                            out,
                            condition,
                            if_true,
                            if_false,
                        })
                    }
                }
            }
            Node::Stencil { op, args } => self.lower_stencil(*op, args, row)?,
        };
        self.memo.insert(key, form.clone());
        self.by_value
            .entry(value_key)
            .or_default()
            .push((node.clone(), form.clone()));
        Ok(form)
    }

    fn lower_stencil(
        &mut self,
        op: StencilOp,
        args: &[Arc<Node>],
        row: [isize; 2],
    ) -> OperatorResult<LinearForm> {
        let grid = self.patch.grid();
        if let Some(ratio) = op.transfer_ratio() {
            return self.lower_transfer(op, ratio, args, row);
        }
        if let StencilOp::Shift { offset } = op
            && offset.iter().any(|o| o.abs() > MAX_SHIFT)
        {
            return Err(OperatorError::InvalidOffset {
                what: op.name(),
                offset,
                limit: MAX_SHIFT,
            });
        }
        if let Some(axis) = stencil_axis(op) {
            if axis > 2 {
                return Err(OperatorError::InvalidAxis {
                    what: op.name(),
                    axis,
                });
            }
            if !grid.active_dimensions()[axis] {
                // One cell along `axis`: every field is uniform along it, so
                // differences vanish and interpolation is the identity (a 2D
                // `div(interp(g) * grad(p))` built without knowing the grid
                // gets no z contribution, as the Laplacian has none).
                return match op {
                    StencilOp::Gradient { .. }
                    | StencilOp::Divergence { .. }
                    | StencilOp::Gradient4 { .. }
                    | StencilOp::Divergence4 { .. }
                    | StencilOp::CentredDerivative { .. } => Ok(LinearForm::number(0.0)),
                    StencilOp::InterpolateToFace { .. }
                    | StencilOp::InterpolateToCell { .. }
                    | StencilOp::InterpolateToFace4 { .. }
                    | StencilOp::InterpolateToCell4 { .. } => self.lower(&args[0], row),
                    StencilOp::Upwind { .. } | StencilOp::Limited { .. } => {
                        self.lower(&args[1], row)
                    }
                    StencilOp::Laplacian
                    | StencilOp::Laplacian4
                    | StencilOp::Relabel { .. }
                    | StencilOp::Shift { .. }
                    | StencilOp::Restrict { .. }
                    | StencilOp::Prolongate { .. } => {
                        unreachable!("these have no single axis")
                    }
                };
            }
        }
        if let Some(points) = op.linear_points(grid.spacing(), grid.active_dimensions()) {
            let mut sum = LinearForm::number(0.0);
            for (offset, weight) in points {
                let value = self.at_offset(&args[0], row, offset)?;
                sum = sum.add_scaled(&value, Weight::Number(weight), &mut self.uniforms);
            }
            return Ok(sum);
        }
        match op {
            StencilOp::Upwind { axis } => {
                let velocity = self.lower(&args[0], row)?;
                let lower_cell = self.at_offset(&args[1], row, unit(axis, -1))?;
                let upper_cell = self.at_offset(&args[1], row, [0; 3])?;
                let v = self.operand(velocity);
                let positive = self.emit(|out| Instruction::Binary {
                    op: BinaryOp::GreaterEqual,
                    out,
                    left: v,
                    right: Operand::Constant(0.0),
                });
                let condition = self.operand(positive);
                let if_true = self.operand(lower_cell);
                let if_false = self.operand(upper_cell);
                Ok(self.emit(|out| Instruction::Select {
                    out,
                    condition,
                    if_true,
                    if_false,
                }))
            }
            StencilOp::Limited { axis, limiter } => {
                let velocity = self.lower(&args[0], row)?;
                let velocity = self.operand(velocity);
                let mut cells = [Operand::Constant(0.0); 4];
                for (cell, offset) in cells.iter_mut().zip(-2..=1) {
                    let value = self.at_offset(&args[1], row, unit(axis, offset))?;
                    *cell = self.operand(value);
                }
                Ok(self.emit(|out| Instruction::Limited {
                    out,
                    limiter,
                    velocity,
                    cells,
                }))
            }
            _ => unreachable!("linear stencils are handled above"),
        }
    }
}

impl Kernel {
    /// Lowers `root` for evaluation on `patch`. With `into_target`, the last
    /// instruction writes the target row ([`OUTPUT`]); otherwise the result
    /// is left in register [`Kernel::result`] (for reductions).
    pub fn compile(root: &Arc<Node>, patch: &Patch, into_target: bool) -> OperatorResult<Kernel> {
        let mut lowering = Lowering {
            patch,
            slots: HashMap::new(),
            fields: Vec::new(),
            transfers: Vec::new(),
            parameters: Vec::new(),
            memo: HashMap::new(),
            hashes: HashMap::new(),
            by_value: HashMap::new(),
            instructions: Vec::new(),
            registers: 0,
            uniforms: Uniforms::default(),
            uniform_registers: HashMap::new(),
        };
        let form = lowering.lower(root, [0, 0])?;
        let Lowering {
            mut instructions,
            registers,
            fields,
            transfers,
            parameters,
            uniforms,
            ..
        } = lowering;
        let mut registers = registers;
        let result: Register;
        // Let the last instruction write the result directly when the root
        // is exactly its register and nothing else reads it.
        let direct = match form.terms.as_slice() {
            [(Source::Register { register, shift: 0 }, w)]
                if form.has_no_constant()
                    && w.is(1.0)
                    && instructions.last().is_some_and(|i| i.out() == *register)
                    && !instructions.iter().any(|i| {
                        i.sources().iter().any(
                            |s| matches!(s, Source::Register { register: r, .. } if r == register),
                        )
                    }) =>
            {
                Some(*register)
            }
            _ => None,
        };
        match (direct, into_target) {
            (Some(_), true) => {
                *instructions.last_mut().expect("checked above").out_mut() = OUTPUT;
                result = OUTPUT;
            }
            (Some(register), false) => result = register,
            (None, _) => {
                let out = if into_target {
                    OUTPUT
                } else {
                    registers += 1;
                    registers - 1
                };
                instructions.push(Instruction::Linear {
                    out,
                    form,
                    products: Vec::new(),
                });
                result = out;
            }
        }

        fuse_products(&mut instructions);
        let (registers, result) = compact_registers(&mut instructions, result);

        // Backward pass: how far each register extends beyond the tile.
        let mut extensions: Vec<Option<(isize, isize)>> = vec![None; registers as usize];
        let range_of = |extensions: &[Option<(isize, isize)>], r: Register| {
            if r == OUTPUT || r == result {
                Some((0, 0))
            } else {
                extensions[r as usize]
            }
        };
        let mut field_extents: Vec<Option<ReadExtent>> = vec![None; fields.len()];
        let widen = |entry: &mut Option<ReadExtent>, read: ReadExtent| {
            *entry = Some(match *entry {
                None => read,
                Some(e) => ReadExtent {
                    min: [0, 1, 2].map(|a| e.min[a].min(read.min[a])),
                    max: [0, 1, 2].map(|a| e.max[a].max(read.max[a])),
                },
            });
        };
        for instruction in instructions.iter().rev() {
            let Some((lo, hi)) = range_of(&extensions, instruction.out()) else {
                continue; // dead code
            };
            if let Instruction::Transfer {
                slot, row_offset, ..
            } = instruction
            {
                let read = ReadExtent {
                    min: [lo, row_offset[0], row_offset[1]],
                    max: [hi, row_offset[0], row_offset[1]],
                };
                widen(&mut field_extents[*slot as usize], read);
            }
            for source in instruction.sources() {
                match source {
                    Source::Register { register, shift } => {
                        let entry = &mut extensions[register as usize];
                        *entry = Some(match *entry {
                            None => (lo + shift, hi + shift),
                            Some((a, b)) => (a.min(lo + shift), b.max(hi + shift)),
                        });
                    }
                    Source::Field { slot, offset } => {
                        let read = ReadExtent {
                            min: [lo + offset[0], offset[1], offset[2]],
                            max: [hi + offset[0], offset[1], offset[2]],
                        };
                        widen(&mut field_extents[slot as usize], read);
                    }
                }
            }
        }
        if result != OUTPUT && (result as usize) < extensions.len() {
            extensions[result as usize] = Some((0, 0));
        }
        let extensions: Vec<(isize, isize)> = extensions
            .into_iter()
            .map(|e| e.unwrap_or((0, 0)))
            .collect();
        let halo = extensions
            .iter()
            .map(|&(lo, hi)| (-lo).max(hi))
            .max()
            .unwrap_or(0)
            .max(0);
        let fields = fields
            .into_iter()
            .zip(field_extents)
            .zip(transfers)
            .map(|(((id, name, location), extent), transfer)| KernelField {
                id,
                name,
                location,
                extent: extent.unwrap_or(ReadExtent {
                    min: [0; 3],
                    max: [0; 3],
                }),
                transfer,
            })
            .collect();
        Ok(Kernel {
            instructions,
            extensions,
            registers: registers as usize,
            halo,
            fields,
            parameters,
            uniforms: uniforms.values,
            location: root.location(),
            result,
            identity: Kernel::next_identity(),
        })
    }
}

/// Renumbers the registers `0..count` in order of definition (fusion leaves
/// gaps); returns the count and the result register's new number.
fn compact_registers(instructions: &mut [Instruction], result: Register) -> (u16, Register) {
    let mut numbers: HashMap<Register, Register> = HashMap::new();
    for instruction in instructions.iter() {
        let out = instruction.out();
        if out != OUTPUT {
            let next = numbers.len() as Register;
            numbers.entry(out).or_insert(next);
        }
    }
    let rename = |r: Register| if r == OUTPUT { OUTPUT } else { numbers[&r] };
    for instruction in instructions.iter_mut() {
        *instruction.out_mut() = rename(instruction.out());
        match instruction {
            Instruction::Linear { form, products, .. } => {
                for term in &mut form.terms {
                    term.0 = term.0.renamed(&rename);
                }
                for (_, left, right) in products.iter_mut() {
                    *left = left.renamed(&rename);
                    *right = right.renamed(&rename);
                }
            }
            Instruction::Unary { arg, .. } => *arg = arg.renamed(&rename),
            Instruction::Binary { left, right, .. } => {
                *left = left.renamed(&rename);
                *right = right.renamed(&rename);
            }
            Instruction::Select {
                condition,
                if_true,
                if_false,
                ..
            } => {
                for operand in [condition, if_true, if_false] {
                    *operand = operand.renamed(&rename);
                }
            }
            Instruction::Coordinate { .. }
            | Instruction::Mask { .. }
            | Instruction::Uniform { .. }
            | Instruction::Transfer { .. } => {}
            Instruction::Limited {
                velocity, cells, ..
            } => {
                *velocity = velocity.renamed(&rename);
                for cell in cells.iter_mut() {
                    *cell = cell.renamed(&rename);
                }
            }
        }
    }
    (numbers.len() as u16, rename(result))
}

/// Moves products into the linear combinations that read them: a product
/// of two fusable factors whose every reader is a linear combination is
/// evaluated inline by each reader (at the reader's shift), like a
/// hand-written loop that computes a face flux on the fly for each
/// neighbouring cell. The product register then disappears.
fn fuse_products(instructions: &mut Vec<Instruction>) {
    let mut readers: HashMap<Register, (usize, bool)> = HashMap::new();
    for instruction in instructions.iter() {
        let linear = matches!(instruction, Instruction::Linear { .. });
        for source in instruction.sources() {
            if let Source::Register { register, .. } = source {
                let entry = readers.entry(register).or_insert((0, true));
                entry.0 += 1;
                entry.1 &= linear;
            }
        }
    }
    let mut fused: HashMap<Register, (Operand, Operand)> = HashMap::new();
    for instruction in instructions.iter() {
        if let Instruction::Binary {
            op: BinaryOp::Multiply,
            out,
            left,
            right,
        } = instruction
            && readers
                .get(out)
                .is_some_and(|&(count, only_linear)| count > 0 && only_linear)
            && fusable_factor(left)
            && fusable_factor(right)
        {
            fused.insert(*out, (*left, *right));
        }
    }
    if fused.is_empty() {
        return;
    }
    for instruction in instructions.iter_mut() {
        if let Instruction::Linear { form, products, .. } = instruction {
            form.terms.retain(|(source, weight)| match source {
                Source::Register { register, shift } if fused.contains_key(register) => {
                    let (left, right) = fused[register];
                    products.push((*weight, left.shifted_x(*shift), right.shifted_x(*shift)));
                    false
                }
                _ => true,
            });
        }
    }
    instructions
        .retain(|i| !(matches!(i, Instruction::Binary { .. }) && fused.contains_key(&i.out())));
}
