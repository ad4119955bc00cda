//! A graph executed in two halves around an exchange of its state's ghost
//! layers (`execute_interior`, then the ghosts, then `execute_rim`) gives
//! the bits of one whole execution, and its first half reads no ghost of
//! the exchanged field: the ghosts hold NaN while it runs.

use watershed_exprgraph::overlap::{NodeSplit, OverlapPlan};
use watershed_exprgraph::{
    ExecutionMode, ExpressionGraph, Factory, GraphError, GraphOptions, LanguageExpression,
    LanguageModifier, Tag,
};
use watershed_fields::{CellCentre, Grid, IndexBox, LocationKind, SpatialField, XFace};
use watershed_operators::{Expr, div, divergence, grad, interp, interpolate_to_face, shift};

struct Tags {
    phi: Tag,
    gamma: Tag,
    lap: Tag,
    next: Tag,
}

fn tags() -> Tags {
    Tags {
        phi: Tag::none("phi"),
        gamma: Tag::none("gamma"),
        lap: Tag::none("lap"),
        next: Tag::none("next"),
    }
}

/// `next = phi + 0.01 (div(interp(gamma) grad(phi)) - div(0.7 phi_x))`
/// through a scratch `lap`, with a zero-gradient condition on `next`'s -x
/// ghosts and a Dirichlet-like one on its +y ghosts.
fn factory(t: &Tags) -> Factory {
    let mut factory = Factory::new();
    factory
        .placeholder(t.phi.clone(), LocationKind::CellCentre)
        .unwrap();
    factory
        .placeholder(t.gamma.clone(), LocationKind::CellCentre)
        .unwrap();
    let (phi, gamma) = (t.phi.clone(), t.gamma.clone());
    factory
        .register(LanguageExpression::new::<CellCentre>(
            t.lap.clone(),
            move |s| div(interp(s.field::<CellCentre>(&gamma)) * grad(s.field::<CellCentre>(&phi))),
        ))
        .unwrap();
    let (phi, lap) = (t.phi.clone(), t.lap.clone());
    factory
        .register(LanguageExpression::new::<CellCentre>(
            t.next.clone(),
            move |s| {
                let p = s.field::<CellCentre>(&phi);
                let advection = divergence(interpolate_to_face::<XFace>(p.clone()) * 0.7);
                p + (s.field::<CellCentre>(&lap) - advection) * 0.01
            },
        ))
        .unwrap();
    let id = t.next.id();
    factory
        .attach_modifier(
            t.next.clone(),
            LanguageModifier::new(
                "walls of next",
                t.next.clone(),
                LocationKind::CellCentre,
                move |layout| {
                    let mut west = layout.allocated();
                    west.hi[0] = 0;
                    let mut north = layout.allocated();
                    north.lo[1] = layout.interior().hi[1];
                    let inside = shift(Expr::<CellCentre>::symbol(id, "next"), [1, 0, 0]);
                    let mirrored = Expr::<CellCentre>::constant(2.0)
                        - shift(Expr::<CellCentre>::symbol(id, "next"), [0, -1, 0]);
                    Ok(vec![
                        (west, inside.node().clone()),
                        (north, mirrored.node().clone()),
                    ])
                },
            ),
        )
        .unwrap();
    factory
}

fn value(g: [isize; 3], which: u64) -> f64 {
    let (x, y, z) = (g[0] as f64 * 0.37, g[1] as f64 * 0.53, g[2] as f64 * 0.29);
    match which {
        0 => (x + 0.2).sin() * (y - 0.4).cos() + 0.1 * z * z,
        _ => 1.0 + 0.3 * (x * y + z).cos(),
    }
}

/// Every allocated point of `field` from `value`, ghosts included.
fn fill(field: &mut SpatialField<CellCentre>, which: u64) {
    let layout = field.layout().clone();
    let data = field.values_mut().unwrap();
    for p in layout.allocated().iter() {
        data[layout.linear_index(p)] = value(p, which);
    }
}

/// `field`'s ghost points (allocated, not interior) set to `v`.
fn set_ghosts(field: &mut SpatialField<CellCentre>, v: Option<f64>) {
    set_ghosts_along(field, v, [true; 3]);
}

/// [`set_ghosts`] for the ghost points beyond the interior along the
/// axes `along` marks.
fn set_ghosts_along(field: &mut SpatialField<CellCentre>, v: Option<f64>, along: [bool; 3]) {
    let layout = field.layout().clone();
    let interior = layout.interior();
    let data = field.values_mut().unwrap();
    for p in layout.allocated().iter() {
        if (0..3).any(|a| along[a] && (p[a] < interior.lo[a] || p[a] >= interior.hi[a])) {
            data[layout.linear_index(p)] = v.unwrap_or_else(|| value(p, 0));
        }
    }
}

fn graph(t: &Tags, options: &GraphOptions) -> ExpressionGraph {
    let patch = Grid::new([12, 10, 8], [1.0; 3], [0.0; 3])
        .unwrap()
        .whole_domain(1);
    let graph = ExpressionGraph::build(&factory(t), std::slice::from_ref(&t.next), &patch, options)
        .unwrap();
    graph
        .with_field_mut::<CellCentre, _>(&t.phi, |f| fill(f, 0))
        .unwrap();
    graph
        .with_field_mut::<CellCentre, _>(&t.gamma, |f| fill(f, 1))
        .unwrap();
    graph
}

fn next_values(graph: &ExpressionGraph, t: &Tags) -> Vec<f64> {
    graph
        .with_field::<CellCentre, _>(&t.next, |f| f.values().unwrap().to_vec())
        .unwrap()
}

/// The clean boxes of the split nodes, in the plan's node order.
fn clean_boxes(overlap: &OverlapPlan) -> Vec<IndexBox> {
    overlap
        .nodes()
        .iter()
        .filter_map(|s| match s {
            NodeSplit::Split { clean, .. } => Some(*clean),
            NodeSplit::Deferred => None,
        })
        .collect()
}

#[test]
fn two_halves_around_the_ghosts_give_one_executions_bits() {
    let t = tags();
    for fused in [true, false] {
        for mode in [ExecutionMode::Serial, ExecutionMode::Threaded(2)] {
            let options = GraphOptions {
                no_fusion: !fused,
                ..Default::default()
            };
            let whole = graph(&t, &options);
            whole.execute(mode).unwrap();
            let split = graph(&t, &options);
            let overlap = split.overlap_plan(std::slice::from_ref(&t.phi)).unwrap();
            assert!(overlap.split_nodes() >= 1, "fused {fused}: nothing split");
            // 10 x 8 x 6 of 12 x 10 x 8 cells read no ghost (one layer).
            assert!(
                overlap.clean_share() > 0.4,
                "share {}",
                overlap.clean_share()
            );
            for round in 0..2 {
                split
                    .with_field_mut::<CellCentre, _>(&t.phi, |f| set_ghosts(f, Some(f64::NAN)))
                    .unwrap();
                split.execute_interior(mode, &overlap).unwrap();
                split
                    .with_field_mut::<CellCentre, _>(&t.phi, |f| set_ghosts(f, None))
                    .unwrap();
                split.execute_rim(mode, &overlap).unwrap();
                let (a, b) = (next_values(&whole, &t), next_values(&split, &t));
                assert!(
                    a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
                    "fused {fused}, {mode:?}, round {round}: the halves differ from one execution"
                );
                assert!(
                    b.iter().all(|v| v.is_finite()),
                    "a ghost was read by the first half"
                );
            }
        }
    }
}

#[test]
fn the_laplacian_is_split_one_layer_inside_and_its_update_waits_for_the_walls() {
    let t = tags();
    let options = GraphOptions {
        no_fusion: true,
        ..Default::default()
    };
    let g = graph(&t, &options);
    let overlap = g.overlap_plan(std::slice::from_ref(&t.phi)).unwrap();
    // lap: interior 12 x 10 x 8 shrunk by one on every side (its stencil
    // reaches one neighbour); next: also split, one more layer along x for
    // its interpolation to faces, and the walls after its rim.
    let cleans = clean_boxes(&overlap);
    assert!(
        cleans.contains(&IndexBox::new([1, 1, 1], [11, 9, 7])),
        "{cleans:?}"
    );
    assert_eq!(cleans.len(), 2, "{:?}", overlap.nodes());
}

#[test]
fn misuse_of_the_halves_is_refused_by_name() {
    let t = tags();
    let g = graph(&t, &GraphOptions::default());
    let overlap = g.overlap_plan(std::slice::from_ref(&t.phi)).unwrap();
    let error = g.execute_rim(ExecutionMode::Serial, &overlap).unwrap_err();
    assert!(
        matches!(&error, GraphError::Usage(m) if m.contains("execute_interior")),
        "{error}"
    );
    // An execution in between computes everything and ends the split.
    g.execute_interior(ExecutionMode::Serial, &overlap).unwrap();
    g.execute(ExecutionMode::Serial).unwrap();
    assert!(matches!(
        g.execute_rim(ExecutionMode::Serial, &overlap),
        Err(GraphError::Usage(_))
    ));
    let error = g.overlap_plan(std::slice::from_ref(&t.next)).unwrap_err();
    assert!(
        matches!(&error, GraphError::Usage(m) if m.contains("next") && m.contains("placeholder")),
        "{error}"
    );
    let error = g.overlap_plan(&[Tag::none("nowhere")]).unwrap_err();
    assert!(
        matches!(&error, GraphError::UnknownTag { tag, .. } if &*tag.name == "nowhere"),
        "{error}"
    );
    let other = graph(
        &t,
        &GraphOptions {
            no_fusion: true,
            ..Default::default()
        },
    );
    let foreign = other.overlap_plan(std::slice::from_ref(&t.phi)).unwrap();
    let error = g
        .execute_interior(ExecutionMode::Serial, &foreign)
        .unwrap_err();
    assert!(
        matches!(&error, GraphError::Usage(m) if m.contains("overlap plan has")),
        "{error}"
    );
}

#[test]
fn ghosts_valid_on_unexchanged_sides_let_whole_rows_run_first() {
    let t = tags();
    let options = GraphOptions {
        no_fusion: true,
        ..Default::default()
    };
    let whole = graph(&t, &options);
    whole.execute(ExecutionMode::Serial).unwrap();
    let split = graph(&t, &options);
    // Only the y sides are exchanged: x and z ghosts hold their values.
    let sides = [[false, false], [true, true], [false, false]];
    let overlap = split
        .overlap_plan_with_sides(std::slice::from_ref(&t.phi), sides)
        .unwrap();
    let cleans = clean_boxes(&overlap);
    // The Laplacian's clean box spans its whole rows and z range.
    assert!(
        cleans.contains(&IndexBox::new([0, 1, 0], [12, 9, 8])),
        "{cleans:?}"
    );
    split
        .with_field_mut::<CellCentre, _>(&t.phi, |f| {
            set_ghosts_along(f, Some(f64::NAN), [false, true, false])
        })
        .unwrap();
    split
        .execute_interior(ExecutionMode::Serial, &overlap)
        .unwrap();
    split
        .with_field_mut::<CellCentre, _>(&t.phi, |f| set_ghosts(f, None))
        .unwrap();
    split.execute_rim(ExecutionMode::Serial, &overlap).unwrap();
    let (a, b) = (next_values(&whole, &t), next_values(&split, &t));
    assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
}
