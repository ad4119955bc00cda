//! A graph run on the patches of a decomposed grid, with the patches'
//! ghosts exchanged between steps (`watershed_fields::halo`), gives the
//! whole domain's bits: the first check of issue 51's promise that the
//! decomposition does not change the arithmetic of a stencil scheme.
//!
//! The scheme: forward-Euler steps of `next = phi + dt (diffusion -
//! advection)`, a variable-coefficient diffusion `div(interp(gamma)
//! grad(phi))` and the divergence of `phi` carried by a constant velocity,
//! on a grid periodic along x and y, with `dt` inside both stability
//! limits. The whole domain's ghosts are filled by a hand-written periodic
//! loop; the patches' by the exchange, by hand and through
//! [`PatchedGraphs`].

use std::rc::Rc;
use watershed_exprgraph::patched::PatchedGraphs;
use watershed_exprgraph::{
    ExecutionMode, ExpressionGraph, Factory, GraphError, GraphOptions, LanguageExpression, Tag,
};
use watershed_fields::halo::exchange_ghosts;
use watershed_fields::ranks::SingleProcess;
use watershed_fields::{
    CellCentre, Device, GhostWidth, Grid, Patch, PatchLayout, SpatialField, XFace, YFace,
};
use watershed_operators::{div, divergence, grad, interp, interpolate_to_face};

/// Diffusion number at most 1.2 dt / h^2 = 0.12 (h = 0.1); Courant
/// number 0.7 dt / h = 0.007.
const DT: f64 = 0.001;

struct Tags {
    phi: Tag,
    gamma: Tag,
    next: Tag,
}

fn factory(tags: &Tags) -> Factory {
    let mut factory = Factory::new();
    factory
        .placeholder(tags.phi.clone(), watershed_fields::LocationKind::CellCentre)
        .unwrap();
    factory
        .placeholder(
            tags.gamma.clone(),
            watershed_fields::LocationKind::CellCentre,
        )
        .unwrap();
    let (phi, gamma) = (tags.phi.clone(), tags.gamma.clone());
    factory
        .register(LanguageExpression::new::<CellCentre>(
            tags.next.clone(),
            move |s| {
                let p = s.field::<CellCentre>(&phi);
                let g = s.field::<CellCentre>(&gamma);
                let diffusion = div(interp(g) * grad(p.clone()));
                let advected_x = interpolate_to_face::<XFace>(p.clone()) * 0.7;
                let advected_y = interpolate_to_face::<YFace>(p.clone()) * -0.4;
                let advection = divergence(advected_x) + divergence(advected_y);
                p + (diffusion - advection) * DT
            },
        ))
        .unwrap();
    factory
}

/// The value of the initial fields at global cell `g`: smooth and
/// periodic over the 24 x 18 cells.
fn initial(g: [isize; 3], which: u64) -> f64 {
    let tau = std::f64::consts::TAU;
    let (x, y) = (tau * g[0] as f64 / 24.0, tau * g[1] as f64 / 18.0);
    match which {
        0 => x.sin() * (2.0 * y).cos() + 0.3 * (3.0 * x + 1.0).sin(),
        _ => 1.0 + 0.2 * (x + y).cos(),
    }
}

/// `field`'s interior set from `initial` at global indices.
fn fill_interior(field: &mut SpatialField<CellCentre>, patch: &Patch, which: u64) {
    let layout = field.layout().clone();
    let data = field.values_mut().unwrap();
    for local in layout.interior().iter() {
        let g = [0, 1, 2].map(|a| patch.offset()[a] as isize + local[a]);
        data[layout.linear_index(local)] = initial(g, which);
    }
}

/// The whole domain's periodic ghosts, by hand: each ghost point takes the
/// value of the interior point its indices wrap to.
fn periodic_fill(field: &mut SpatialField<CellCentre>) {
    let layout = field.layout().clone();
    let n = layout.interior_extent().map(|n| n as isize);
    let data = field.values_mut().unwrap();
    for local in layout.allocated().iter() {
        if layout.interior().contains(local) {
            continue;
        }
        let wrapped = [0, 1, 2].map(|a| local[a].rem_euclid(n[a]));
        data[layout.linear_index(local)] = data[layout.linear_index(wrapped)];
    }
}

fn build(tags: &Tags, patch: &Patch) -> ExpressionGraph {
    let options = GraphOptions {
        persistent: vec![tags.next.clone()],
        ..Default::default()
    };
    ExpressionGraph::build(
        &factory(tags),
        std::slice::from_ref(&tags.next),
        patch,
        &options,
    )
    .unwrap()
}

/// Runs `steps` steps on the graph of each patch of `layout` (one patch:
/// the whole domain with the hand-written fill) and returns, per patch,
/// `phi`'s field.
fn run(layout: &PatchLayout, steps: usize, whole: bool) -> Vec<SpatialField<CellCentre>> {
    let tags = Tags {
        phi: Tag::none("phi"),
        gamma: Tag::none("gamma"),
        next: Tag::none("next"),
    };
    let patches: Vec<Patch> = (0..layout.len())
        .map(|p| layout.patch(p).unwrap())
        .collect();
    let graphs: Vec<ExpressionGraph> = patches.iter().map(|p| build(&tags, p)).collect();
    let make = |which: u64| -> Vec<SpatialField<CellCentre>> {
        patches
            .iter()
            .enumerate()
            .map(|(p, patch)| {
                let mut f =
                    SpatialField::new(&format!("f{which}_{p}"), patch, Device::Cpu).unwrap();
                fill_interior(&mut f, patch, which);
                f
            })
            .collect()
    };
    let (mut phi, mut gamma) = (make(0), make(1));
    let fill = |fields: &mut Vec<SpatialField<CellCentre>>| {
        if whole {
            periodic_fill(&mut fields[0]);
        } else {
            exchange_ghosts(layout, fields).unwrap();
        }
    };
    fill(&mut gamma);
    for (graph, g) in graphs.iter().zip(&gamma) {
        let values = g.values().unwrap().to_vec();
        graph
            .with_field_mut::<CellCentre, _>(&tags.gamma, |f| {
                f.values_mut().unwrap().copy_from_slice(&values)
            })
            .unwrap();
    }
    for _ in 0..steps {
        fill(&mut phi);
        for (graph, p) in graphs.iter().zip(&mut phi) {
            let values = p.values().unwrap().to_vec();
            graph
                .with_field_mut::<CellCentre, _>(&tags.phi, |f| {
                    f.values_mut().unwrap().copy_from_slice(&values)
                })
                .unwrap();
            graph.execute(ExecutionMode::Serial).unwrap();
            let layout = p.layout().clone();
            let next = graph
                .with_field::<CellCentre, _>(&tags.next, |f| f.values().unwrap().to_vec())
                .unwrap();
            let data = p.values_mut().unwrap();
            for local in layout.interior().iter() {
                let at = layout.linear_index(local);
                data[at] = next[at];
            }
        }
    }
    phi
}

#[test]
fn patches_with_exchanged_ghosts_give_the_whole_domains_bits() {
    let grid = Grid::new([24, 18, 1], [2.4, 1.8, 1.0], [0.0; 3])
        .unwrap()
        .with_periodic([true, true, false]);
    let ghosts = GhostWidth::uniform(1);
    let whole = PatchLayout::new(&grid, [1, 1, 1], ghosts).unwrap();
    let reference = run(&whole, 12, true);
    let reference_layout = reference[0].layout().clone();
    let reference_values = reference[0].values().unwrap();
    for counts in [[2, 1, 1], [3, 2, 1], [4, 3, 1]] {
        let layout = PatchLayout::new(&grid, counts, ghosts).unwrap();
        let fields = run(&layout, 12, false);
        for (p, field) in fields.iter().enumerate() {
            let offset = layout.patch(p).unwrap().offset();
            let fl = field.layout();
            let values = field.values().unwrap();
            for local in fl.interior().iter() {
                let g = [0, 1, 2].map(|a| offset[a] as isize + local[a]);
                let expected = reference_values[reference_layout.linear_index(g)];
                let got = values[fl.linear_index(local)];
                assert_eq!(
                    got.to_bits(),
                    expected.to_bits(),
                    "layout {counts:?}, patch {p}, cell {g:?}: {got} against {expected}"
                );
            }
        }
    }
    // The scheme did something, and stayed stable: phi moved from its
    // initial values and stays within their bound (|phi| <= 1.3).
    let moved = reference_layout
        .interior()
        .iter()
        .map(|l| (reference_values[reference_layout.linear_index(l)] - initial(l, 0)).abs())
        .fold(0.0, f64::max);
    let largest = reference_layout
        .interior()
        .iter()
        .map(|l| reference_values[reference_layout.linear_index(l)].abs())
        .fold(0.0, f64::max);
    assert!(moved > 1e-2, "phi barely moved ({moved:e})");
    assert!(
        largest < 1.5,
        "the scheme is not stable: |phi| reached {largest}"
    );
}

/// The same scheme through [`PatchedGraphs`]: one graph per patch from one
/// recipe, `phi` and `next` rotated after each step and `phi`'s seams and
/// periodic images exchanged; the whole field put back together has the
/// whole domain's bits at every cell, on every layout.
#[test]
fn patched_graphs_step_with_the_whole_domains_bits() {
    let grid = Grid::new([24, 18, 1], [2.4, 1.8, 1.0], [0.0; 3])
        .unwrap()
        .with_periodic([true, true, false]);
    let ghosts = GhostWidth::uniform(1);
    let steps = 12;
    let reference = run(
        &PatchLayout::new(&grid, [1, 1, 1], ghosts).unwrap(),
        steps,
        true,
    );
    let reference_layout = reference[0].layout().clone();
    let reference_values = reference[0].values().unwrap();
    let tags = Tags {
        phi: Tag::none("phi"),
        gamma: Tag::none("gamma"),
        next: Tag::none("next"),
    };
    for counts in [[2, 1, 1], [3, 2, 1]] {
        let layout = PatchLayout::new(&grid, counts, ghosts).unwrap();
        let graphs = PatchedGraphs::build(layout, Rc::new(SingleProcess), |patch| {
            Ok::<_, GraphError>(build(&tags, patch))
        })
        .unwrap();
        assert_eq!(graphs.graphs().len(), counts[0] * counts[1]);
        for graph in graphs.graphs() {
            let patch = graph.patch().clone();
            for (tag, which) in [(&tags.phi, 0), (&tags.gamma, 1)] {
                graph
                    .with_field_mut::<CellCentre, _>(tag, |f| fill_interior(f, &patch, which))
                    .unwrap();
            }
        }
        let written = graphs
            .exchange(&[tags.phi.clone(), tags.gamma.clone()])
            .unwrap();
        assert!(written > 0);
        for _ in 0..steps {
            graphs.execute(ExecutionMode::Serial).unwrap();
            graphs
                .rotate_fields(&[tags.phi.clone(), tags.next.clone()])
                .unwrap();
            graphs.exchange(std::slice::from_ref(&tags.phi)).unwrap();
        }
        let whole = graphs.whole_field::<CellCentre>(&tags.phi).unwrap();
        let gathered = graphs
            .gather_field::<CellCentre>(&tags.phi)
            .unwrap()
            .unwrap();
        assert_eq!(gathered.values().unwrap(), whole.values().unwrap());
        let layout = whole.layout();
        let values = whole.values().unwrap();
        for g in reference_layout.interior().iter() {
            let (got, expected) = (
                values[layout.linear_index(g)],
                reference_values[reference_layout.linear_index(g)],
            );
            assert_eq!(
                got.to_bits(),
                expected.to_bits(),
                "layout {counts:?}, cell {g:?}: {got} against {expected}"
            );
        }
        // Put back into the patches and gathered again: the same field.
        graphs.set_whole_field(&tags.phi, &whole).unwrap();
        assert_eq!(
            graphs
                .whole_field::<CellCentre>(&tags.phi)
                .unwrap()
                .values()
                .unwrap(),
            values
        );

        // Stepping with each step's exchange overlapped with its interior
        // work (the exchange of phi left for the start of the next step):
        // the same bits.
        let overlapped = PatchedGraphs::build(
            PatchLayout::new(&grid, counts, ghosts).unwrap(),
            Rc::new(SingleProcess),
            |patch| Ok::<_, GraphError>(build(&tags, patch)),
        )
        .unwrap();
        for graph in overlapped.graphs() {
            let patch = graph.patch().clone();
            for (tag, which) in [(&tags.phi, 0), (&tags.gamma, 1)] {
                graph
                    .with_field_mut::<CellCentre, _>(tag, |f| fill_interior(f, &patch, which))
                    .unwrap();
            }
        }
        overlapped
            .exchange(std::slice::from_ref(&tags.gamma))
            .unwrap();
        for _ in 0..steps {
            let written = overlapped
                .exchange_and_execute(std::slice::from_ref(&tags.phi), ExecutionMode::Serial)
                .unwrap();
            assert!(written > 0);
            overlapped
                .rotate_fields(&[tags.phi.clone(), tags.next.clone()])
                .unwrap();
        }
        overlapped
            .exchange(std::slice::from_ref(&tags.phi))
            .unwrap();
        let again = overlapped.whole_field::<CellCentre>(&tags.phi).unwrap();
        assert!(
            again
                .values()
                .unwrap()
                .iter()
                .zip(values)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "layout {counts:?}: the overlapped steps differ"
        );
        assert!(overlapped.interior_during_exchanges() > std::time::Duration::ZERO);
    }
}

/// A recipe that builds on another patch is refused naming the patch; a
/// whole field with fewer ghost layers than the patches is refused
/// naming the field and both layouts.
#[test]
fn patched_graphs_refuse_a_wrong_recipe_and_a_thin_whole_field() {
    let grid = Grid::new([24, 18, 1], [2.4, 1.8, 1.0], [0.0; 3])
        .unwrap()
        .with_periodic([true, true, false]);
    let layout = PatchLayout::new(&grid, [2, 1, 1], GhostWidth::uniform(1)).unwrap();
    let tags = Tags {
        phi: Tag::none("phi"),
        gamma: Tag::none("gamma"),
        next: Tag::none("next"),
    };
    let whole_patch = grid.whole_domain(1);
    let error = PatchedGraphs::build(layout.clone(), Rc::new(SingleProcess), |_| {
        Ok::<_, GraphError>(build(&tags, &whole_patch))
    })
    .unwrap_err();
    match error {
        GraphError::Usage(reason) => {
            assert!(
                reason.contains("the recipe for patch 0 built a graph on cells [24, 18, 1]"),
                "{reason}"
            );
            assert!(reason.contains("the patch has [12, 18, 1]"), "{reason}");
        }
        other => panic!("expected a usage error, got {other:?}"),
    }
    let graphs = PatchedGraphs::build(layout, Rc::new(SingleProcess), |patch| {
        Ok::<_, GraphError>(build(&tags, patch))
    })
    .unwrap();
    let thin = SpatialField::<CellCentre>::new("phi", &grid.whole_domain(0), Device::Cpu).unwrap();
    match graphs.set_whole_field(&tags.phi, &thin) {
        Err(GraphError::Field(watershed_fields::FieldError::InvalidLayout { reason })) => {
            assert!(reason.contains("field phi"), "{reason}");
            assert!(
                reason.contains("with [0, 0, 0] ghost layers below"),
                "{reason}"
            );
            assert!(
                reason.contains("needs [1, 1, 0] below and [1, 1, 0] above"),
                "{reason}"
            );
        }
        other => panic!("expected an invalid layout, got {other:?}"),
    }
}

/// The graph of a staggered update on `patch`: `u` (x faces) and `v`
/// (y faces) given, `phi` given on the cells; it computes
/// `d = div(u, v)`, which reads each cell's `+` faces, and
/// `w = u - 0.1 grad_x(phi)`, which reads the cells on either side of
/// each face.
fn staggered(patch: &Patch) -> ExpressionGraph {
    let (u, v, phi) = (Tag::none("u"), Tag::none("v"), Tag::none("phi"));
    let mut factory = Factory::new();
    for (tag, kind) in [
        (&u, watershed_fields::LocationKind::XFace),
        (&v, watershed_fields::LocationKind::YFace),
        (&phi, watershed_fields::LocationKind::CellCentre),
    ] {
        factory.placeholder(tag.clone(), kind).unwrap();
    }
    let (du, dv) = (u.clone(), v.clone());
    factory
        .register(LanguageExpression::new::<CellCentre>(
            Tag::none("d"),
            move |s| divergence(s.field::<XFace>(&du)) + divergence(s.field::<YFace>(&dv)),
        ))
        .unwrap();
    let (wu, wphi) = (u.clone(), phi.clone());
    factory
        .register(LanguageExpression::new::<XFace>(Tag::none("w"), move |s| {
            s.field::<XFace>(&wu)
                - watershed_operators::gradient::<XFace>(s.field::<CellCentre>(&wphi)) * 0.1
        }))
        .unwrap();
    let roots = [Tag::none("d"), Tag::none("w")];
    let options = GraphOptions {
        persistent: roots.to_vec(),
        ..GraphOptions::default()
    };
    let graph = ExpressionGraph::build(&factory, &roots, patch, &options).unwrap();
    for tag in [&u, &v, &phi] {
        graph.fill_placeholder(tag).unwrap();
    }
    graph
}

/// Face fields exchanged between patch graphs: on a grid periodic along x
/// and walled along y (so the top patches' `v` holds the boundary face),
/// the divergence of `(u, v)` and the face update of `u` have the whole
/// domain's bits on every layout, stepped plainly or overlapped, and the
/// exchanged face fields put together equal the whole domain's, ghosts
/// included. A tag no graph holds is refused by name.
#[test]
fn patched_graphs_exchange_face_fields_with_the_whole_domains_bits() {
    let grid = Grid::new([12, 10, 1], [1.2, 1.0, 1.0], [0.0; 3])
        .unwrap()
        .with_periodic([true, false, false]);
    let ghosts = GhostWidth::uniform(1);
    let value = |k: f64| move |x: [f64; 3]| (k * x[0]).sin() + x[1] * x[1] * k;
    let (u, v, phi) = (Tag::none("u"), Tag::none("v"), Tag::none("phi"));
    let set = |graphs: &PatchedGraphs| {
        graphs.set_field::<XFace>(&u, value(1.0)).unwrap();
        graphs.set_field::<YFace>(&v, value(2.0)).unwrap();
        graphs.set_field::<CellCentre>(&phi, value(3.0)).unwrap();
    };
    let everything = [u.clone(), v.clone(), phi.clone()];
    // The whole domain: one patch, whose exchange fills its own periodic
    // images (PatchedGraphs leaves those to a graph's conditions).
    let whole_layout = PatchLayout::new(&grid, [1, 1, 1], ghosts).unwrap();
    let whole = staggered(&whole_layout.patch(0).unwrap());
    whole.set_field::<XFace>(&u, value(1.0)).unwrap();
    whole.set_field::<YFace>(&v, value(2.0)).unwrap();
    whole.set_field::<CellCentre>(&phi, value(3.0)).unwrap();
    whole
        .with_field_mut::<XFace, _>(&u, |f| {
            exchange_ghosts(&whole_layout, std::slice::from_mut(f))
        })
        .unwrap()
        .unwrap();
    whole
        .with_field_mut::<YFace, _>(&v, |f| {
            exchange_ghosts(&whole_layout, std::slice::from_mut(f))
        })
        .unwrap()
        .unwrap();
    whole
        .with_field_mut::<CellCentre, _>(&phi, |f| {
            exchange_ghosts(&whole_layout, std::slice::from_mut(f))
        })
        .unwrap()
        .unwrap();
    whole.execute(ExecutionMode::Serial).unwrap();
    fn same<L: watershed_exprgraph::GraphLocation>(
        got: &SpatialField<L>,
        expected: &SpatialField<L>,
        points: watershed_fields::IndexBox,
        what: &str,
    ) {
        let (gl, el) = (got.layout(), expected.layout());
        let (g, e) = (got.values().unwrap(), expected.values().unwrap());
        for p in points.iter() {
            assert_eq!(
                g[gl.linear_index(p)].to_bits(),
                e[el.linear_index(p)].to_bits(),
                "{what} at {p:?}"
            );
        }
    }
    for counts in [[2, 1, 1], [3, 2, 1], [1, 2, 1]] {
        let layout = PatchLayout::new(&grid, counts, ghosts).unwrap();
        for overlapped in [false, true] {
            let graphs = PatchedGraphs::build(layout.clone(), Rc::new(SingleProcess), |patch| {
                Ok::<_, GraphError>(staggered(patch))
            })
            .unwrap();
            set(&graphs);
            if overlapped {
                graphs
                    .exchange_and_execute(&everything, ExecutionMode::Serial)
                    .unwrap();
            } else {
                assert!(graphs.exchange(&everything).unwrap() > 0);
                graphs.execute(ExecutionMode::Serial).unwrap();
            }
            let what = format!("layout {counts:?}, overlapped {overlapped}");
            whole
                .with_field::<CellCentre, _>(&Tag::none("d"), |e| {
                    let got = graphs.whole_field::<CellCentre>(&Tag::none("d")).unwrap();
                    same(&got, e, e.layout().interior(), &format!("d, {what}"));
                })
                .unwrap();
            whole
                .with_field::<XFace, _>(&Tag::none("w"), |e| {
                    let got = graphs.whole_field::<XFace>(&Tag::none("w")).unwrap();
                    same(&got, e, e.layout().interior(), &format!("w, {what}"));
                })
                .unwrap();
            whole
                .with_field::<YFace, _>(&v, |e| {
                    let got = graphs.gather_field::<YFace>(&v).unwrap().unwrap();
                    assert_eq!(
                        got.layout().interior_extent(),
                        [12, 11, 1],
                        "the boundary face on +y"
                    );
                    same(&got, e, e.layout().allocated(), &format!("v, {what}"));
                })
                .unwrap();
            whole
                .with_field::<XFace, _>(&u, |e| {
                    let got = graphs.whole_field::<XFace>(&u).unwrap();
                    same(&got, e, e.layout().allocated(), &format!("u, {what}"));
                    // Put back and gathered again: the same field.
                    graphs.set_whole_field::<XFace>(&u, &got).unwrap();
                    let again = graphs.whole_field::<XFace>(&u).unwrap();
                    assert_eq!(again.values().unwrap(), got.values().unwrap());
                })
                .unwrap();
        }
    }
    let layout = PatchLayout::new(&grid, [2, 1, 1], ghosts).unwrap();
    let graphs = PatchedGraphs::build(layout, Rc::new(SingleProcess), |patch| {
        Ok::<_, GraphError>(staggered(patch))
    })
    .unwrap();
    match graphs.exchange(&[u.clone(), Tag::none("nowhere")]) {
        Err(GraphError::Usage(why)) => {
            assert!(why.contains("nowhere") && why.contains("patch 0"), "{why}")
        }
        other => panic!("expected a usage error naming the tag, got {other:?}"),
    }
}

/// The reductions of the reduction test's recipe: what each computes, and
/// its parameter.
struct Reductions {
    sum: watershed_operators::Parameter,
    largest: watershed_operators::Parameter,
    smallest: watershed_operators::Parameter,
    norm: watershed_operators::Parameter,
    jumps: watershed_operators::Parameter,
}

/// A graph on `patch` reducing `phi` (see [`reducing_recipe`]).
fn reducing_graph(
    patch: &Patch,
    phi: &Tag,
    next: &Tag,
    parameters: &Reductions,
) -> Result<ExpressionGraph, GraphError> {
    let (factory, roots) = reducing_recipe(phi, next, parameters)?;
    graph_of_recipe(&factory, &roots, patch, phi)
}

/// The graph of `factory` for `roots` on `patch`, `phi` provided.
fn graph_of_recipe(
    factory: &Factory,
    roots: &[Tag],
    patch: &Patch,
    phi: &Tag,
) -> Result<ExpressionGraph, GraphError> {
    let graph = ExpressionGraph::build(factory, roots, patch, &GraphOptions::default())?;
    graph.fill_placeholder(phi)?;
    Ok(graph)
}

/// A recipe reducing `phi`: its sum, its largest and smallest value, its
/// L2 norm (a sum of squares finished by `sqrt`) and the sum of the
/// squared differences between x neighbours (which reads ghosts);
/// `next = 2 phi` keeps it executing something else. Returns the factory
/// and the roots.
fn reducing_recipe(
    phi: &Tag,
    next: &Tag,
    parameters: &Reductions,
) -> Result<(Factory, Vec<Tag>), GraphError> {
    use watershed_exprgraph::LanguageReduction;
    use watershed_operators::Reduction;
    let mut factory = Factory::new();
    factory.placeholder(phi.clone(), watershed_fields::LocationKind::CellCentre)?;
    let read = phi.clone();
    factory.register(LanguageExpression::new::<CellCentre>(
        next.clone(),
        move |s| 2.0 * s.field::<CellCentre>(&read),
    ))?;
    let mut roots = vec![next.clone()];
    let plain = [
        ("sum", &parameters.sum, Reduction::Sum),
        ("largest", &parameters.largest, Reduction::Max),
        ("smallest", &parameters.smallest, Reduction::Min),
        ("norm", &parameters.norm, Reduction::SumOfSquares),
    ];
    for (name, parameter, kind) in plain {
        let read = phi.clone();
        let mut reduction =
            LanguageReduction::new::<CellCentre>(Tag::none(name), parameter, kind, move |s| {
                s.field::<CellCentre>(&read)
            });
        if kind == Reduction::SumOfSquares {
            reduction = reduction.finishing_with(f64::sqrt);
        }
        factory.register_reduction(reduction)?;
        roots.push(Tag::none(name));
    }
    let read = phi.clone();
    factory.register_reduction(LanguageReduction::new::<CellCentre>(
        Tag::none("jumps"),
        &parameters.jumps,
        Reduction::SumOfSquares,
        move |s| {
            let phi = s.field::<CellCentre>(&read);
            watershed_operators::shift(phi.clone(), [1, 0, 0]) - phi
        },
    ))?;
    roots.push(Tag::none("jumps"));
    Ok((factory, roots))
}

#[test]
fn patched_graphs_combine_every_patchs_reduction_in_patch_order() {
    let (nx, ny) = (8, 6);
    let grid = Grid::new([nx, ny, 1], [1.0; 3], [0.0; 3])
        .unwrap()
        .with_periodic([true, true, false]);
    let h = grid.spacing();
    // Small integers: every sum is exact in any order, so every layout
    // must give the hand-written loop's bits.
    let value = |i: usize, j: usize| ((3 * i + 5 * j) % 7) as f64 - 3.0;
    let at = |x: [f64; 3]| {
        let i = (x[0] / h[0]).floor() as isize;
        let j = (x[1] / h[1]).floor() as isize;
        value(
            i.rem_euclid(nx as isize) as usize,
            j.rem_euclid(ny as isize) as usize,
        )
    };
    let (mut sum, mut largest, mut smallest, mut squares, mut jumps) =
        (0.0, f64::NEG_INFINITY, f64::INFINITY, 0.0, 0.0);
    for j in 0..ny {
        for i in 0..nx {
            let v = value(i, j);
            sum += v;
            largest = f64::max(largest, v);
            smallest = f64::min(smallest, v);
            squares += v * v;
            let jump = value((i + 1) % nx, j) - v;
            jumps += jump * jump;
        }
    }
    let phi = Tag::none("phi");
    let next = Tag::none("next");
    let parameters = Reductions {
        sum: watershed_operators::Parameter::new("sum", f64::NAN),
        largest: watershed_operators::Parameter::new("largest", f64::NAN),
        smallest: watershed_operators::Parameter::new("smallest", f64::NAN),
        norm: watershed_operators::Parameter::new("norm", f64::NAN),
        jumps: watershed_operators::Parameter::new("jumps", f64::NAN),
    };
    // The patches' graphs built from a recipe each, or all from one
    // factory (each graph must keep its own partial results).
    let (shared, roots) = reducing_recipe(&phi, &next, &parameters).unwrap();
    for counts in [[1, 1, 1], [2, 1, 1], [2, 3, 1], [4, 2, 1]] {
        for (overlapped, one_factory) in
            [(false, false), (true, false), (false, true), (true, true)]
        {
            let layout = PatchLayout::new(&grid, counts, GhostWidth::uniform(1)).unwrap();
            let graphs = PatchedGraphs::build(layout, Rc::new(SingleProcess), |patch| {
                if one_factory {
                    graph_of_recipe(&shared, &roots, patch, &phi)
                } else {
                    reducing_graph(patch, &phi, &next, &parameters)
                }
            })
            .unwrap();
            // `at` wraps the periodic axes: every ghost right. On several
            // patches the ghosts are then spoilt, so that the jumps must
            // read what the exchange brings.
            graphs.set_field::<CellCentre>(&phi, at).unwrap();
            let spoilt = if graphs.layout().len() > 1 {
                graphs.graphs()
            } else {
                &[]
            };
            for graph in spoilt {
                graph
                    .with_field_mut::<CellCentre, _>(&phi, |f| -> Result<(), GraphError> {
                        let layout = f.layout().clone();
                        let values = f.values_mut()?;
                        for p in layout.allocated().iter() {
                            if !layout.interior().contains(p) {
                                values[layout.linear_index(p)] = 1.0e3;
                            }
                        }
                        Ok(())
                    })
                    .unwrap()
                    .unwrap();
            }
            for parameter in [
                &parameters.sum,
                &parameters.largest,
                &parameters.smallest,
                &parameters.norm,
                &parameters.jumps,
            ] {
                parameter.set(f64::NAN);
            }
            if overlapped {
                graphs
                    .exchange_and_execute(std::slice::from_ref(&phi), ExecutionMode::Serial)
                    .unwrap();
            } else {
                graphs.exchange(std::slice::from_ref(&phi)).unwrap();
                graphs.execute(ExecutionMode::Serial).unwrap();
            }
            let case = format!("{counts:?}, overlapped {overlapped}, one factory {one_factory}");
            assert_eq!(parameters.sum.get(), sum, "{case}");
            assert_eq!(parameters.largest.get(), largest, "{case}");
            assert_eq!(parameters.smallest.get(), smallest, "{case}");
            assert_eq!(parameters.norm.get(), squares.sqrt(), "{case}");
            assert_eq!(parameters.jumps.get(), jumps, "{case}");
        }
    }
}

#[test]
fn patched_graphs_refuse_a_reduction_read_in_the_same_graph() {
    let grid = Grid::new([8, 6, 1], [1.0; 3], [0.0; 3])
        .unwrap()
        .with_periodic([true, true, false]);
    let total = watershed_operators::Parameter::new("sum of phi", 0.0);
    let (phi, scaled) = (Tag::none("phi"), Tag::none("phi / sum"));
    let recipe = |patch: &Patch| {
        let mut factory = Factory::new();
        factory
            .placeholder(phi.clone(), watershed_fields::LocationKind::CellCentre)
            .unwrap();
        let read = phi.clone();
        factory
            .register_reduction(watershed_exprgraph::LanguageReduction::new::<CellCentre>(
                Tag::none("sum of phi"),
                &total,
                watershed_operators::Reduction::Sum,
                move |s| s.field::<CellCentre>(&read),
            ))
            .unwrap();
        let (read, sum) = (phi.clone(), total.clone());
        factory
            .register(LanguageExpression::new::<CellCentre>(
                scaled.clone(),
                move |s| s.field::<CellCentre>(&read) / sum.expr(),
            ))
            .unwrap();
        let options = GraphOptions {
            persistent: vec![scaled.clone()],
            ..GraphOptions::default()
        };
        let graph =
            ExpressionGraph::build(&factory, std::slice::from_ref(&scaled), patch, &options)?;
        graph.fill_placeholder(&phi)?;
        Ok::<_, GraphError>(graph)
    };
    let split = PatchLayout::new(&grid, [2, 1, 1], GhostWidth::uniform(1)).unwrap();
    match PatchedGraphs::build(split, Rc::new(SingleProcess), recipe) {
        Err(GraphError::Usage(why)) => {
            assert!(why.contains("patch 0"), "{why}");
            assert!(why.contains("sum of phi"), "{why}");
            assert!(why.contains("phi / sum"), "{why}");
            assert!(why.contains("on 2 patches"), "{why}");
        }
        other => {
            panic!("expected a usage error naming the reduction and its reader, got {other:?}")
        }
    }
    // On one patch the reduction sees the whole domain: accepted.
    let whole = PatchLayout::new(&grid, [1, 1, 1], GhostWidth::uniform(1)).unwrap();
    let graphs = PatchedGraphs::build(whole, Rc::new(SingleProcess), recipe).unwrap();
    graphs.set_field::<CellCentre>(&phi, |_| 0.5).unwrap();
    graphs.execute(ExecutionMode::Serial).unwrap();
    assert_eq!(total.get(), 0.5 * 48.0);
    let first = graphs.graphs()[0]
        .with_field::<CellCentre, _>(&scaled, |f| {
            f.values().map(|v| v[f.layout().linear_index([0, 0, 0])])
        })
        .unwrap()
        .unwrap();
    assert_eq!(first, 0.5 / 24.0);
}
