//! Generated kernels against the row interpreter (the reference): every
//! operator of the language, written as C and compiled by the system
//! compiler, gives the interpreter's bits (compilation without
//! contraction; `exp` is the shared `vmath::exp`). Every kernel these
//! tests generate is also written as CUDA C and compiled to PTX with NVRTC
//! (skipped with a message where libnvrtc is absent, unless
//! `WATERSHED_REQUIRE_NVRTC=1`, which the test command sets).
//!
//! Also: random expression trees (proptest), thread independence of
//! compiled kernels, that the C back end really ran (not a fallback), that
//! gcc vectorises the diffusion loop, and that a compiler error shows the
//! source and the log.

use crate::common;

use common::*;
use proptest::prelude::*;
use std::sync::Arc;
use watershed_fields::{
    CellCentre, GhostWidth, Grid, IndexBox, Location, Patch, SpatialField, XFace, YFace,
};
use watershed_operators::codegen::{self, Backend, Form};
use watershed_operators::ir::Node;
use watershed_operators::kernel::{Instruction, Kernel, UniformValue};
use watershed_operators::*;

fn c_available() -> bool {
    codegen::c_compiler().is_ok()
}

/// Compiles `root`'s kernel (as assigned into a `kind` target) to PTX with
/// NVRTC, failing with the source and log if NVRTC refuses it.
fn check_cuda(root: &Arc<Node>, patch: &Patch) {
    if let Some(problem) = codegen::nvrtc::nvrtc_problem() {
        assert!(
            std::env::var("WATERSHED_REQUIRE_NVRTC").map_or(true, |v| v != "1"),
            "NVRTC is required here but absent: {problem}"
        );
        eprintln!("skipped: CUDA compile check ({problem})");
        return;
    }
    for into_target in [true, false] {
        let kernel = lower_cached(root, patch, into_target).unwrap();
        match codegen::nvrtc::compile_cuda(&kernel.kernel) {
            Ok(Some(cuda)) => {
                assert!(
                    cuda.ptx.contains(&cuda.name),
                    "the PTX lacks the entry point {}",
                    cuda.name
                );
                // NVRTC's view of the by-value argument struct is the one
                // the launcher packs.
                let declared = ptx_parameter_bytes(&cuda.ptx, &format!("{}_param_0", cuda.name));
                assert_eq!(
                    declared,
                    Some(cuda.arguments.struct_bytes()),
                    "argument struct of {}:\n{}",
                    cuda.name,
                    cuda.ptx
                );
            }
            Ok(None) => {}
            Err(e) => panic!("{e}"),
        }
    }
}

/// The size NVRTC gave the PTX parameter `name`
/// (`.param .align 8 .b8 NAME[BYTES]`).
fn ptx_parameter_bytes(ptx: &str, name: &str) -> Option<usize> {
    let start = ptx.find(&format!("{name}["))? + name.len() + 1;
    let end = start + ptx[start..].find(']')?;
    ptx[start..end].parse().ok()
}

/// Assigns `make()` into two targets, once interpreted and once compiled,
/// over `region`, and asserts bitwise equality of every point (ghosts too).
fn same_bits<'a, L: Location>(
    patch: &Patch,
    region: Region,
    parallelism: Parallelism,
    make: impl Fn() -> Expr<'a, L>,
) {
    if !c_available() {
        eprintln!("skipped: no C compiler");
        return;
    }
    let expr = make();
    let native = codegen::lower_for(
        expr.node(),
        patch,
        true,
        Backend::C,
        codegen::FiniteCheck::Unchecked,
    )
    .unwrap();
    assert!(
        native.native.is_some(),
        "the C back end fell back to the interpreter for {}",
        expr.node()
    );
    check_cuda(expr.node(), patch);
    let mut results = Vec::new();
    for backend in [Backend::Interpreter, Backend::C] {
        let mut target = sentinel_target::<L>("target", patch);
        target
            .assign_with(
                make(),
                AssignOptions {
                    region,
                    parallelism,
                    backend,
                    ..Default::default()
                },
            )
            .unwrap();
        results.push(target.values().unwrap().to_vec());
    }
    for (i, (a, b)) in results[0].iter().zip(&results[1]).enumerate() {
        assert!(
            a.to_bits() == b.to_bits(),
            "point {i}: interpreter {a:e}, C {b:e} for {}",
            expr.node()
        );
    }
}

fn patch_3d(cells: [usize; 3], ghosts: usize) -> Patch {
    Grid::new(cells, [1.0, 0.8, 1.3], [0.1, -0.2, 0.3])
        .unwrap()
        .whole_domain(ghosts)
}

fn random_cells(name: &str, patch: &Patch, rng: &mut Xorshift) -> SpatialField<CellCentre> {
    random_field(name, patch, rng, |r| r.uniform(-2.0, 2.0))
}

#[test]
fn stencils_products_and_functions_match_the_interpreter() {
    let patch = patch_3d([13, 7, 5], 2);
    let mut rng = Xorshift::new(11);
    let phi = random_cells("phi", &patch, &mut rng);
    let gamma = random_field("gamma", &patch, &mut rng, |r| r.uniform(0.1, 1.0));
    let src = random_cells("src", &patch, &mut rng);
    for parallelism in [Parallelism::Serial, Parallelism::Threads(2)] {
        same_bits(&patch, Region::Interior, parallelism, || {
            -div(interp(&gamma) * grad(&phi)) + &src
        });
        same_bits(&patch, Region::Interior, parallelism, || laplacian(&phi));
        same_bits(&patch, Region::Interior, parallelism, || {
            exp(&phi) * 0.5 + sqrt(&gamma) - log(&gamma) * sin(&phi) + cos(&src) / tanh(&gamma)
        });
        same_bits(&patch, Region::Interior, parallelism, || {
            pow(&gamma, &phi) + min(&phi, &src) - max(&phi, 0.25) + abs(&src)
        });
        same_bits(&patch, Region::InteriorAndGhosts(1), parallelism, || {
            3.0 * field(&phi) - 2.0 * field(&src) + 0.5
        });
    }
}

/// A value for the vector-math test: mostly spread over many binades and
/// both signs, sometimes a special value (zeros, infinities, NaN,
/// subnormals, integers, huge numbers, the sin/cos limit).
fn wide_value(rng: &mut Xorshift) -> f64 {
    const SPECIAL: [f64; 14] = [
        0.0,
        -0.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        5e-324,
        -2.5e-310,
        1.0,
        -1.0,
        3.0,
        -2.0,
        1e300,
        2.1e8,
        -2.1e8,
    ];
    if rng.int(0, 9) == 0 {
        return SPECIAL[rng.int(0, SPECIAL.len() - 1)];
    }
    let sign = if rng.int(0, 1) == 0 { 1.0 } else { -1.0 };
    sign * rng.uniform(-30.0, 30.0).exp2() * rng.uniform(1.0, 2.0)
}

#[test]
fn vector_math_gives_the_interpreters_bits_over_wide_ranges_and_special_values() {
    // Every vectorisable function (`vmath`) is written twice, in Rust and
    // as C/CUDA source: the two must agree to the bit, everywhere.
    let patch = patch_3d([37, 9, 4], 1);
    let mut rng = Xorshift::new(21);
    let a = random_field::<CellCentre>("a", &patch, &mut rng, wide_value);
    let b = random_field::<CellCentre>("b", &patch, &mut rng, wide_value);
    let small = random_field::<CellCentre>("small", &patch, &mut rng, |r| r.uniform(-4.0, 4.0));
    same_bits(&patch, Region::Interior, Parallelism::Serial, || exp(&a));
    same_bits(&patch, Region::Interior, Parallelism::Serial, || {
        exp(&small)
    });
    same_bits(&patch, Region::Interior, Parallelism::Serial, || log(&a));
    same_bits(&patch, Region::Interior, Parallelism::Serial, || sin(&a));
    same_bits(&patch, Region::Interior, Parallelism::Serial, || cos(&a));
    same_bits(&patch, Region::Interior, Parallelism::Serial, || tanh(&a));
    same_bits(&patch, Region::Interior, Parallelism::Serial, || {
        sin(&small) * cos(&small) + tanh(&small)
    });
    same_bits(&patch, Region::Interior, Parallelism::Serial, || {
        pow(&a, &b)
    });
    same_bits(&patch, Region::Interior, Parallelism::Serial, || {
        pow(&a, &small)
    });
    same_bits(&patch, Region::Interior, Parallelism::Serial, || {
        pow(abs(&small), 0.7) + log(abs(&small))
    });
    same_bits(&patch, Region::Interior, Parallelism::Serial, || {
        pow(&a, 2.0)
    });
}

#[test]
fn a_square_is_one_correctly_rounded_product() {
    // pow(x, 2) lowers to x * x on every back end: exact to the bit
    // against the correctly rounded square, zeros, infinities and NaN
    // included.
    let patch = patch_3d([23, 4, 3], 1);
    let mut rng = Xorshift::new(23);
    let a = random_field::<CellCentre>("a", &patch, &mut rng, wide_value);
    let layout = a.layout().clone();
    for backend in [Backend::Interpreter, Backend::C] {
        let mut target = sentinel_target::<CellCentre>("target", &patch);
        target
            .assign_with(
                pow(&a, 2.0),
                AssignOptions {
                    backend,
                    ..Default::default()
                },
            )
            .unwrap();
        let (t, av) = (target.values().unwrap(), a.values().unwrap());
        for i in layout.interior().iter() {
            let at = layout.linear_index(i);
            let x = av[at];
            assert!(
                t[at].to_bits() == (x * x).to_bits() || (t[at].is_nan() && x.is_nan()),
                "{backend:?}: pow({x:e}, 2) = {:e}, x * x = {:e}",
                t[at],
                x * x
            );
        }
    }
}

#[test]
fn the_interpreters_math_loops_give_the_scalar_functions_bits() {
    // The interpreter runs the vector math in loops built for AVX2 where
    // the CPU has it; the scalar functions (this test's baseline build)
    // are the reference, to the bit.
    let patch = patch_3d([29, 5, 3], 1);
    let mut rng = Xorshift::new(22);
    let a = random_field::<CellCentre>("a", &patch, &mut rng, wide_value);
    let b = random_field::<CellCentre>("b", &patch, &mut rng, wide_value);
    let layout = a.layout().clone();
    type Case<'e> = (Expr<'e, CellCentre>, fn(f64, f64) -> f64);
    let cases: Vec<Case> = vec![
        (exp(&a), |x, _| vmath::exp(x)),
        (log(&a), |x, _| vmath::log(x)),
        (sin(&a), |x, _| vmath::sin(x)),
        (cos(&a), |x, _| vmath::cos(x)),
        (tanh(&a), |x, _| vmath::tanh(x)),
        (pow(&a, &b), vmath::pow),
    ];
    for (expr, reference) in cases {
        let name = expr.node().to_string();
        let mut target = sentinel_target::<CellCentre>("target", &patch);
        target
            .assign_with(
                expr,
                AssignOptions {
                    backend: Backend::Interpreter,
                    ..Default::default()
                },
            )
            .unwrap();
        let (t, av, bv) = (
            target.values().unwrap(),
            a.values().unwrap(),
            b.values().unwrap(),
        );
        for i in layout.interior().iter() {
            let at = layout.linear_index(i);
            let expected = reference(av[at], bv[at]);
            assert!(
                t[at].to_bits() == expected.to_bits(),
                "{name} at {i:?}: interpreter {:e}, scalar {expected:e}",
                t[at]
            );
        }
    }
}

#[test]
fn face_operators_limiters_and_upwinding_match_the_interpreter() {
    let patch = patch_3d([11, 6, 4], 2);
    let mut rng = Xorshift::new(12);
    let phi = random_cells("phi", &patch, &mut rng);
    let u = random_field::<XFace>("u", &patch, &mut rng, |r| r.uniform(-1.0, 1.0));
    let v = random_field::<YFace>("v", &patch, &mut rng, |r| r.uniform(-1.0, 1.0));
    for limiter in [Limiter::Minmod, Limiter::VanLeer, Limiter::Superbee] {
        same_bits(&patch, Region::Interior, Parallelism::Serial, || {
            limited::<XFace>(limiter, &u, &phi) * &u
        });
        same_bits(&patch, Region::Interior, Parallelism::Serial, || {
            limited::<YFace>(limiter, &v, &phi)
        });
    }
    same_bits(&patch, Region::Interior, Parallelism::Serial, || {
        upwind::<XFace>(&u, &phi) * &u
    });
    // Advective divergence of upwinded fluxes (registers read at x shifts).
    same_bits(&patch, Region::Interior, Parallelism::Serial, || {
        let flux = FaceVector {
            x: Some(upwind::<XFace>(&u, &phi) * &u),
            y: Some(upwind::<YFace>(&v, &phi) * &v),
            z: None,
        };
        -div(flux)
    });
}

#[test]
fn conditions_masks_coordinates_and_parameters_match_the_interpreter() {
    let patch = patch_3d([9, 8, 3], 1);
    let mut rng = Xorshift::new(13);
    let phi = random_field::<CellCentre>("phi", &patch, &mut rng, |r| {
        [-1.0, -0.5, 0.0, 0.5, 1.0][r.int(0, 4)]
    });
    let inflow = Mask::<CellCentre>::boundary(Side::MINUS_X);
    let top = Mask::<CellCentre>::boundary(Side::PLUS_Y);
    let block = Mask::<CellCentre>::region(IndexBox::new([2, 1, 0], [5, 4, 2]));
    same_bits(
        &patch,
        Region::InteriorAndGhosts(1),
        Parallelism::Serial,
        || {
            cond(on(&inflow), 1.0)
                .cond(
                    on(&top) | field(&phi).gt(0.25),
                    coordinate::<CellCentre>(0) * 2.0,
                )
                .cond(
                    on(&block) & !field(&phi).equals(0.0),
                    coordinate::<CellCentre>(1),
                )
                .cond(field(&phi).le(-0.5), coordinate::<CellCentre>(2) + &phi)
                .otherwise(-1.0 * field(&phi))
        },
    );
    // Parameters are kernel arguments for C; without folding, both back
    // ends run one generic kernel when the tree has no parameters, so
    // compare a parameterised kernel with its value written as a constant.
    let dt = Parameter::new("dt", 0.125);
    if c_available() {
        let mut compiled = sentinel_target::<CellCentre>("a", &patch);
        let mut constant = sentinel_target::<CellCentre>("b", &patch);
        for step in 0..3 {
            let value = 0.125 * (step + 1) as f64;
            dt.set(value);
            let options = |backend| AssignOptions {
                backend,
                ..Default::default()
            };
            compiled
                .assign_with(dt.expr() * &phi + exp(&phi), options(Backend::C))
                .unwrap();
            constant
                .assign_with(
                    value * field(&phi) + exp(&phi),
                    options(Backend::Interpreter),
                )
                .unwrap();
            let a = compiled.values().unwrap();
            let b = constant.values().unwrap();
            assert!(a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()));
        }
    }
}

#[test]
fn restriction_and_prolongation_match_the_interpreter() {
    if !c_available() {
        return;
    }
    let fine_grid = Grid::from_spacing([8, 6, 4], [0.1, 0.07, 0.13], [0.0; 3]).unwrap();
    let coarse_grid = Grid::from_spacing([4, 3, 2], [0.2, 0.14, 0.26], [0.0; 3]).unwrap();
    let (fine, coarse) = (fine_grid.whole_domain(1), coarse_grid.whole_domain(1));
    let mut rng = Xorshift::new(14);
    let f = random_cells("f", &fine, &mut rng);
    let c = random_cells("c", &coarse, &mut rng);
    same_bits(&coarse, Region::Interior, Parallelism::Serial, || {
        restrict(&f, [2, 2, 2])
    });
    same_bits(&fine, Region::Interior, Parallelism::Serial, || {
        prolongate(&c, [2, 2, 2]) + &f
    });
    // A box from an odd x with a lone last point: the split loop's leading
    // point, its pairs (indices written in the pair index) and its
    // trailing point.
    let odd = IndexBox::new([1, 0, 0], [6, 6, 4]);
    same_bits(&fine, Region::Box(odd), Parallelism::Serial, || {
        prolongate(&c, [2, 2, 2]) + &f
    });
    // Read at an x offset, the prolongation keeps its generic indices.
    same_bits(&fine, Region::Box(odd), Parallelism::Serial, || {
        watershed_operators::shift(prolongate(&c, [2, 2, 2]), [1, 0, 0]) + &f
    });
}

#[test]
fn in_place_updates_and_reductions_use_compiled_kernels() {
    if !c_available() {
        return;
    }
    let patch = patch_3d([40, 30, 20], 1);
    let mut rng = Xorshift::new(15);
    let rhs = random_cells("rhs", &patch, &mut rng);
    let mut runs = Vec::new();
    for backend in [Backend::Interpreter, Backend::C] {
        let mut u = random_cells("u", &patch, &mut Xorshift::new(16));
        let options = AssignOptions {
            backend,
            check_finite: true,
            parallelism: Parallelism::Threads(2),
            ..Default::default()
        };
        update_with(&mut u, options, |u| 0.75 * u + 0.25 * field(&rhs)).unwrap();
        runs.push(u.values().unwrap().to_vec());
    }
    assert!(
        runs[0]
            .iter()
            .zip(&runs[1])
            .all(|(a, b)| a.to_bits() == b.to_bits())
    );
    // Reductions run the process default back end (C here unless
    // WATERSHED_BACKEND says otherwise) and equal a reference loop.
    let layout = rhs.layout();
    let mut reference = 0.0;
    for index in layout.interior() {
        let v = at(&rhs, index);
        reference += v * v;
    }
    let got = interior_norm_l2(field(&rhs)).unwrap();
    assert!((got - reference.sqrt()).abs() <= 1e-12 * reference.sqrt());
}

#[test]
fn a_compiler_error_shows_the_source_and_the_log() {
    if !c_available() {
        return;
    }
    let source = "void broken(void) { this is not C; }\n";
    let err = codegen::compile::library_for("ws_test_broken_kernel", source).unwrap_err();
    match &err {
        OperatorError::Compile(failure) => {
            assert_eq!(failure.dialect, "C");
            assert!(failure.source_text.contains("this is not C"));
            assert!(failure.log.contains("error"), "log: {}", failure.log);
        }
        other => panic!("expected OperatorError::Compile, got {other:?}"),
    }
    let message = err.to_string();
    assert!(message.contains("WATERSHED_BACKEND=interpreter") && message.contains("this is not C"));
}

#[test]
fn gcc_vectorises_the_diffusion_kernel_and_every_math_function() {
    let Ok(compiler) = codegen::c_compiler() else {
        return;
    };
    if compiler.family != "gcc" {
        eprintln!(
            "skipped: the vectorisation report needs gcc (found {})",
            compiler.version
        );
        return;
    }
    let patch = patch_3d([16, 16, 16], 1);
    let phi =
        SpatialField::<CellCentre>::new("phi", &patch, watershed_fields::Device::Cpu).unwrap();
    let gamma =
        SpatialField::<CellCentre>::new("gamma", &patch, watershed_fields::Device::Cpu).unwrap();
    for expr in [
        -div(interp(&gamma) * grad(&phi)),
        exp(&phi) * 0.5 + &gamma,
        log(&phi),
        sin(&phi) + cos(&gamma),
        tanh(&phi),
        pow(&phi, &gamma),
        // 30 exponentials in one loop, as the hoisted coupled sources of
        // the ExprLib test: gcc 12 stops inlining `ws_exp` here unless it
        // is `always_inline`, and the call left in the loop blocks it.
        (1..30).fold(exp(&phi), |sum, i| {
            sum + exp(field(&phi) * (1.0 + 0.01 * f64::from(i)))
        }),
    ] {
        let kernel = lower_cached(expr.node(), &patch, true).unwrap();
        // Both forms: with the finiteness test (watched assignments) and
        // without it (the others).
        for check in [
            codegen::FiniteCheck::Checked,
            codegen::FiniteCheck::Unchecked,
        ] {
            let (_, source) = codegen::compile::translation_unit(&kernel.kernel, check).unwrap();
            assert_eq!(
                source.contains("bad |= ws_to_bits(v - v);"),
                check == codegen::FiniteCheck::Checked,
                "{check:?}:\n{source}"
            );
            let report = codegen::compile::vectorisation_report(&source).unwrap();
            assert!(
                report.contains("loop vectorized"),
                "gcc did not vectorise {} ({check:?}):\n{report}\n{source}",
                expr.node()
            );
        }
    }
}

#[test]
fn the_emitter_refuses_what_it_does_not_support() {
    let patch = patch_3d([5, 4, 3], 1);
    let phi =
        SpatialField::<CellCentre>::new("phi", &patch, watershed_fields::Device::Cpu).unwrap();
    let listed = Mask::<CellCentre>::points([[0, 0, 0], [1, 2, 0]]);
    let expr = cond(on(&listed), 1.0).otherwise(&phi);
    let kernel = lower_cached(expr.node(), &patch, true).unwrap();
    let refused =
        codegen::emit::c_function(&kernel.kernel, "k", codegen::FiniteCheck::Checked).unwrap_err();
    assert!(refused.0.contains("explicit list of points"), "{refused:?}");
    // ... and the assignment still runs, on the interpreter.
    let runnable = codegen::lower_for(
        expr.node(),
        &patch,
        true,
        Backend::C,
        codegen::FiniteCheck::Checked,
    )
    .unwrap();
    assert!(runnable.native.is_none());
}

/// Random trees of pointwise operations and stencils over three fields.
fn random_tree<'a>(
    rng: &mut Xorshift,
    depth: usize,
    fields: &[&'a SpatialField<CellCentre>; 3],
) -> Expr<'a, CellCentre> {
    if depth == 0 || rng.chance(0.25) {
        return match rng.int(0, 3) {
            0 => Expr::constant(rng.uniform(-2.0, 2.0)),
            _ => field(fields[rng.int(0, 2)]),
        };
    }
    let a = random_tree(rng, depth - 1, fields);
    match rng.int(0, 13) {
        0 => a + random_tree(rng, depth - 1, fields),
        1 => a - random_tree(rng, depth - 1, fields),
        2 => a * random_tree(rng, depth - 1, fields),
        3 => a / random_tree(rng, depth - 1, fields),
        4 => exp(a * 0.1),
        5 => laplacian(a),
        6 => div(interp(a) * grad(fields[rng.int(0, 2)])),
        7 => min(a, random_tree(rng, depth - 1, fields)),
        8 => cond(a.clone().gt(0.0), a).otherwise(random_tree(rng, depth - 1, fields)),
        9 => watershed_operators::shift(a, [rng.int(0, 2) as isize - 1, 0, 0]),
        10 => abs(a) + 1.0,
        // Operands shaped `w0 s0 + w1 s1` and `w (s0 + s1)`, every
        // comparison and logical operation, and selections of them.
        11 => max(
            a * 0.5 + random_tree(rng, depth - 1, fields) * 0.5,
            random_tree(rng, depth - 1, fields),
        ),
        12 => {
            let b = random_tree(rng, depth - 1, fields);
            let c = field(fields[rng.int(0, 2)]);
            cond(
                (a.clone().le(0.5) & !b.clone().equals(c.clone()))
                    | (a.clone() - b.clone()).ge(c.clone() * 2.0 + 1.0),
                b.clone() * 0.25 + a.clone() * 0.75,
            )
            .cond(a.clone().lt(b.clone()) | c.not_equals(0.0), b - a.clone())
            .otherwise(a * 3.0)
        }
        _ => -a,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn random_expressions_match_the_interpreter(seed in any::<u64>(), two_threads in any::<bool>()) {
        let mut rng = Xorshift::new(seed | 1);
        let patch = Patch::new(
            &Grid::new([9, 7, 5], [1.0, 1.1, 0.9], [0.0; 3]).unwrap(),
            [0; 3],
            [9, 7, 5],
            GhostWidth::uniform(4),
        ).unwrap();
        let a = random_cells("a", &patch, &mut rng);
        let b = random_cells("b", &patch, &mut rng);
        let c = random_field("c", &patch, &mut rng, |r| r.uniform(0.5, 1.5));
        let fields = [&a, &b, &c];
        let tree_seed = rng.next_u64();
        let make = || random_tree(&mut Xorshift::new(tree_seed), 4, &fields);
        let parallelism = if two_threads { Parallelism::Threads(2) } else { Parallelism::Serial };
        same_bits(&patch, Region::Interior, parallelism, make);
    }
}

/// The disk cache stays under its limit: the least recently written or used
/// entries (a source and its library count as one) go first, down to three
/// quarters of the limit; the entry just written and files that are not
/// cache entries stay.
#[test]
fn eviction_removes_the_oldest_entries_down_to_three_quarters_of_the_limit() {
    use std::time::{Duration, SystemTime};
    let dir = std::env::temp_dir().join(format!("ws_evict_test_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let start = SystemTime::now() - Duration::from_secs(1000);
    // Ten entries of 100 + 300 bytes, entry k written at start + k seconds.
    for k in 0..10 {
        for (ext, bytes) in [("c", 100), ("so", 300)] {
            let path = dir.join(format!("ws_{k:02}.{ext}"));
            std::fs::write(&path, vec![b'x'; bytes]).unwrap();
            let file = std::fs::File::options().append(true).open(&path).unwrap();
            file.set_modified(start + Duration::from_secs(k)).unwrap();
        }
    }
    std::fs::write(dir.join("README"), vec![b'x'; 5000]).unwrap();
    // Under the limit: nothing goes.
    assert_eq!(codegen::cache_bound::evict(&dir, 4000, "ws_00").unwrap(), 0);
    // Limit 2000 bytes: down to 1500, i.e. three entries kept (1200 bytes);
    // ws_00 is the oldest but is the one being kept.
    assert_eq!(codegen::cache_bound::evict(&dir, 2000, "ws_00").unwrap(), 7);
    let mut left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        [
            "README", "ws_00.c", "ws_00.so", "ws_08.c", "ws_08.so", "ws_09.c", "ws_09.so"
        ]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A selection whose condition reads only parameters (a stage weight
/// `a != 0`) is decided once per call: the C function has one loop nest per
/// outcome, and the nest for `a == 0` does not read the field only the
/// other branch needs. Values equal the interpreter's bits either way, a
/// NaN in the skipped field does not leak into the result, and the
/// generated kernel's own finiteness check reports the first bad point as
/// the interpreter's scan does.
#[test]
fn a_uniform_condition_is_decided_once_per_call() {
    if !c_available() {
        eprintln!("skipped: no C compiler");
        return;
    }
    let patch = patch_3d([9, 6, 5], 1);
    let mut rng = Xorshift::new(17);
    let mut start = random_cells("start", &patch, &mut rng);
    let phi = random_cells("phi", &patch, &mut rng);
    let a = Parameter::new("a", 0.0);
    let make = || {
        cond(a.expr::<CellCentre>().not_equals(0.0), a.expr() * &start).otherwise(0.0)
            + field(&phi) * 0.5
    };
    let source = codegen::generated_source(make().node(), &patch, vmath::Dialect::C).unwrap();
    let body = &source[source.find("long long kernel(").expect("the function")..];
    assert!(body.contains("switch (c0 << 0)"), "{body}");
    let (never, taken) = body.split_at(body.find("case 1:").expect("two versions"));
    let reads = |text: &str| {
        let mut names: Vec<&str> = text
            .match_indices("_0_0[x")
            .map(|(i, _)| &text[i - 2..i])
            .collect();
        names.sort_unstable();
        names.dedup();
        names.len()
    };
    assert_eq!(reads(never), 1, "a == 0 reads phi only:\n{never}");
    assert_eq!(reads(taken), 2, "a != 0 reads start and phi:\n{taken}");

    for value in [0.0, 1.5] {
        a.set(value);
        same_bits(&patch, Region::Interior, Parallelism::Serial, make);
    }
    // A NaN in `start`: harmless while a == 0, reported once a != 0.
    let layout = start.layout().clone();
    let bad = [3, 2, 1];
    start.values_mut().unwrap()[layout.linear_index(bad)] = f64::NAN;
    let make = || {
        cond(a.expr::<CellCentre>().not_equals(0.0), a.expr() * &start).otherwise(0.0)
            + field(&phi) * 0.5
    };
    for backend in [Backend::Interpreter, Backend::C] {
        let options = AssignOptions {
            backend,
            check_finite: true,
            ..Default::default()
        };
        a.set(0.0);
        let mut out = sentinel_target::<CellCentre>("out", &patch);
        out.assign_with(make(), options).unwrap();
        a.set(2.0);
        match out.assign_with(make(), options) {
            Err(OperatorError::NotFinite { target, point, .. }) => {
                assert_eq!((target.as_str(), point), ("out", bad), "{backend:?}");
            }
            other => panic!("{backend:?}: expected NotFinite, got {other:?}"),
        }
    }
}

/// Terms that share a weight are summed first, as a pairwise tree, and
/// multiplied once (`LinearForm::groups`), in the interpreter, the C and
/// the CUDA source alike: `0.5 u + 0.3 (u_w + u_e + u_s + u_n)` gives the
/// bits of a hand-written loop in that order (which differ from the term
/// by term sum on these values), and the C source multiplies by the shared
/// weight once.
#[test]
fn equal_weights_are_summed_first_and_multiplied_once() {
    let patch = patch_3d([9, 6, 5], 1);
    let mut rng = Xorshift::new(29);
    let u = random_cells("u", &patch, &mut rng);
    let make = || {
        (watershed_operators::shift(&u, [-1, 0, 0])
            + watershed_operators::shift(&u, [1, 0, 0])
            + watershed_operators::shift(&u, [0, -1, 0])
            + watershed_operators::shift(&u, [0, 1, 0]))
            * 0.3
            + field(&u) * 0.5
    };
    let layout = u.layout().clone();
    let uv = u.values().unwrap();
    let value = |i: [isize; 3], d: [isize; 3]| {
        uv[layout.linear_index([i[0] + d[0], i[1] + d[1], i[2] + d[2]])]
    };
    let mut differs_from_term_by_term = 0;
    let mut backends = vec![Backend::Interpreter];
    if c_available() {
        backends.push(Backend::C);
        let source = codegen::generated_source(make().node(), &patch, vmath::Dialect::C).unwrap();
        let body = &source[source.find("long long kernel(").expect("the function")..];
        assert_eq!(body.matches("0.3 *").count(), 1, "{body}");
        assert!(body.contains("0.3 * (("), "{body}");
        let cuda = codegen::generated_source(make().node(), &patch, vmath::Dialect::Cuda).unwrap();
        assert_eq!(cuda.matches("0.3 *").count(), 1, "{cuda}");
    }
    for backend in backends {
        let mut target = sentinel_target::<CellCentre>("target", &patch);
        target
            .assign_with(
                make(),
                AssignOptions {
                    backend,
                    ..Default::default()
                },
            )
            .unwrap();
        let t = target.values().unwrap();
        for i in layout.interior().iter() {
            let (w, e, s, n, c) = (
                value(i, [-1, 0, 0]),
                value(i, [1, 0, 0]),
                value(i, [0, -1, 0]),
                value(i, [0, 1, 0]),
                value(i, [0, 0, 0]),
            );
            let expected = 0.3 * ((w + e) + (s + n)) + 0.5 * c;
            let term_by_term = 0.3 * w + 0.3 * e + 0.3 * s + 0.3 * n + 0.5 * c;
            differs_from_term_by_term += usize::from(expected.to_bits() != term_by_term.to_bits());
            assert_eq!(
                t[layout.linear_index(i)].to_bits(),
                expected.to_bits(),
                "{backend:?} at {i:?}"
            );
        }
    }
    assert!(
        differs_from_term_by_term > 0,
        "the values do not tell the orders apart"
    );
    check_cuda(make().node(), &patch);
}

/// A sum of terms without a constant is the sum as written: no `0.0 +` in
/// the generated source (an addition per point), and a sum of negative
/// zeros stays `-0.0` in every back end (`0.0 + (-0.0)` would be `+0.0`),
/// with distinct weights (one group per term) and with a shared weight.
#[test]
fn a_sum_without_a_constant_adds_no_zero() {
    let patch = patch_3d([7, 4, 3], 1);
    let mut rng = Xorshift::new(31);
    let a: SpatialField<CellCentre> = random_field("a", &patch, &mut rng, |_| -0.0);
    let b: SpatialField<CellCentre> = random_field("b", &patch, &mut rng, |_| -0.0);
    let distinct = || field(&a) * 2.0 + field(&b) * 3.0;
    let shared =
        || (field(&a) + field(&b)) * 0.5 + watershed_operators::shift(&a, [1, 0, 0]) * 0.25;
    let mut backends = vec![Backend::Interpreter];
    if c_available() {
        backends.push(Backend::C);
        for dialect in [vmath::Dialect::C, vmath::Dialect::Cuda] {
            for node in [distinct().node().clone(), shared().node().clone()] {
                let source = codegen::generated_source(&node, &patch, dialect).unwrap();
                assert!(!source.contains("0.0 + "), "{source}");
            }
        }
    }
    for backend in backends {
        for (name, expr) in [("distinct", distinct()), ("shared", shared())] {
            let mut target = sentinel_target::<CellCentre>("target", &patch);
            target
                .assign_with(
                    expr,
                    AssignOptions {
                        backend,
                        ..Default::default()
                    },
                )
                .unwrap();
            let t = target.values().unwrap();
            for i in target.layout().interior().iter() {
                let v = t[target.layout().linear_index(i)];
                assert_eq!(
                    v.to_bits(),
                    (-0.0f64).to_bits(),
                    "{backend:?} {name} at {i:?}: {v}"
                );
            }
        }
    }
    check_cuda(distinct().node(), &patch);
    check_cuda(shared().node(), &patch);
}

/// A box one row thick in every plane (a ghost layer normal to y) runs the
/// planes of many calls' worth in one call of a compiled kernel: every
/// point equals a hand-written loop for both back ends and thread counts,
/// nothing outside the box is written, and the first value that is not
/// finite is reported at its own plane, not at the first plane of the call.
#[test]
fn a_layer_one_row_thick_runs_many_planes_per_call() {
    if !c_available() {
        return;
    }
    let patch = patch_3d([9, 6, 40], 1);
    let mut rng = Xorshift::new(21);
    let mut phi = random_cells("phi", &patch, &mut rng);
    let layout = phi.layout().clone();
    // The ghost row j = -1 reads the interior row j = 5 (a periodic image).
    let region = IndexBox::new([-1, -1, 0], [10, 0, 40]);
    let value = |phi: &SpatialField<CellCentre>, [i, j, k]: [isize; 3]| {
        2.0 * phi.values().unwrap()[layout.linear_index([i, j + 6, k])] - 1.0
    };
    for planted in [None, Some([3isize, 5, 27])] {
        if let Some(point) = planted {
            phi.values_mut().unwrap()[layout.linear_index(point)] = f64::NAN;
        }
        for backend in [Backend::Interpreter, Backend::C] {
            for parallelism in [Parallelism::Serial, Parallelism::Threads(2)] {
                let mut target =
                    SpatialField::<CellCentre>::new("t", &patch, watershed_fields::Device::Cpu)
                        .unwrap();
                target.fill(7.0).unwrap();
                let result = target.assign_with(
                    2.0 * watershed_operators::shift(&phi, [0, 6, 0]) - 1.0,
                    AssignOptions {
                        region: Region::Box(region),
                        backend,
                        parallelism,
                        check_finite: true,
                    },
                );
                let what = format!("{backend:?}, {parallelism:?}, NaN at {planted:?}");
                match (planted, result) {
                    (None, Ok(())) => {}
                    (Some(_), Err(OperatorError::NotFinite { target, point, .. })) => {
                        assert_eq!((target.as_str(), point), ("t", [3, -1, 27]), "{what}");
                    }
                    (_, other) => panic!("{what}: {other:?}"),
                }
                let values = target.values().unwrap();
                for index in layout.allocated() {
                    let got = values[layout.linear_index(index)];
                    let expected = if region.contains(index) {
                        value(&phi, index)
                    } else {
                        7.0
                    };
                    assert!(
                        got.to_bits() == expected.to_bits(),
                        "{what}: {index:?} holds {got}, expected {expected}"
                    );
                }
            }
        }
    }
}

/// The compiled kernel's finiteness test sees both infinities and NaNs of
/// either sign, and never flags a finite value, the largest magnitudes
/// included: the same verdicts as the interpreter's.
#[test]
fn compiled_kernels_flag_every_non_finite_value_and_no_finite_one() {
    if !c_available() {
        return;
    }
    let patch = patch_3d([11, 3, 2], 1);
    let point = [7isize, 1, 1];
    let cases = [
        (f64::INFINITY, false),
        (f64::NEG_INFINITY, false),
        (f64::NAN, false),
        (-f64::NAN, false),
        (f64::MAX, true),
        (-f64::MAX, true),
        (f64::MIN_POSITIVE / 4.0, true),
        (-0.0, true),
    ];
    for (planted, finite) in cases {
        let mut phi =
            SpatialField::<CellCentre>::new("phi", &patch, watershed_fields::Device::Cpu).unwrap();
        phi.fill(0.25).unwrap();
        let layout = phi.layout().clone();
        phi.values_mut().unwrap()[layout.linear_index(point)] = planted;
        for backend in [Backend::Interpreter, Backend::C] {
            let mut target =
                SpatialField::<CellCentre>::new("t", &patch, watershed_fields::Device::Cpu)
                    .unwrap();
            let result = target.assign_with(
                field(&phi) * 1.0,
                AssignOptions {
                    backend,
                    check_finite: true,
                    ..Default::default()
                },
            );
            match (finite, result) {
                (true, Ok(())) => {}
                (
                    false,
                    Err(OperatorError::NotFinite {
                        target, point: at, ..
                    }),
                ) => {
                    assert_eq!(
                        (target.as_str(), at),
                        ("t", point),
                        "{backend:?}, {planted}"
                    );
                }
                (_, other) => panic!("{backend:?}, {planted}: {other:?}"),
            }
        }
    }
}

/// Both CUDA forms of a kernel (with and without the finiteness check) are
/// compiled once and kept (`codegen::compiled`), so that a launch finds
/// them without generating the source again.
#[test]
fn both_cuda_forms_are_kept_for_the_kernel() {
    if let Some(problem) = codegen::nvrtc::nvrtc_problem() {
        eprintln!("skipped: CUDA forms ({problem})");
        return;
    }
    let patch = patch_3d([6, 5, 4], 1);
    let phi =
        SpatialField::<CellCentre>::new("phi", &patch, watershed_fields::Device::Cpu).unwrap();
    // A constant no other test uses: the lowering cache shares kernels of
    // equal structure, and this one must start with neither form.
    let expr = exp(&phi) * 0.372_915_604_2;
    let kernel = lower_cached(expr.node(), &patch, true).unwrap();
    let kept = |checked| codegen::is_compiled(&kernel.kernel, Form::Cuda { checked });
    assert!(!kept(false));
    assert!(!kept(true));
    let checked = codegen::nvrtc::cuda_checked_of(&kernel.kernel).unwrap();
    assert!(kept(true));
    assert!(!kept(false), "only the form asked for");
    let plain = codegen::nvrtc::cuda_of(&kernel.kernel).unwrap();
    assert_ne!(checked.name, plain.name);
    assert!(Arc::ptr_eq(
        &checked,
        &codegen::nvrtc::cuda_checked_of(&kernel.kernel).unwrap()
    ));
    assert!(Arc::ptr_eq(
        &plain,
        &codegen::nvrtc::cuda_of(&kernel.kernel).unwrap()
    ));
}

/// The fourth-order operators and a conservative cross flux built from
/// `relabel` and shifts (as the momentum's divergence form builds it) give
/// the interpreter's bits in C and compile with NVRTC.
#[test]
fn fourth_order_operators_and_relabelled_fluxes_match_the_interpreter() {
    let patch = patch_3d([11, 7, 6], 3);
    let mut rng = Xorshift::new(46);
    let phi = random_cells("phi", &patch, &mut rng);
    let u = random_field::<XFace>("u", &patch, &mut rng, |r| r.uniform(-1.0, 1.0));
    let v = random_field::<YFace>("v", &patch, &mut rng, |r| r.uniform(-1.0, 1.0));
    same_bits(&patch, Region::Interior, Parallelism::Serial, || {
        divergence4::<XFace>(interpolate_to_face4::<XFace>(&phi) * gradient4::<XFace>(&phi))
            + laplacian4(&phi)
    });
    same_bits(&patch, Region::Interior, Parallelism::Serial, || {
        interpolate_to_face4::<YFace>(interpolate_to_cell4::<YFace>(&v)) + laplacian4(&v)
    });
    same_bits(&patch, Region::Interior, Parallelism::Serial, || {
        // u's y flux on the xy edges: (v averaged along x) (u averaged
        // along y), differenced along y back to the x faces.
        let v_x = relabel::<YFace, XFace>(&v);
        let carrier = 0.5 * (watershed_operators::shift(v_x.clone(), [-1, 0, 0]) + v_x);
        let u_y = 0.5 * (watershed_operators::shift(&u, [0, -1, 0]) + field(&u));
        let flux = carrier * u_y;
        (watershed_operators::shift(flux.clone(), [0, 1, 0]) - flux) * 7.0
    });
}

/// A run-time scalar scales a linear form as a number does: in
/// `phi + dt (0.3 (phi_w + phi_e) - 0.6 phi + 0.5 exp(phi))` the weights
/// become values formed once per call from `dt` (`1 - 0.6 dt`, `0.3 dt`,
/// `0.5 dt`), so each point costs the multiplies of the numeric form, not
/// an extra product and addition. The update is one linear instruction
/// after the `exp`; the generated C forms the weights before its loops and
/// multiplies by `dt` nowhere inside them. Every back end gives the same
/// bits for each `dt`, a new `dt` gives new weights (nothing is kept from
/// the call before), and the values are the formula's to rounding.
#[test]
fn a_run_time_scalar_becomes_weights_formed_once_per_call() {
    let patch = patch_3d([9, 6, 5], 1);
    let mut rng = Xorshift::new(41);
    let phi = random_cells("phi", &patch, &mut rng);
    let dt = Parameter::new("dt", 0.1);
    let make = || {
        field(&phi)
            + dt.expr()
                * ((watershed_operators::shift(&phi, [-1, 0, 0])
                    + watershed_operators::shift(&phi, [1, 0, 0]))
                    * 0.3
                    - field(&phi) * 0.6
                    + exp(&phi) * 0.5)
    };
    let kernel = Kernel::compile(make().node(), &patch, true).unwrap();
    let linear: Vec<&Instruction> = kernel
        .instructions
        .iter()
        .filter(|i| matches!(i, Instruction::Linear { .. }))
        .collect();
    assert_eq!(kernel.len(), 2, "exp, then the update:\n{kernel}");
    assert_eq!(linear.len(), 1, "{kernel}");
    let Instruction::Linear { form, products, .. } = linear[0] else {
        unreachable!()
    };
    assert!(products.is_empty(), "{kernel}");
    // phi once (its two terms merged), its two neighbours sharing one
    // weight, and the exp's row: every weight formed from dt.
    assert_eq!(form.terms.len(), 4, "{kernel}");
    assert!(
        form.terms.iter().all(|(_, w)| w.number().is_none()),
        "{kernel}"
    );
    assert_eq!(form.groups().len(), 3, "{kernel}");
    assert_eq!(
        kernel.uniforms.first(),
        Some(&UniformValue::Parameter(0)),
        "{kernel}"
    );
    if c_available() {
        let source = codegen::generated_source(make().node(), &patch, vmath::Dialect::C).unwrap();
        let body = &source[source.find("long long kernel(").expect("the function")..];
        let loops = &body[body.find("for (").expect("the loops")..];
        assert!(
            !loops.contains("p0"),
            "dt is read before the loops:\n{body}"
        );
        assert!(body.contains("const double uv0 = p0;"), "{body}");
        let cuda = codegen::generated_source(make().node(), &patch, vmath::Dialect::Cuda).unwrap();
        assert!(cuda.contains("const double uv0 = p0;"), "{cuda}");
    }
    let layout = phi.layout().clone();
    let values = phi.values().unwrap();
    let at = |i: [isize; 3], dx: isize| values[layout.linear_index([i[0] + dx, i[1], i[2]])];
    for step in [0.1, 0.3, 1e-3] {
        dt.set(step);
        same_bits(&patch, Region::Interior, Parallelism::Serial, make);
        let mut target = sentinel_target::<CellCentre>("target", &patch);
        target.assign(make()).unwrap();
        let t = target.values().unwrap();
        for i in layout.interior().iter() {
            let c = at(i, 0);
            let formula = c + step * (0.3 * (at(i, -1) + at(i, 1)) - 0.6 * c + 0.5 * c.exp());
            let got = t[layout.linear_index(i)];
            assert!(
                (got - formula).abs() <= 1e-14 * formula.abs().max(1.0),
                "dt = {step} at {i:?}: {got:e}, the formula {formula:e}"
            );
        }
    }
    check_cuda(make().node(), &patch);
}

/// A stage update `a start + b (now + dt rhs)` with a condition on `a`
/// (decided per call) and every weight formed from `a`, `b` and `dt`:
/// both back ends give the same bits, and the formula's values to
/// rounding, for `a = 0` and `a != 0`.
#[test]
fn stage_weights_and_a_uniform_condition_together() {
    let patch = patch_3d([9, 6, 5], 1);
    let mut rng = Xorshift::new(43);
    let start = random_cells("start", &patch, &mut rng);
    let now = random_cells("now", &patch, &mut rng);
    let (a, b, dt) = (
        Parameter::new("a", 0.0),
        Parameter::new("b", 1.0),
        Parameter::new("dt", 0.25),
    );
    let make = || {
        let update = field(&now)
            + dt.expr() * (field(&now) * -2.0 + watershed_operators::shift(&now, [0, 1, 0]));
        cond(
            a.expr::<CellCentre>().not_equals(0.0),
            a.expr() * &start + b.expr() * update.clone(),
        )
        .otherwise(b.expr() * update)
    };
    let layout = now.layout().clone();
    let (s, n) = (start.values().unwrap(), now.values().unwrap());
    for (av, bv) in [(0.0, 1.0), (0.75, 0.25), (1.0 / 3.0, 2.0 / 3.0)] {
        a.set(av);
        b.set(bv);
        same_bits(&patch, Region::Interior, Parallelism::Serial, make);
        let mut target = sentinel_target::<CellCentre>("target", &patch);
        target.assign(make()).unwrap();
        let t = target.values().unwrap();
        for i in layout.interior().iter() {
            let p = layout.linear_index(i);
            let north = n[layout.linear_index([i[0], i[1] + 1, i[2]])];
            let formula = av * s[p] + bv * (n[p] + 0.25 * (-2.0 * n[p] + north));
            assert!(
                (t[p] - formula).abs() <= 1e-14 * formula.abs().max(1.0),
                "a = {av} at {i:?}: {:e}, the formula {formula:e}",
                t[p]
            );
        }
    }
    check_cuda(make().node(), &patch);
}
