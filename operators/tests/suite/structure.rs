//! Structure of compiled kernels and of the IR.
//!
//! * The fused row program of `div(interp(gamma) * grad(phi))` is the work of
//!   a hand-written loop: one instruction writing the output, with the six
//!   face fluxes (four in 2D) computed inline as products of
//!   `(gamma_a + gamma_b) * (phi_a - phi_b)`; no intermediate row is stored.
//!   Its read extents are one point each way on active axes. A product that
//!   a nonlinear instruction reads stays an instruction of its own.
//! * `Node::structural_hash` ignores which fields are read (only the pattern
//!   of leaves) and sees every other change of structure.

use watershed_fields::{
    CellCentre, Device, GhostWidth, Grid, IndexBox, Patch, SpatialField, XFace, YFace,
};
use watershed_operators::kernel::{Instruction, Kernel, OUTPUT};
use watershed_operators::*;

/// A zero CPU field named `name` on `patch`.
fn cells(name: &str, patch: &Patch) -> SpatialField<CellCentre> {
    SpatialField::new(name, patch, Device::Cpu).unwrap()
}

/// Checks the diffusion kernel on `patch`: a single instruction, a linear
/// combination writing the output with no plain terms and `products` fused
/// products (one flux per face of the cell, computed on the fly as a
/// hand-written loop does); each field read one point each way along the
/// active axes.
fn check_diffusion_kernel(patch: &Patch, products: usize) {
    let gamma = cells("gamma", patch);
    let phi = cells("phi", patch);
    let expr = div(interp(&gamma) * grad(&phi));
    let kernel = Kernel::compile(expr.node(), patch, true).unwrap();
    assert_eq!(kernel.len(), 1, "row program:\n{kernel}");
    assert_eq!(
        kernel.registers, 0,
        "no intermediate row is stored:\n{kernel}"
    );
    match kernel.instructions.last() {
        Some(Instruction::Linear {
            out,
            form,
            products: fused,
        }) => {
            assert_eq!(*out, OUTPUT, "row program:\n{kernel}");
            assert!(form.terms.is_empty(), "row program:\n{kernel}");
            assert_eq!(form.constant, 0.0);
            assert_eq!(fused.len(), products, "row program:\n{kernel}");
            // Each product is (k_a + k_b) * (phi_a - phi_b): the weights were
            // pulled out of both factors.
            for (_, left, right) in fused {
                assert!(
                    kernel::fusable_factor(left) && kernel::fusable_factor(right),
                    "{kernel}"
                );
            }
        }
        other => panic!("last instruction {other:?}, row program:\n{kernel}"),
    }
    let active = patch.grid().active_dimensions();
    let reach = active.map(isize::from);
    assert_eq!(kernel.fields.len(), 2);
    for field in &kernel.fields {
        assert_eq!(field.extent.min, reach.map(|r| -r), "{}", field.name);
        assert_eq!(field.extent.max, reach, "{}", field.name);
    }
}

#[test]
fn diffusion_fuses_into_one_pass_of_six_fluxes_in_3d() {
    let grid = Grid::new([6, 5, 4], [1.0; 3], [0.0; 3]).unwrap();
    check_diffusion_kernel(&grid.whole_domain(1), 6);
    // A partial patch changes nothing in the program.
    let patch = Patch::new(&grid, [1, 1, 1], [3, 3, 3], GhostWidth::uniform(1)).unwrap();
    check_diffusion_kernel(&patch, 6);
}

#[test]
fn diffusion_fuses_into_one_pass_of_four_fluxes_in_2d() {
    let grid = Grid::new([6, 5, 1], [1.0; 3], [0.0; 3]).unwrap();
    check_diffusion_kernel(&grid.whole_domain(1), 4);
}

#[test]
fn a_product_read_by_a_nonlinear_instruction_is_kept() {
    // exp(grad * interp) needs the product as an operand: it stays an
    // instruction of its own.
    let grid = Grid::new([6, 5, 4], [1.0; 3], [0.0; 3]).unwrap();
    let patch = grid.whole_domain(1);
    let (gamma, phi) = (cells("gamma", &patch), cells("phi", &patch));
    let expr = divergence::<XFace>(exp(
        gradient::<XFace>(&phi) * interpolate_to_face::<XFace>(&gamma)
    ));
    let kernel = Kernel::compile(expr.node(), &patch, true).unwrap();
    let kept = kernel
        .instructions
        .iter()
        .filter(|i| {
            matches!(
                i,
                Instruction::Binary {
                    op: BinaryOp::Multiply,
                    ..
                }
            )
        })
        .count();
    assert_eq!(kept, 1, "row program:\n{kernel}");
}

#[test]
fn linear_expressions_fold_into_one_sum() {
    // A Laplacian plus a scaled field: a single linear instruction, 7 + 1
    // terms merged (the centre terms of phi combine).
    let grid = Grid::new([6, 5, 4], [1.0; 3], [0.0; 3]).unwrap();
    let patch = grid.whole_domain(1);
    let phi = cells("phi", &patch);
    let src = cells("src", &patch);
    let expr = laplacian(&phi) * 0.5 - 2.0 * field(&phi) + &src;
    let kernel = Kernel::compile(expr.node(), &patch, true).unwrap();
    assert_eq!(kernel.len(), 1, "row program:\n{kernel}");
    match &kernel.instructions[0] {
        Instruction::Linear { out, form, .. } => {
            assert_eq!(*out, OUTPUT);
            assert_eq!(form.terms.len(), 8, "row program:\n{kernel}");
        }
        other => panic!("{other:?}"),
    }
    // A reduction keeps its result in a register instead.
    let reduction = Kernel::compile(expr.node(), &patch, false).unwrap();
    assert_ne!(reduction.result, OUTPUT);
    assert!(reduction.instructions.iter().all(|i| i.out() != OUTPUT));
}

#[test]
fn structural_hash_ignores_the_fields_and_sees_the_structure() {
    let grid = Grid::new([6, 5, 4], [1.0; 3], [0.0; 3]).unwrap();
    let patch = grid.whole_domain(2);
    let (gamma, phi, kappa, psi) = (
        cells("gamma", &patch),
        cells("phi", &patch),
        cells("kappa", &patch),
        cells("psi", &patch),
    );
    let u = SpatialField::<XFace>::new("u", &patch, Device::Cpu).unwrap();
    let v = SpatialField::<XFace>::new("v", &patch, Device::Cpu).unwrap();
    let y = SpatialField::<YFace>::new("y", &patch, Device::Cpu).unwrap();
    let hash = |e: &Expr<'_, CellCentre>| e.node().structural_hash();

    let diffusion = div(interp(&gamma) * grad(&phi));
    // Same structure over other fields (and with the roles swapped: leaves
    // are numbered by first appearance), and the same expression rebuilt.
    for same in [
        div(interp(&kappa) * grad(&psi)),
        div(interp(&phi) * grad(&gamma)),
        div(interp(&gamma) * grad(&phi)),
    ] {
        assert_eq!(hash(&same), hash(&diffusion), "{same} vs {diffusion}");
    }
    // Different structure.
    let different: Vec<Expr<'_, CellCentre>> = vec![
        div(interp(&gamma) * grad(&gamma)), // one field twice
        div(grad(&phi) * interp(&gamma)),   // operands swapped
        div(interp(&gamma) + grad(&phi)),   // another operation
        div(interp(&gamma) * grad(&phi)) * 1.0,
        div(interp(&gamma) * grad(&phi) * 2.0),
        divergence::<XFace>(interpolate_to_face::<XFace>(&gamma) * gradient::<XFace>(&phi)),
        field(&phi) + 1.0,
        laplacian(&phi),
        exp(&phi),
        log(&phi),
        interpolate_to_cell::<XFace>(&u),
        interpolate_to_cell::<YFace>(&y),
        divergence::<XFace>(limited::<XFace>(Limiter::Minmod, &u, &phi)),
        divergence::<XFace>(limited::<XFace>(Limiter::VanLeer, &u, &phi)),
        divergence::<XFace>(upwind::<XFace>(&u, &phi)),
        divergence::<XFace>(upwind::<XFace>(&v, &phi) * &u),
        cond(on(&Mask::<CellCentre>::boundary(Side::MINUS_X)), 1.0).otherwise(&phi),
        cond(on(&Mask::<CellCentre>::boundary(Side::PLUS_X)), 1.0).otherwise(&phi),
        cond(
            on(&Mask::<CellCentre>::region(IndexBox::new([0; 3], [2; 3]))),
            1.0,
        )
        .otherwise(&phi),
        cond(field(&phi).lt(0.0), 1.0).otherwise(&phi),
        cond(field(&phi).le(0.0), 1.0).otherwise(&phi),
        coordinate::<CellCentre>(0) * &phi,
        coordinate::<CellCentre>(1) * &phi,
    ];
    let hashes: Vec<u64> = different.iter().map(hash).collect();
    assert!(!hashes.contains(&hash(&diffusion)));
    for (i, a) in hashes.iter().enumerate() {
        for (j, b) in hashes.iter().enumerate().skip(i + 1) {
            assert_ne!(a, b, "{} vs {}", different[i], different[j]);
        }
    }
    // Constants are part of the structure, bit for bit.
    assert_ne!(hash(&(field(&phi) + 1.0)), hash(&(field(&phi) + 2.0)));
    assert_eq!(hash(&(field(&phi) + 1.0)), hash(&(field(&psi) + 1.0)));
}

/// A subexpression written out twice (two separate trees, equal by value)
/// is lowered once: one `exp` per point, not two, and the values are those
/// of a hand-written loop.
#[test]
fn equal_subtrees_are_computed_once_per_point() {
    let patch = Grid::new([5, 4, 3], [1.0; 3], [0.0; 3])
        .unwrap()
        .whole_domain(1);
    let mut a = cells("a", &patch);
    let mut b = cells("b", &patch);
    let layout = a.layout().clone();
    for index in layout.allocated() {
        let [x, y, z] = layout.coordinate(index);
        let i = layout.linear_index(index);
        a.values_mut().unwrap()[i] = 0.3 * x - 0.2 * y + 0.1 * z;
        b.values_mut().unwrap()[i] = 1.0 + x * y - z;
    }
    // Built twice: distinct `Arc`s with equal contents.
    let written_out = || exp(field(&a) * 2.0) + field(&b);
    let expr = written_out() * field(&a) - written_out() * field(&b);
    let kernel = Kernel::compile(expr.node(), &patch, true).unwrap();
    let exps = kernel
        .instructions
        .iter()
        .filter(|i| matches!(i, Instruction::Unary { .. }))
        .count();
    assert_eq!(exps, 1, "one exp per point:\n{kernel}");

    // A different argument is a different subexpression.
    let other = exp(field(&a) * 2.0) * field(&a) - exp(field(&a) * 3.0) * field(&b);
    let kernel = Kernel::compile(other.node(), &patch, true).unwrap();
    let exps = kernel
        .instructions
        .iter()
        .filter(|i| matches!(i, Instruction::Unary { .. }))
        .count();
    assert_eq!(exps, 2, "exp(2a) and exp(3a) both computed:\n{kernel}");

    let mut out = cells("out", &patch);
    out.assign(expr).unwrap();
    let (av, bv, ov) = (
        a.values().unwrap(),
        b.values().unwrap(),
        out.values().unwrap(),
    );
    for index in layout.interior() {
        let i = layout.linear_index(index);
        let shared = vmath::exp(av[i] * 2.0) + bv[i];
        let expected = shared * av[i] - shared * bv[i];
        assert!(
            (ov[i] - expected).abs() <= 1e-14 * expected.abs().max(1.0),
            "at {index:?}: {} vs {expected}",
            ov[i]
        );
    }
}
