//! A wrong input is an error, never a wrong answer: ghost widths derived from
//! the IR (no silent shrinking), checked declarations, placeholders that were
//! never set, concurrent and re-entrant execution, thread counts.

use std::sync::Arc;
use watershed_exprgraph::{
    ExecutionMode, ExpressionGraph, Factory, GhostPolicy, GraphError, GraphOptions,
    LanguageExpression, NativeExpression, Tag,
};
use watershed_fields::{
    CellCentre, Device, FieldLayout, GhostWidth, Grid, LocationKind, Patch, SpatialField, XFace,
};
use watershed_operators::{
    Limiter, div, grad, gradient, interp, interpolate_to_face, laplacian, limited,
};

fn grid_2d() -> Grid {
    Grid::new([16, 16, 1], [1.0, 1.0, 1.0], [0.0; 3]).unwrap()
}

/// Values of a persistent cell field on its interior, x fastest.
fn interior_values(graph: &ExpressionGraph, tag: &Tag) -> Vec<f64> {
    graph
        .with_field::<CellCentre, _>(tag, |f| {
            let layout = f.layout().clone();
            let values = f.values().unwrap();
            layout
                .interior()
                .iter()
                .map(|i| values[layout.linear_index(i)])
                .collect()
        })
        .unwrap()
}

/// Sets a cell field, ghosts included, from `f(x, y, z)`.
fn set(graph: &ExpressionGraph, tag: &Tag, f: impl Fn([f64; 3]) -> f64) {
    graph
        .with_field_mut::<CellCentre, _>(tag, |field| {
            let layout = field.layout().clone();
            let values = field.values_mut().unwrap();
            for i in layout.allocated().iter() {
                values[layout.linear_index(i)] = f(layout.coordinate(i));
            }
        })
        .unwrap();
}

/// `div(interp(g) * grad(p))` through the graph on a 16x16x1 grid is the
/// Laplacian of p for g = 1: 4 for p = x^2 + y^2 (exact for quadratics).
#[test]
fn vector_calculus_through_the_graph_in_2d_matches_the_laplacian() {
    let (p, g, a, b) = (
        Tag::none("p"),
        Tag::none("g"),
        Tag::none("a"),
        Tag::none("b"),
    );
    let mut factory = Factory::new();
    factory
        .placeholder(p.clone(), LocationKind::CellCentre)
        .unwrap();
    factory
        .placeholder(g.clone(), LocationKind::CellCentre)
        .unwrap();
    let (p1, g1) = (p.clone(), g.clone());
    factory
        .register(LanguageExpression::new::<CellCentre>(a.clone(), move |s| {
            div(interp(s.field(&g1)) * grad(s.field(&p1)))
        }))
        .unwrap();
    let p2 = p.clone();
    factory
        .register(LanguageExpression::new::<CellCentre>(b.clone(), move |s| {
            laplacian(s.field(&p2))
        }))
        .unwrap();
    let patch = grid_2d().whole_domain(1);
    let graph = ExpressionGraph::build(
        &factory,
        &[a.clone(), b.clone()],
        &patch,
        &Default::default(),
    )
    .unwrap();
    set(&graph, &p, |[x, y, _]| x * x + y * y);
    set(&graph, &g, |_| 1.0);
    graph.execute(ExecutionMode::Serial).unwrap();
    for (tag, values) in [
        (&a, interior_values(&graph, &a)),
        (&b, interior_values(&graph, &b)),
    ] {
        for v in values {
            assert!((v - 4.0).abs() < 1e-9, "{tag}: {v}");
        }
    }
}

fn diffusion_factory(p: &Tag, rhs: &Tag) -> Factory {
    let mut factory = Factory::new();
    factory
        .placeholder(p.clone(), LocationKind::CellCentre)
        .unwrap();
    let p1 = p.clone();
    factory
        .register(LanguageExpression::new::<CellCentre>(
            rhs.clone(),
            move |s| laplacian(s.field(&p1)),
        ))
        .unwrap();
    factory
}

/// A stencil over a 0-ghost placeholder is refused at build, naming the tag,
/// the side, the width needed and available, and the reader.
#[test]
fn a_stencil_over_a_field_without_ghosts_is_refused_at_build() {
    let (p, rhs) = (Tag::none("temperature"), Tag::none("rhs"));
    let factory = diffusion_factory(&p, &rhs);
    let patch = grid_2d().whole_domain(0);
    let error = ExpressionGraph::build(
        &factory,
        std::slice::from_ref(&rhs),
        &patch,
        &Default::default(),
    )
    .unwrap_err();
    let message = error.to_string();
    let GraphError::MissingGhosts {
        tag,
        side,
        needed,
        available,
        reader,
        ..
    } = error
    else {
        panic!("expected MissingGhosts, got {error:?}");
    };
    assert_eq!(tag, p);
    assert_eq!(side, "-x");
    assert_eq!((needed, available), (1, 0));
    assert_eq!(reader, "rhs");
    for word in ["temperature", "-x", "rhs", "1 ghost"] {
        assert!(message.contains(word), "{message}");
    }
}

/// With `GhostPolicy::Grow` the graph widens its patch to what the
/// stencils ask for: 2 layers for a limited scheme, on active axes only.
#[test]
fn the_graph_sizes_ghost_layers_when_asked() {
    let (u, c, flux) = (Tag::none("u"), Tag::none("c"), Tag::none("flux"));
    let mut factory = Factory::new();
    factory.placeholder(u.clone(), LocationKind::XFace).unwrap();
    factory
        .placeholder(c.clone(), LocationKind::CellCentre)
        .unwrap();
    let (u1, c1) = (u.clone(), c.clone());
    factory
        .register(LanguageExpression::new::<XFace>(flux.clone(), move |s| {
            limited::<XFace>(Limiter::VanLeer, s.field(&u1), s.field(&c1))
        }))
        .unwrap();
    let patch = grid_2d().whole_domain(1);
    let refused = ExpressionGraph::build(
        &factory,
        std::slice::from_ref(&flux),
        &patch,
        &Default::default(),
    )
    .unwrap_err();
    assert!(
        matches!(&refused, GraphError::MissingGhosts { tag, needed: 2, available: 1, side, .. } if *tag == c && *side == "-x"),
        "{refused:?}"
    );
    let options = GraphOptions {
        ghosts: GhostPolicy::Grow,
        ..Default::default()
    };
    let graph =
        ExpressionGraph::build(&factory, std::slice::from_ref(&flux), &patch, &options).unwrap();
    // The +x boundary face reads cells n-2..=n+1: two ghosts on each side
    // along x; y keeps the layer it had (never narrowed); z is inactive.
    assert_eq!(graph.patch().ghosts().minus, [2, 1, 0]);
    assert_eq!(graph.patch().ghosts().plus, [2, 1, 0]);
    assert_eq!(
        graph.required_ghosts(&c).unwrap(),
        GhostWidth {
            minus: [2, 0, 0],
            plus: [2, 0, 0]
        }
    );
}

/// A chain of stencils: the intermediate flux must be computed on ghost
/// faces for the divergence of a periodic patch; the analysis asks for
/// exactly that and the result matches a direct computation.
#[test]
fn intermediate_fields_are_computed_over_what_their_consumers_read() {
    let grid = Grid::new([12, 1, 1], [1.0, 1.0, 1.0], [0.0; 3])
        .unwrap()
        .with_periodic([true, false, false]);
    let patch = grid.whole_domain(1);
    let (p, flux, rhs) = (Tag::none("p"), Tag::none("flux"), Tag::none("rhs"));
    let mut factory = Factory::new();
    factory
        .placeholder(p.clone(), LocationKind::CellCentre)
        .unwrap();
    let p1 = p.clone();
    factory
        .register(LanguageExpression::new::<XFace>(flux.clone(), move |s| {
            gradient::<XFace>(s.field(&p1))
        }))
        .unwrap();
    let f1 = flux.clone();
    factory
        .register(LanguageExpression::new::<CellCentre>(
            rhs.clone(),
            move |s| watershed_operators::divergence::<XFace>(s.field(&f1)),
        ))
        .unwrap();
    let options = GraphOptions {
        no_fusion: true,
        persistent: vec![flux.clone()],
        ..Default::default()
    };
    let graph =
        ExpressionGraph::build(&factory, std::slice::from_ref(&rhs), &patch, &options).unwrap();
    // Periodic: 12 interior faces, the divergence of the last cell reads face 12.
    assert_eq!(
        graph.computed_region(&flux).unwrap().unwrap().hi[0],
        13,
        "flux faces 0..=12"
    );
    let n = 12;
    let h = 1.0 / n as f64;
    let value = |i: isize| ((i.rem_euclid(n) as f64 + 0.5) * h * std::f64::consts::TAU).sin();
    graph
        .with_field_mut::<CellCentre, _>(&p, |field| {
            let layout = field.layout().clone();
            let values = field.values_mut().unwrap();
            for i in layout.allocated().iter() {
                values[layout.linear_index(i)] = value(i[0]);
            }
        })
        .unwrap();
    graph.execute(ExecutionMode::Serial).unwrap();
    let got = interior_values(&graph, &rhs);
    for (i, g) in got.iter().enumerate() {
        let i = i as isize;
        let expected = (value(i + 1) - 2.0 * value(i) + value(i - 1)) / (h * h);
        assert!(
            (g - expected).abs() < 1e-9 * expected.abs().max(1.0),
            "cell {i}: {g} vs {expected}"
        );
    }
}

/// Fused and unfused graphs give the same state, ghosts included, over
/// several steps without boundary conditions (the old "largest computable"
/// rule let the unfused graph fill ghosts from fluxes never computed).
#[test]
fn fusion_never_changes_a_result() {
    let patch = Grid::new([10, 8, 1], [1.0, 0.8, 1.0], [0.0; 3])
        .unwrap()
        .whole_domain(1);
    let (p, fx, fy, rhs, next) = (
        Tag::none("p"),
        Tag::none("fx"),
        Tag::none("fy"),
        Tag::none("rhs"),
        Tag::none("next"),
    );
    let make = |fusion: bool| {
        let mut factory = Factory::new();
        factory
            .placeholder(p.clone(), LocationKind::CellCentre)
            .unwrap();
        let p1 = p.clone();
        factory
            .register(LanguageExpression::new::<XFace>(fx.clone(), move |s| {
                interpolate_to_face::<XFace>(s.field(&p1)) * gradient::<XFace>(s.field(&p1))
            }))
            .unwrap();
        let p2 = p.clone();
        factory
            .register(LanguageExpression::new::<watershed_fields::YFace>(
                fy.clone(),
                move |s| gradient::<watershed_fields::YFace>(s.field(&p2)),
            ))
            .unwrap();
        let (a, b) = (fx.clone(), fy.clone());
        factory
            .register(LanguageExpression::new::<CellCentre>(
                rhs.clone(),
                move |s| {
                    watershed_operators::divergence::<XFace>(s.field(&a))
                        + watershed_operators::divergence::<watershed_fields::YFace>(s.field(&b))
                },
            ))
            .unwrap();
        let (p3, r) = (p.clone(), rhs.clone());
        factory
            .register(LanguageExpression::new::<CellCentre>(
                next.clone(),
                move |s| s.field(&p3) + 1e-3 * s.field(&r),
            ))
            .unwrap();
        let options = GraphOptions {
            no_fusion: !fusion,
            ..Default::default()
        };
        ExpressionGraph::build(&factory, std::slice::from_ref(&next), &patch, &options).unwrap()
    };
    let (fused, unfused) = (make(true), make(false));
    assert!(fused.fusions() > 0);
    assert_eq!(unfused.fusions(), 0);
    let all = |graph: &ExpressionGraph, tag: &Tag| {
        graph
            .with_field::<CellCentre, _>(tag, |f| f.values().unwrap().to_vec())
            .unwrap()
    };
    for graph in [&fused, &unfused] {
        set(graph, &p, |[x, y, _]| {
            (3.0 * x).sin() * (2.0 * y).cos() + 1.5
        });
    }
    for _step in 0..7 {
        for graph in [&fused, &unfused] {
            graph.execute(ExecutionMode::Serial).unwrap();
            let state = all(graph, &next);
            graph
                .with_field_mut::<CellCentre, _>(&p, |f| {
                    f.values_mut().unwrap().copy_from_slice(&state)
                })
                .unwrap();
        }
    }
    let (a, b) = (all(&fused, &next), all(&unfused, &next));
    let scale = a.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(
            (x - y).abs() <= 1e-13 * scale,
            "point {i}: fused {x}, unfused {y}"
        );
    }
}

/// A tag read at another location than it is declared is refused.
#[test]
fn a_tag_read_at_the_wrong_location_is_refused() {
    let (u, out) = (Tag::none("velocity"), Tag::none("out"));
    let mut factory = Factory::new();
    factory
        .placeholder(u.clone(), LocationKind::CellCentre)
        .unwrap();
    let u1 = u.clone();
    factory
        .register(LanguageExpression::new::<XFace>(out.clone(), move |s| {
            s.field::<XFace>(&u1) * 2.0
        }))
        .unwrap();
    let patch = grid_2d().whole_domain(1);
    let error = ExpressionGraph::build(&factory, &[out], &patch, &Default::default()).unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(&error, GraphError::LocationConflict { tag, first: LocationKind::CellCentre, second: LocationKind::XFace, .. } if *tag == u),
        "{error:?}"
    );
    assert!(message.contains("velocity"), "{message}");
}

/// A modifier attached to a tag the graph does not hold (a misspelt
/// boundary-condition target) is an error naming the tag and the modifier.
#[test]
fn a_modifier_on_a_missing_tag_is_refused() {
    let (p, rhs) = (Tag::none("phi"), Tag::none("rhs"));
    let mut factory = diffusion_factory(&p, &rhs);
    let typo = Tag::none("phl");
    factory
        .attach_modifier(
            typo.clone(),
            NativeExpression::new(
                "dirichlet on phl",
                vec![(typo.clone(), LocationKind::CellCentre)],
                vec![],
                |_| Ok(()),
            ),
        )
        .unwrap();
    let patch = grid_2d().whole_domain(1);
    let error = ExpressionGraph::build(&factory, &[rhs], &patch, &Default::default()).unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(&error, GraphError::UnknownTag { tag, .. } if *tag == typo),
        "{error:?}"
    );
    assert!(message.contains("dirichlet on phl"), "{message}");
}

/// Reading a placeholder nobody set is an error naming it; filling it (or
/// writing it) says the values are intended.
#[test]
fn an_unset_placeholder_is_an_error_until_set() {
    let (p, rhs) = (Tag::none("pressure"), Tag::none("rhs"));
    let factory = diffusion_factory(&p, &rhs);
    let patch = grid_2d().whole_domain(1);
    let graph = ExpressionGraph::build(
        &factory,
        std::slice::from_ref(&rhs),
        &patch,
        &Default::default(),
    )
    .unwrap();
    let error = graph.execute(ExecutionMode::Serial).unwrap_err();
    assert!(
        matches!(&error, GraphError::PlaceholderNotSet { tag, reader } if *tag == p && reader == "rhs"),
        "{error:?}"
    );
    assert!(error.to_string().contains("pressure"));
    graph.fill_placeholder(&p).unwrap();
    graph.execute(ExecutionMode::Serial).unwrap();
    assert!(interior_values(&graph, &rhs).iter().all(|&v| v == 0.0));
    // Filling a computed tag is refused.
    assert!(matches!(
        graph.fill_placeholder(&rhs),
        Err(GraphError::UnknownTag { .. })
    ));
}

/// A placeholder bound to a field with fewer ghost layers than the
/// stencils read is refused at binding, naming the field and the side.
#[test]
fn binding_a_placeholder_without_the_ghosts_it_needs_is_refused() {
    let (p, rhs) = (Tag::none("phi"), Tag::none("rhs"));
    let factory = diffusion_factory(&p, &rhs);
    let grid = grid_2d();
    let graph =
        ExpressionGraph::build(&factory, &[rhs], &grid.whole_domain(1), &Default::default())
            .unwrap();
    let thin =
        SpatialField::<CellCentre>::new("outer_phi", &grid.whole_domain(0), Device::Cpu).unwrap();
    let error = graph.bind_placeholder(&p, thin).unwrap_err();
    assert!(
        matches!(&error, GraphError::MissingGhosts { tag, needed: 1, available: 0, what, .. } if *tag == p && what.contains("outer_phi")),
        "{error:?}"
    );
    let wide =
        SpatialField::<CellCentre>::new("outer_phi", &grid.whole_domain(2), Device::Cpu).unwrap();
    graph.bind_placeholder(&p, wide).unwrap();
    graph.execute(ExecutionMode::Serial).unwrap();
}

/// Executions of one graph from several threads at once are serialised:
/// every one of 4 x 500 results is right, and no spurious "not allocated"
/// error appears.
#[test]
fn concurrent_executions_never_give_a_wrong_result() {
    let (p, rhs) = (Tag::none("p"), Tag::none("rhs"));
    let factory = diffusion_factory(&p, &rhs);
    let patch = grid_2d().whole_domain(1);
    let graph = Arc::new(
        ExpressionGraph::build(
            &factory,
            std::slice::from_ref(&rhs),
            &patch,
            &Default::default(),
        )
        .unwrap(),
    );
    set(&graph, &p, |[x, y, _]| x * x + y * y);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (graph, rhs) = (graph.clone(), rhs.clone());
            std::thread::spawn(move || {
                let mode = if t % 2 == 0 {
                    ExecutionMode::Serial
                } else {
                    ExecutionMode::Threaded(2)
                };
                for _ in 0..500 {
                    graph.execute(mode).unwrap();
                    let values = interior_values(&graph, &rhs);
                    assert!(values.iter().all(|v| (v - 4.0).abs() < 1e-9));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// `execute` inside `with_field` of the same graph is an error, not a
/// deadlock.
#[test]
fn execute_inside_with_field_is_an_error() {
    let (p, rhs) = (Tag::none("p"), Tag::none("rhs"));
    let factory = diffusion_factory(&p, &rhs);
    let patch = grid_2d().whole_domain(1);
    let graph = ExpressionGraph::build(
        &factory,
        std::slice::from_ref(&rhs),
        &patch,
        &Default::default(),
    )
    .unwrap();
    graph.fill_placeholder(&p).unwrap();
    let inner = graph
        .with_field::<CellCentre, _>(&rhs, |_| graph.execute(ExecutionMode::Serial))
        .unwrap();
    assert!(
        matches!(&inner, Err(GraphError::Usage(m)) if m.contains("with_field")),
        "{inner:?}"
    );
    // After the closure the graph runs normally.
    graph.execute(ExecutionMode::Serial).unwrap();
}

/// Thread counts: 0 and absurd counts are refused; many distinct counts do
/// not accumulate threads without bound.
#[test]
fn thread_counts_are_checked_and_pools_bounded() {
    let (p, rhs) = (Tag::none("p"), Tag::none("rhs"));
    let factory = diffusion_factory(&p, &rhs);
    let patch = grid_2d().whole_domain(1);
    let graph = ExpressionGraph::build(
        &factory,
        std::slice::from_ref(&rhs),
        &patch,
        &Default::default(),
    )
    .unwrap();
    graph.fill_placeholder(&p).unwrap();
    let zero = graph.execute(ExecutionMode::Threaded(0)).unwrap_err();
    assert!(
        matches!(&zero, GraphError::Usage(m) if m.contains("Threaded(0)")),
        "{zero:?}"
    );
    let huge = graph.execute(ExecutionMode::Threaded(100_000)).unwrap_err();
    assert!(
        matches!(&huge, GraphError::Usage(m) if m.contains("100000")),
        "{huge:?}"
    );
    let limit = watershed_exprgraph::scheduler::max_threads();
    for n in 1..=limit.min(24) {
        graph.execute(ExecutionMode::Threaded(n)).unwrap();
    }
    // Pools are dropped as new ones are made; give their threads a moment.
    std::thread::sleep(std::time::Duration::from_millis(300));
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        let alive = tasks
            .filter_map(Result::ok)
            .filter(|t| {
                std::fs::read_to_string(t.path().join("comm"))
                    .is_ok_and(|c| c.starts_with("watershed-grap"))
            })
            .count();
        // At most the four kept pools, each at most `limit` threads.
        assert!(alive <= 4 * limit.min(24), "{alive} graph threads alive");
        assert!(alive <= 24 + 23 + 22 + 21, "{alive} graph threads alive");
    }
}

/// `Adaptive(n)`: the first executions alternate between one thread and
/// `n` (after untimed warm-ups), then the faster is kept; the values
/// are those of a serial execution whichever mode ran; 0 threads are
/// refused by name.
#[test]
fn adaptive_execution_chooses_a_mode_and_keeps_the_serial_values() {
    use watershed_exprgraph::adaptive::{TRIALS, WARM_UP};
    let (p, rhs) = (Tag::none("p"), Tag::none("rhs"));
    let factory = diffusion_factory(&p, &rhs);
    let patch = grid_2d().whole_domain(1);
    let options = GraphOptions {
        persistent: vec![rhs.clone()],
        ..Default::default()
    };
    let graph =
        ExpressionGraph::build(&factory, std::slice::from_ref(&rhs), &patch, &options).unwrap();
    set(&graph, &p, |[x, y, _]| (3.0 * x).sin() + y * y);
    graph.execute(ExecutionMode::Serial).unwrap();
    let bits = |v: Vec<f64>| v.into_iter().map(f64::to_bits).collect::<Vec<_>>();
    let reference = bits(interior_values(&graph, &rhs));
    for execution in 0..(WARM_UP + 2 * TRIALS + 2) {
        graph.execute(ExecutionMode::Adaptive(2)).unwrap();
        assert_eq!(
            bits(interior_values(&graph, &rhs)),
            reference,
            "execution {execution}"
        );
        if execution + 1 < WARM_UP + 2 * TRIALS {
            assert_eq!(graph.adaptive_choice(), None, "execution {execution}");
        }
    }
    assert!(
        matches!(
            graph.adaptive_choice(),
            Some(ExecutionMode::Serial | ExecutionMode::Threaded(2))
        ),
        "{:?}",
        graph.adaptive_choice()
    );
    let zero = graph.execute(ExecutionMode::Adaptive(0)).unwrap_err();
    assert!(
        matches!(&zero, GraphError::Usage(m) if m.contains("Adaptive(0)")),
        "{zero:?}"
    );
}

/// Random expressions on random 1D/2D/3D grids with 0-3 ghost layers: the
/// graph node equals the direct assignment over the interior bitwise, or
/// the build is refused with `MissingGhosts`, and then the direct
/// assignment is refused too. Never anything else.
mod properties {
    use super::*;
    use proptest::prelude::*;
    use watershed_operators::{Assign, Expr};

    #[derive(Debug, Clone, Copy)]
    enum Shape {
        Laplacian,
        Diffusion,
        Gradient,
        Limited,
        Pointwise,
    }

    fn build_expr<'a>(
        shape: Shape,
        p: Expr<'a, CellCentre>,
        g: Expr<'a, CellCentre>,
        u: Expr<'a, XFace>,
    ) -> Expr<'a, CellCentre> {
        match shape {
            Shape::Laplacian => laplacian(p) * 0.5,
            Shape::Diffusion => div(interp(g) * grad(p)),
            Shape::Gradient => {
                watershed_operators::interpolate_to_cell::<XFace>(gradient::<XFace>(p) * 2.0)
            }
            Shape::Limited => {
                watershed_operators::divergence::<XFace>(limited::<XFace>(Limiter::Minmod, u, p))
            }
            Shape::Pointwise => p * g + 1.0,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
        #[test]
        fn graph_equals_direct_assignment_or_is_refused(
            cells in prop::array::uniform3(1usize..7),
            ghosts in 0usize..4,
            shape in prop::sample::select(vec![Shape::Laplacian, Shape::Diffusion, Shape::Gradient, Shape::Limited, Shape::Pointwise]),
            seed in any::<u64>(),
        ) {
            let grid = Grid::new(cells, [1.0, 0.7, 1.3], [0.0; 3]).unwrap();
            let patch: Patch = grid.whole_domain(ghosts);
            let (p, g, u, out) = (Tag::none("p"), Tag::none("g"), Tag::none("u"), Tag::none("out"));
            let mut factory = Factory::new();
            factory.placeholder(p.clone(), LocationKind::CellCentre).unwrap();
            factory.placeholder(g.clone(), LocationKind::CellCentre).unwrap();
            factory.placeholder(u.clone(), LocationKind::XFace).unwrap();
            let (p1, g1, u1) = (p.clone(), g.clone(), u.clone());
            factory.register(LanguageExpression::new::<CellCentre>(out.clone(), move |s| {
                build_expr(shape, s.field(&p1), s.field(&g1), s.field(&u1))
            })).unwrap();

            // The same fields, filled from the seed, for the direct assignment.
            let mut state = seed | 1;
            let mut next = move || {
                state ^= state << 13; state ^= state >> 7; state ^= state << 17;
                (state % 2000) as f64 / 1000.0 - 1.0
            };
            let mut fp = SpatialField::<CellCentre>::new("p", &patch, Device::Cpu).unwrap();
            let mut fg = SpatialField::<CellCentre>::new("g", &patch, Device::Cpu).unwrap();
            let mut fu = SpatialField::<XFace>::new("u", &patch, Device::Cpu).unwrap();
            for v in fp.values_mut().unwrap() { *v = next(); }
            for v in fg.values_mut().unwrap() { *v = next(); }
            for v in fu.values_mut().unwrap() { *v = next(); }
            let mut direct = SpatialField::<CellCentre>::new("out", &patch, Device::Cpu).unwrap();
            let direct_result = direct.assign(build_expr(shape, Expr::from(&fp), Expr::from(&fg), Expr::from(&fu)));

            match ExpressionGraph::build(&factory, std::slice::from_ref(&out), &patch, &Default::default()) {
                Err(GraphError::MissingGhosts { .. }) => {
                    prop_assert!(direct_result.is_err(), "the graph refused, the direct assignment ran");
                }
                Err(other) => prop_assert!(false, "unexpected error {other:?}"),
                Ok(graph) => {
                    prop_assert!(direct_result.is_ok(), "the graph ran, the direct assignment refused: {:?}", direct_result);
                    // Placeholders the expression does not read are not in the graph.
                    let copy = |tag: &Tag, values: &[f64]| {
                        if graph.field_info(tag).is_some() {
                            graph.with_field_mut::<CellCentre, _>(tag, |f| f.values_mut().unwrap().copy_from_slice(values)).unwrap();
                        }
                    };
                    copy(&p, fp.values().unwrap());
                    copy(&g, fg.values().unwrap());
                    if graph.field_info(&u).is_some() {
                        graph.with_field_mut::<XFace, _>(&u, |f| f.values_mut().unwrap().copy_from_slice(fu.values().unwrap())).unwrap();
                    }
                    graph.execute(ExecutionMode::Serial).unwrap();
                    let got = graph.with_field::<CellCentre, _>(&out, |f| f.values().unwrap().to_vec()).unwrap();
                    let layout = FieldLayout::new(&patch, LocationKind::CellCentre);
                    let want = direct.values().unwrap();
                    for i in layout.interior().iter() {
                        let at = layout.linear_index(i);
                        prop_assert_eq!(got[at].to_bits(), want[at].to_bits(), "{:?} at {:?}", shape, i);
                    }
                }
            }
        }
    }
}

#[test]
fn a_checked_producer_is_not_fused_away_and_reports_its_own_field() {
    let (u, logged, after) = (Tag::none("u"), Tag::none("log u"), Tag::none("after"));
    let mut factory = Factory::new();
    factory
        .placeholder(u.clone(), LocationKind::CellCentre)
        .unwrap();
    let t = u.clone();
    factory
        .register(
            LanguageExpression::new::<CellCentre>(logged.clone(), move |s| {
                watershed_operators::log(s.field::<CellCentre>(&t))
            })
            .checking_finite(),
        )
        .unwrap();
    let l = logged.clone();
    factory
        .register(LanguageExpression::new::<CellCentre>(
            after.clone(),
            move |s| s.field::<CellCentre>(&l) * 2.0,
        ))
        .unwrap();
    let options = GraphOptions {
        persistent: vec![after.clone()],
        ..Default::default()
    };
    let patch = grid_2d().whole_domain(1);
    let graph =
        ExpressionGraph::build(&factory, std::slice::from_ref(&after), &patch, &options).unwrap();
    // Fusion would inline `log u` into `after` (scratch, one reader) and
    // drop its check: it must keep its node.
    assert_eq!(graph.node_count(), 2);
    set(&graph, &u, |[x, y, _]| {
        // Cell (3, 9) of the 16 x 16 cells over the unit square.
        if ((x * 16.0).floor(), (y * 16.0).floor()) == (3.0, 9.0) {
            -1.0
        } else {
            1.0 + x
        }
    });
    let error = graph.execute(ExecutionMode::Serial).unwrap_err();
    match &error {
        GraphError::Expression { expression, source } => {
            assert_eq!(expression, "log u");
            assert!(
                matches!(source.as_ref(), GraphError::Operator(watershed_operators::OperatorError::NotFinite { target, point, .. })
                    if target == "log u" && *point == [3, 9, 0]),
                "{error}"
            );
        }
        other => panic!("{other}"),
    }
}
