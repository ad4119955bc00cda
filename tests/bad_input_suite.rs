//! The bad-input suite: well over 150 inputs a new user or an adversarial
//! tester could give, from the API or from a file, each classified by what
//! Watershed does with it. The bar is that every one is refused with an
//! error that names the thing at fault: no panic, no crash, no hang, no
//! silently wrong `Ok`, no data lost. Each case states a word its message
//! must contain; the test prints the counts per area and per outcome.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use watershed::exprgraph::{
    ExecutionMode, ExpressionGraph, Factory, GraphOptions, LanguageExpression, NativeExpression,
    Tag,
};
use watershed::fields::io::{GhostSelection, read_field_from_file, write_field_to_file};
use watershed::fields::{
    CellCentre, Device, ExternalBuffer, GhostWidth, Grid, LocationKind, Patch, SpatialField, XFace,
    YFace, ZFace,
};
use watershed::operators::{
    Assign, AssignOptions, Expr, Region, coordinate, derivative, field, interior_sum, laplacian,
    sum,
};
use watershed::solvers::{
    BoundaryCondition, BoundaryConditions, ConvectiveScheme, Diffusivity,
    IncompressibleFlowBuilder, Multigrid, MultigridOptions, TimeStep, TransportEquation,
    TransportSolverBuilder,
};

/// What Watershed did with a bad input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    /// An error whose message names the thing at fault.
    Refused,
    /// An error whose message lacks the expected word.
    VagueError,
    /// `Ok` where the input cannot be right.
    SilentOk,
    /// A panic.
    Panic,
}

struct Case {
    area: &'static str,
    what: String,
    /// A word the error message must contain.
    word: String,
    run: Box<dyn FnOnce() -> Result<(), String>>,
}

fn case(
    cases: &mut Vec<Case>,
    area: &'static str,
    what: impl Into<String>,
    word: impl Into<String>,
    run: impl FnOnce() -> Result<(), String> + 'static,
) {
    cases.push(Case {
        area,
        what: what.into(),
        word: word.into(),
        run: Box::new(run),
    });
}

fn err<T, E: std::fmt::Display>(r: Result<T, E>) -> Result<(), String> {
    r.map(drop).map_err(|e| e.to_string())
}

fn grid(cells: [usize; 3]) -> Grid {
    Grid::new(cells, [1.0; 3], [0.0; 3]).unwrap()
}

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("watershed-bad-input-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn fields_cases(cases: &mut Vec<Case>) {
    let axes = ["x", "y", "z"];
    for axis in 0..3 {
        let mut cells = [4; 3];
        cells[axis] = 0;
        case(
            cases,
            "fields",
            format!("0 cells on {}", axes[axis]),
            "0",
            move || err(Grid::new(cells, [1.0; 3], [0.0; 3])),
        );
        for (label, length) in [
            ("zero", 0.0),
            ("negative", -1.0),
            ("NaN", f64::NAN),
            ("infinite", f64::INFINITY),
        ] {
            let mut lengths = [1.0; 3];
            lengths[axis] = length;
            case(
                cases,
                "fields",
                format!("{label} length on {}", axes[axis]),
                "length",
                move || err(Grid::new([4; 3], lengths, [0.0; 3])),
            );
        }
        for (label, origin) in [("NaN", f64::NAN), ("infinite", f64::NEG_INFINITY)] {
            let mut origins = [0.0; 3];
            origins[axis] = origin;
            case(
                cases,
                "fields",
                format!("{label} origin on {}", axes[axis]),
                "origin",
                move || err(Grid::new([4; 3], [1.0; 3], origins)),
            );
        }
        for length in [1e-300, 1e-160] {
            let mut lengths = [1.0; 3];
            lengths[axis] = length;
            case(
                cases,
                "fields",
                format!("spacing {length:e} on {}", axes[axis]),
                "1/h^2",
                move || err(Grid::new([8; 3], lengths, [0.0; 3])),
            );
        }
        for (label, spacing) in [("NaN", f64::NAN), ("zero", 0.0), ("negative", -0.5)] {
            let mut spacings = [0.1; 3];
            spacings[axis] = spacing;
            case(
                cases,
                "fields",
                format!("{label} spacing on {} (from_spacing)", axes[axis]),
                "spacing",
                move || err(Grid::from_spacing([4; 3], spacings, [0.0; 3])),
            );
        }
        let mut offset = [0; 3];
        offset[axis] = usize::MAX;
        case(
            cases,
            "fields",
            format!("patch offset usize::MAX on {}", axes[axis]),
            "inside the grid",
            move || {
                err(Patch::new(
                    &grid([4; 3]),
                    offset,
                    [1; 3],
                    GhostWidth::uniform(1),
                ))
            },
        );
        let mut outside = [4; 3];
        outside[axis] = 5;
        case(
            cases,
            "fields",
            format!("patch larger than the grid on {}", axes[axis]),
            "inside the grid",
            move || {
                err(Patch::new(
                    &grid([4; 3]),
                    [0; 3],
                    outside,
                    GhostWidth::uniform(1),
                ))
            },
        );
        let mut empty = [4; 3];
        empty[axis] = 0;
        case(
            cases,
            "fields",
            format!("patch with 0 cells on {}", axes[axis]),
            "inside the grid",
            move || {
                err(Patch::new(
                    &grid([4; 3]),
                    [0; 3],
                    empty,
                    GhostWidth::uniform(1),
                ))
            },
        );
    }
    for n in [(1usize << 21) - 2, 1 << 22, usize::MAX / 2] {
        case(
            cases,
            "fields",
            format!("{n}^3 cells"),
            "address",
            move || err(Grid::new([n, n, n], [1.0; 3], [0.0; 3])),
        );
    }
    for ghosts in [1usize << 40, usize::MAX / 3, usize::MAX] {
        case(
            cases,
            "fields",
            format!("{ghosts} ghost layers, cell field"),
            "address",
            move || {
                err(SpatialField::<CellCentre>::new(
                    "c",
                    &grid([64; 3]).whole_domain(ghosts),
                    Device::Cpu,
                ))
            },
        );
        case(
            cases,
            "fields",
            format!("{ghosts} ghost layers, z-face field"),
            "address",
            move || {
                err(SpatialField::<ZFace>::new(
                    "z",
                    &grid([64; 3]).whole_domain(ghosts),
                    Device::Cpu,
                ))
            },
        );
    }
    case(
        cases,
        "fields",
        "external buffer too short",
        "buffer",
        || {
            err(SpatialField::<CellCentre>::from_external(
                "ext",
                &grid([4; 3]).whole_domain(1),
                ExternalBuffer::from_vec(vec![0.0; 10]),
            ))
        },
    );
    case(
        cases,
        "fields",
        "external buffer too long",
        "buffer",
        || {
            err(SpatialField::<XFace>::from_external(
                "ext",
                &grid([4; 3]).whole_domain(1),
                ExternalBuffer::from_vec(vec![0.0; 100_000]),
            ))
        },
    );
    case(
        cases,
        "fields",
        "validate on a GPU that is not there",
        "GPU",
        || {
            let mut f =
                SpatialField::<CellCentre>::new("f", &grid([4; 3]).whole_domain(1), Device::Cpu)
                    .unwrap();
            err(f.validate_on(Device::Gpu(7)))
        },
    );
    case(
        cases,
        "fields",
        "activate a location that is not valid",
        "f",
        || {
            let mut f =
                SpatialField::<CellCentre>::new("f", &grid([4; 3]).whole_domain(1), Device::Cpu)
                    .unwrap();
            err(f.set_active(Device::Gpu(3)))
        },
    );
}

fn operators_cases(cases: &mut Vec<Case>) {
    for axis in [3usize, 4, 17, usize::MAX] {
        case(
            cases,
            "operators",
            format!("derivative along axis {axis}"),
            "axis",
            move || {
                let p = SpatialField::<CellCentre>::new(
                    "p",
                    &grid([4; 3]).whole_domain(1),
                    Device::Cpu,
                )
                .unwrap();
                let mut out = SpatialField::<CellCentre>::new(
                    "out",
                    &grid([4; 3]).whole_domain(1),
                    Device::Cpu,
                )
                .unwrap();
                err(out.assign(derivative(axis, &p)))
            },
        );
        case(
            cases,
            "operators",
            format!("coordinate {axis}"),
            "axis",
            move || {
                let mut out =
                    SpatialField::<XFace>::new("out", &grid([4; 3]).whole_domain(1), Device::Cpu)
                        .unwrap();
                err(out.assign(coordinate::<XFace>(axis) * 2.0))
            },
        );
    }
    for dims in [[8, 1, 1], [8, 8, 1], [8, 8, 8]] {
        case(
            cases,
            "operators",
            format!("Laplacian of a 0-ghost field on {dims:?}"),
            "ghost",
            move || {
                let patch = grid(dims).whole_domain(0);
                let p = SpatialField::<CellCentre>::new("p", &patch, Device::Cpu).unwrap();
                let mut out = SpatialField::<CellCentre>::new("out", &patch, Device::Cpu).unwrap();
                err(out.assign(laplacian(&p)))
            },
        );
    }
    case(
        cases,
        "operators",
        "fields on different grids",
        "patch",
        || {
            let a =
                SpatialField::<CellCentre>::new("a", &grid([4; 3]).whole_domain(1), Device::Cpu)
                    .unwrap();
            let mut out = SpatialField::<CellCentre>::new(
                "out",
                &grid([5, 4, 4]).whole_domain(1),
                Device::Cpu,
            )
            .unwrap();
            err(out.assign(field(&a) + 1.0))
        },
    );
    case(
        cases,
        "operators",
        "a patch of another offset",
        "patch",
        || {
            let g = grid([8; 3]);
            let a = SpatialField::<CellCentre>::new(
                "a",
                &Patch::new(&g, [0; 3], [4; 3], GhostWidth::uniform(1)).unwrap(),
                Device::Cpu,
            )
            .unwrap();
            let mut out = SpatialField::<CellCentre>::new(
                "out",
                &Patch::new(&g, [4, 0, 0], [4; 3], GhostWidth::uniform(1)).unwrap(),
                Device::Cpu,
            )
            .unwrap();
            err(out.assign(field(&a) * 2.0))
        },
    );
    case(
        cases,
        "operators",
        "reduction of a constant",
        "no field",
        || err(sum(Expr::<CellCentre>::constant(1.0))),
    );
    case(
        cases,
        "operators",
        "interior reduction of a constant",
        "no field",
        || err(interior_sum(Expr::<XFace>::constant(2.0))),
    );
    let sides: [(&str, [isize; 3], [isize; 3]); 6] = [
        ("-x", [-3, 0, 0], [4, 4, 4]),
        ("+x", [0, 0, 0], [7, 4, 4]),
        ("-y", [0, -2, 0], [4, 4, 4]),
        ("+y", [0, 0, 0], [4, 6, 4]),
        ("-z", [0, 0, -5], [4, 4, 4]),
        ("+z", [0, 0, 0], [4, 4, 9]),
    ];
    for (side, lo, hi) in sides {
        case(
            cases,
            "operators",
            format!("explicit region beyond the target on {side}"),
            "allocated",
            move || {
                let patch = grid([4; 3]).whole_domain(1);
                let a = SpatialField::<CellCentre>::new("a", &patch, Device::Cpu).unwrap();
                let mut out = SpatialField::<CellCentre>::new("out", &patch, Device::Cpu).unwrap();
                let options = AssignOptions {
                    region: Region::Box(watershed::fields::IndexBox::new(lo, hi)),
                    ..Default::default()
                };
                err(out.assign_with(field(&a) * 2.0, options))
            },
        );
    }
}

fn factory_with_rhs(stencil: bool) -> (Factory, Tag, Tag) {
    let (p, rhs) = (Tag::none("p"), Tag::none("rhs"));
    let mut factory = Factory::new();
    factory
        .placeholder(p.clone(), LocationKind::CellCentre)
        .unwrap();
    let p1 = p.clone();
    factory
        .register(LanguageExpression::new::<CellCentre>(
            rhs.clone(),
            move |s| {
                if stencil {
                    laplacian(s.field(&p1))
                } else {
                    s.field(&p1) * 2.0
                }
            },
        ))
        .unwrap();
    (factory, p, rhs)
}

/// The graph of [`factory_with_rhs`] built on `patch`, with its tags.
fn built(stencil: bool, patch: &Patch) -> (ExpressionGraph, Tag, Tag) {
    let (factory, p, rhs) = factory_with_rhs(stencil);
    let graph = ExpressionGraph::build(
        &factory,
        std::slice::from_ref(&rhs),
        patch,
        &GraphOptions::default(),
    )
    .unwrap();
    (graph, p, rhs)
}

fn graph_cases(cases: &mut Vec<Case>) {
    case(
        cases,
        "graph",
        "a root nobody computes",
        "nothing computes it",
        || {
            err(ExpressionGraph::build(
                &Factory::new(),
                &[Tag::none("ghost")],
                &grid([4; 3]).whole_domain(1),
                &GraphOptions::default(),
            ))
        },
    );
    case(
        cases,
        "graph",
        "two producers of a tag",
        "computed by both",
        || {
            let (mut factory, p, rhs) = factory_with_rhs(false);
            let p1 = p.clone();
            err(
                factory.register(LanguageExpression::new::<CellCentre>(rhs, move |s| {
                    s.field(&p1) + 1.0
                })),
            )
        },
    );
    case(cases, "graph", "a cycle", "cycle", || {
        let (a, b) = (Tag::none("a"), Tag::none("b"));
        let mut factory = Factory::new();
        let (a1, b1) = (a.clone(), b.clone());
        factory
            .register(LanguageExpression::new::<CellCentre>(a.clone(), move |s| {
                s.field(&b1) + 1.0
            }))
            .unwrap();
        factory
            .register(LanguageExpression::new::<CellCentre>(b.clone(), move |s| {
                s.field(&a1) + 1.0
            }))
            .unwrap();
        err(ExpressionGraph::build(
            &factory,
            &[a],
            &grid([4; 3]).whole_domain(1),
            &GraphOptions::default(),
        ))
    });
    for (label, read) in [("x faces", 0), ("y faces", 1), ("z faces", 2)] {
        case(
            cases,
            "graph",
            format!("a cell placeholder read as {label}"),
            "declared",
            move || {
                let (u, out) = (Tag::none("u"), Tag::none("out"));
                let mut factory = Factory::new();
                factory
                    .placeholder(u.clone(), LocationKind::CellCentre)
                    .unwrap();
                let u1 = u.clone();
                match read {
                    0 => factory
                        .register(LanguageExpression::new::<XFace>(out.clone(), move |s| {
                            s.field::<XFace>(&u1) * 2.0
                        })),
                    1 => factory
                        .register(LanguageExpression::new::<YFace>(out.clone(), move |s| {
                            s.field::<YFace>(&u1) * 2.0
                        })),
                    _ => factory
                        .register(LanguageExpression::new::<ZFace>(out.clone(), move |s| {
                            s.field::<ZFace>(&u1) * 2.0
                        })),
                }
                .unwrap();
                err(ExpressionGraph::build(
                    &factory,
                    &[out],
                    &grid([4; 3]).whole_domain(1),
                    &GraphOptions::default(),
                ))
            },
        );
    }
    case(
        cases,
        "graph",
        "a modifier on a misspelt tag",
        "phl",
        || {
            let (mut factory, _p, rhs) = factory_with_rhs(false);
            let typo = Tag::none("phl");
            factory
                .attach_modifier(
                    typo.clone(),
                    NativeExpression::new(
                        "bc",
                        vec![(typo, LocationKind::CellCentre)],
                        vec![],
                        |_| Ok(()),
                    ),
                )
                .unwrap();
            err(ExpressionGraph::build(
                &factory,
                &[rhs],
                &grid([4; 3]).whole_domain(1),
                &GraphOptions::default(),
            ))
        },
    );
    case(
        cases,
        "graph",
        "an unset placeholder",
        "placeholder p",
        || {
            let (graph, _p, _rhs) = built(false, &grid([4; 3]).whole_domain(1));
            err(graph.execute(ExecutionMode::Serial))
        },
    );
    for dims in [[8, 1, 1], [8, 8, 1], [8, 8, 8]] {
        case(
            cases,
            "graph",
            format!("a stencil over a 0-ghost patch {dims:?}"),
            "ghost layer",
            move || {
                let (factory, _p, rhs) = factory_with_rhs(true);
                err(ExpressionGraph::build(
                    &factory,
                    &[rhs],
                    &grid(dims).whole_domain(0),
                    &GraphOptions::default(),
                ))
            },
        );
    }
    case(
        cases,
        "graph",
        "binding a 0-ghost field read by a stencil",
        "ghost layer",
        || {
            let g = grid([6; 3]);
            let (graph, p, _rhs) = built(true, &g.whole_domain(1));
            err(graph.bind_placeholder(
                &p,
                SpatialField::<CellCentre>::new("thin", &g.whole_domain(0), Device::Cpu).unwrap(),
            ))
        },
    );
    case(
        cases,
        "graph",
        "binding a field of another location",
        "CellCentre",
        || {
            let g = grid([6; 3]);
            let (graph, p, _rhs) = built(false, &g.whole_domain(1));
            err(graph.bind_placeholder(
                &p,
                SpatialField::<XFace>::new("u", &g.whole_domain(1), Device::Cpu).unwrap(),
            ))
        },
    );
    case(
        cases,
        "graph",
        "binding a field of another grid",
        "another patch",
        || {
            let (graph, p, _rhs) = built(false, &grid([6; 3]).whole_domain(1));
            err(graph.bind_placeholder(
                &p,
                SpatialField::<CellCentre>::new("q", &grid([7; 3]).whole_domain(1), Device::Cpu)
                    .unwrap(),
            ))
        },
    );
    case(
        cases,
        "graph",
        "binding a computed tag",
        "not a placeholder",
        || {
            let g = grid([6; 3]);
            let (graph, _p, rhs) = built(false, &g.whole_domain(1));
            err(graph.bind_placeholder(
                &rhs,
                SpatialField::<CellCentre>::new("q", &g.whole_domain(1), Device::Cpu).unwrap(),
            ))
        },
    );
    for threads in [0usize, 1 << 20, usize::MAX] {
        case(
            cases,
            "graph",
            format!("Threaded({threads})"),
            "Threaded",
            move || {
                let (graph, p, _rhs) = built(false, &grid([4; 3]).whole_domain(1));
                graph.fill_placeholder(&p).unwrap();
                err(graph.execute(ExecutionMode::Threaded(threads)))
            },
        );
    }
    case(
        cases,
        "graph",
        "execute inside with_field",
        "with_field",
        || {
            let (graph, p, rhs) = built(false, &grid([4; 3]).whole_domain(1));
            graph.fill_placeholder(&p).unwrap();
            graph
                .with_field::<CellCentre, _>(&rhs, |_| err(graph.execute(ExecutionMode::Serial)))
                .map_err(|e| e.to_string())?
        },
    );
    case(
        cases,
        "graph",
        "a memory budget below the plan's peak",
        "budget",
        || {
            let (factory, _p, rhs) = factory_with_rhs(false);
            let (a, r1) = (Tag::none("a"), rhs.clone());
            let mut factory = factory;
            factory
                .register(LanguageExpression::new::<CellCentre>(a.clone(), move |s| {
                    s.field(&r1) + 1.0
                }))
                .unwrap();
            let options = GraphOptions {
                no_fusion: true,
                memory_budget: Some(1),
                ..Default::default()
            };
            err(ExpressionGraph::build(
                &factory,
                &[a],
                &grid([4; 3]).whole_domain(1),
                &options,
            ))
        },
    );
    case(
        cases,
        "graph",
        "flagging an unknown tag persistent",
        "persistent",
        || {
            let (factory, _p, rhs) = factory_with_rhs(false);
            let options = GraphOptions {
                persistent: vec![Tag::none("nope")],
                ..Default::default()
            };
            err(ExpressionGraph::build(
                &factory,
                &[rhs],
                &grid([4; 3]).whole_domain(1),
                &options,
            ))
        },
    );
    case(
        cases,
        "graph",
        "reading a field at the wrong location",
        "accessed as",
        || {
            let (graph, _p, rhs) = built(false, &grid([4; 3]).whole_domain(1));
            err(graph.with_field::<XFace, _>(&rhs, |_| ()))
        },
    );
    case(
        cases,
        "graph",
        "reading a tag the graph does not hold",
        "not part of this graph",
        || {
            let (graph, _p, _rhs) = built(false, &grid([4; 3]).whole_domain(1));
            err(graph.with_field::<CellCentre, _>(&Tag::none("other"), |_| ()))
        },
    );
    case(
        cases,
        "graph",
        "filling a computed tag as a placeholder",
        "computed",
        || {
            let (graph, _p, rhs) = built(false, &grid([4; 3]).whole_domain(1));
            err(graph.fill_placeholder(&rhs))
        },
    );
}

fn heat(ghosts: usize) -> watershed::solvers::TransportSolver {
    let solver = TransportSolverBuilder::new(&grid([16, 4, 1]).whole_domain(ghosts))
        .equation(
            TransportEquation::new("T")
                .diffusion(Diffusivity::Constant(1.0))
                .boundary_conditions(BoundaryConditions::all(BoundaryCondition::Dirichlet(0.0))),
        )
        .build()
        .unwrap();
    solver.set_initial_condition("T", |[x, _, _]| x).unwrap();
    solver
}

fn solver_cases(cases: &mut Vec<Case>) {
    let limited = |cfl, diffusion_number| TimeStep::Limited {
        cfl,
        diffusion_number,
    };
    let steps: Vec<(f64, TimeStep, &str)> = vec![
        (f64::NAN, TimeStep::Fixed(1e-4), "end_time"),
        (f64::INFINITY, TimeStep::Fixed(1e-4), "end_time"),
        (f64::NEG_INFINITY, TimeStep::Fixed(1e-4), "end_time"),
        (-0.5, TimeStep::Fixed(1e-4), "end_time"),
        (0.1, TimeStep::Fixed(f64::NAN), "Fixed"),
        (0.1, TimeStep::Fixed(f64::INFINITY), "Fixed"),
        (0.1, TimeStep::Fixed(0.0), "Fixed"),
        (0.1, TimeStep::Fixed(-1.0), "Fixed"),
        (0.1, TimeStep::Fixed(f64::MIN_POSITIVE / 4.0), "t + dt == t"),
        (0.1, limited(0.0, 0.2), "cfl"),
        (0.1, limited(-1.0, 0.2), "cfl"),
        (0.1, limited(f64::NAN, 0.2), "cfl"),
        (0.1, limited(f64::INFINITY, 0.2), "cfl"),
        (0.1, limited(0.5, 0.0), "diffusion_number"),
        (0.1, limited(0.5, -0.2), "diffusion_number"),
        (0.1, limited(0.5, f64::NAN), "diffusion_number"),
    ];
    for (end, step, word) in steps {
        case(
            cases,
            "solvers",
            format!("advance({end}, {step:?})"),
            word,
            move || {
                let mut solver = heat(1);
                if word == "t + dt == t" {
                    solver.step(1.0).map_err(|e| e.to_string())?;
                }
                err(solver.advance(end + solver.time(), step))
            },
        );
    }
    for k in [-1.0, -1e-12, f64::NAN, f64::INFINITY] {
        case(
            cases,
            "solvers",
            format!("diffusivity {k}"),
            "diffusivity",
            move || {
                err(
                    TransportSolverBuilder::new(&grid([8, 8, 1]).whole_domain(1))
                        .equation(TransportEquation::new("T").diffusion(Diffusivity::Constant(k)))
                        .build(),
                )
            },
        );
    }
    for nu in [-1.0, f64::NAN, f64::INFINITY] {
        case(
            cases,
            "solvers",
            format!("viscosity {nu}"),
            "viscosity",
            move || {
                err(IncompressibleFlowBuilder::new(&grid([8, 8, 1]).whole_domain(1), nu).build())
            },
        );
    }
    for axis in [3usize, 5, usize::MAX] {
        case(
            cases,
            "solvers",
            format!("velocity_conditions({axis})"),
            "axis",
            move || {
                err(
                    IncompressibleFlowBuilder::new(&grid([8, 8, 1]).whole_domain(1), 0.1)
                        .velocity_conditions(axis, BoundaryConditions::new())
                        .build(),
                )
            },
        );
    }
    for force in [f64::NAN, f64::INFINITY] {
        case(
            cases,
            "solvers",
            format!("body force {force}"),
            "body force",
            move || {
                err(
                    IncompressibleFlowBuilder::new(&grid([8, 8, 1]).whole_domain(1), 0.1)
                        .body_force([0.0, force, 0.0])
                        .build(),
                )
            },
        );
    }
    case(
        cases,
        "solvers",
        "a flow on a 0-ghost patch",
        "ghost",
        || err(IncompressibleFlowBuilder::new(&grid([8, 8, 1]).whole_domain(0), 0.1).build()),
    );
    case(cases, "solvers", "a flow on a 1D grid", "2D or 3D", || {
        err(IncompressibleFlowBuilder::new(&grid([8, 1, 1]).whole_domain(1), 0.1).build())
    });
    case(
        cases,
        "solvers",
        "a limited scheme with 1 ghost layer",
        "ghost layer",
        || {
            let velocity = [Tag::none("u"), Tag::none("v"), Tag::none("w")];
            let mut builder = TransportSolverBuilder::new(&grid([16, 4, 1]).whole_domain(1))
                .equation(TransportEquation::new("Y").convection(
                    velocity.clone(),
                    ConvectiveScheme::Limited(watershed::operators::Limiter::Superbee),
                ));
            builder
                .factory_mut()
                .placeholder(velocity[0].clone(), LocationKind::XFace)
                .unwrap();
            builder
                .factory_mut()
                .placeholder(velocity[1].clone(), LocationKind::YFace)
                .unwrap();
            err(builder.build())
        },
    );
    case(
        cases,
        "solvers",
        "a diffusion equation on a 0-ghost patch",
        "ghost layer",
        || {
            err(
                TransportSolverBuilder::new(&grid([16, 4, 1]).whole_domain(0))
                    .equation(TransportEquation::new("T").diffusion(Diffusivity::Constant(1.0)))
                    .build(),
            )
        },
    );
    case(
        cases,
        "solvers",
        "a solver without equations",
        "no equation",
        || err(TransportSolverBuilder::new(&grid([16, 4, 1]).whole_domain(1)).build()),
    );
    case(
        cases,
        "solvers",
        "an unknown equation name",
        "no such equation",
        || err(heat(1).set_initial_condition("Q", |_| 0.0)),
    );
    case(
        cases,
        "solvers",
        "a NaN initial condition",
        "initial condition",
        || {
            let mut solver = heat(1);
            solver
                .set_initial_condition("T", |[x, _, _]| if x > 0.5 { f64::NAN } else { 0.0 })
                .unwrap();
            err(solver.step(1e-4))
        },
    );
    case(
        cases,
        "solvers",
        "an unstable time step",
        "reduce the time step",
        || {
            let mut solver = heat(1);
            for _ in 0..400 {
                solver.step(0.2).map_err(|e| e.to_string())?;
            }
            Ok(())
        },
    );
    let options = [
        (
            "weight NaN",
            MultigridOptions {
                weight: f64::NAN,
                ..Default::default()
            },
            "weight",
        ),
        (
            "weight 0",
            MultigridOptions {
                weight: 0.0,
                ..Default::default()
            },
            "weight",
        ),
        (
            "weight 1.2",
            MultigridOptions {
                weight: 1.2,
                ..Default::default()
            },
            "weight",
        ),
        (
            "weight -0.8",
            MultigridOptions {
                weight: -0.8,
                ..Default::default()
            },
            "weight",
        ),
        (
            "no smoothing",
            MultigridOptions {
                pre_smoothing: 0,
                post_smoothing: 0,
                ..Default::default()
            },
            "smoothing",
        ),
        (
            "no coarse sweeps",
            MultigridOptions {
                coarsest_sweeps: 0,
                ..Default::default()
            },
            "coarsest_sweeps",
        ),
        (
            "tolerance NaN",
            MultigridOptions {
                relative_tolerance: f64::NAN,
                ..Default::default()
            },
            "relative_tolerance",
        ),
        (
            "tolerance 0",
            MultigridOptions {
                relative_tolerance: 0.0,
                ..Default::default()
            },
            "relative_tolerance",
        ),
        (
            "no iterations",
            MultigridOptions {
                max_iterations: 0,
                ..Default::default()
            },
            "max_iterations",
        ),
    ];
    let walls = || BoundaryConditions::all(BoundaryCondition::Dirichlet(0.0));
    for (label, options, word) in options {
        case(
            cases,
            "solvers",
            format!("multigrid {label}"),
            word,
            move || {
                err(Multigrid::new(
                    &grid([16, 16, 1]).whole_domain(1),
                    walls(),
                    options,
                ))
            },
        );
    }
    case(
        cases,
        "solvers",
        "multigrid on one cell",
        "more than one cell",
        move || {
            err(Multigrid::new(
                &grid([1, 1, 1]).whole_domain(1),
                walls(),
                MultigridOptions::default(),
            ))
        },
    );
    case(
        cases,
        "solvers",
        "multigrid side without a condition",
        "no boundary condition",
        || {
            err(Multigrid::new(
                &grid([16, 16, 1]).whole_domain(1),
                BoundaryConditions::new(),
                MultigridOptions::default(),
            ))
        },
    );
    for cells in [[8, 8, 1], [32, 32, 1], [16, 8, 1], [16, 16, 2]] {
        case(
            cases,
            "solvers",
            format!("multigrid right-hand side on {cells:?}"),
            "right-hand side",
            move || {
                let patch = grid([16, 16, 1]).whole_domain(1);
                let mut mg = Multigrid::new(&patch, walls(), MultigridOptions::default()).unwrap();
                let rhs =
                    SpatialField::<CellCentre>::new("b", &grid(cells).whole_domain(1), Device::Cpu)
                        .unwrap();
                let mut x = SpatialField::<CellCentre>::new("x", &patch, Device::Cpu).unwrap();
                err(mg.solve(&rhs, &mut x))
            },
        );
    }
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        case(
            cases,
            "solvers",
            format!("multigrid right-hand side holding {bad}"),
            "not finite",
            move || {
                let patch = grid([16, 16, 1]).whole_domain(1);
                let mut mg = Multigrid::new(&patch, walls(), MultigridOptions::default()).unwrap();
                let mut rhs = SpatialField::<CellCentre>::new("b", &patch, Device::Cpu).unwrap();
                rhs.fill(bad).unwrap();
                let mut x = SpatialField::<CellCentre>::new("x", &patch, Device::Cpu).unwrap();
                err(mg.solve_preconditioned_cg(&rhs, &mut x))
            },
        );
    }
    for side in watershed::operators::Side::ALL {
        case(
            cases,
            "solvers",
            format!("Dirichlet on {} without ghost layers", side.name()),
            "0 ghost layers",
            move || {
                let mut f = SpatialField::<CellCentre>::new(
                    "T",
                    &grid([4, 4, 4]).whole_domain(0),
                    Device::Cpu,
                )
                .unwrap();
                err(BoundaryConditions::new()
                    .with(side, BoundaryCondition::Dirichlet(1.0))
                    .apply(&mut f))
            },
        );
    }
    case(
        cases,
        "solvers",
        "a periodic condition on a non-periodic grid",
        "periodic",
        || {
            let mut f =
                SpatialField::<CellCentre>::new("T", &grid([4, 4, 4]).whole_domain(1), Device::Cpu)
                    .unwrap();
            err(BoundaryConditions::new()
                .with(
                    watershed::operators::Side::MINUS_X,
                    BoundaryCondition::Periodic,
                )
                .apply(&mut f))
        },
    );
    case(
        cases,
        "solvers",
        "a flux condition with zero diffusivity",
        "diffusivity",
        || {
            let mut f =
                SpatialField::<CellCentre>::new("T", &grid([4, 4, 4]).whole_domain(1), Device::Cpu)
                    .unwrap();
            err(BoundaryConditions::new()
                .with(
                    watershed::operators::Side::PLUS_Y,
                    BoundaryCondition::Flux {
                        flux: 1.0,
                        diffusivity: 0.0,
                    },
                )
                .apply(&mut f))
        },
    );
    case(
        cases,
        "solvers",
        "more ghost layers than interior cells",
        "ghost layers",
        || {
            let mut f =
                SpatialField::<CellCentre>::new("T", &grid([2, 4, 4]).whole_domain(3), Device::Cpu)
                    .unwrap();
            err(BoundaryConditions::all(BoundaryCondition::Neumann(0.0)).apply(&mut f))
        },
    );
}

fn sample() -> SpatialField<CellCentre> {
    let mut f =
        SpatialField::<CellCentre>::new("phi", &grid([5, 4, 3]).whole_domain(1), Device::Cpu)
            .unwrap();
    f.fill(1.5).unwrap();
    f
}

fn hdf5_cases(cases: &mut Vec<Case>) {
    for (label, name, word) in [
        ("an empty dataset name", "", "non-empty"),
        ("a name of slashes", "//", "non-empty"),
        ("a name with NUL", "a\0b", "NUL"),
        ("a NUL-only name", "\0", "NUL"),
    ] {
        case(cases, "hdf5", label, word, move || {
            err(write_field_to_file(
                temp(&format!("names-{}.h5", label.len())),
                name,
                &sample(),
                GhostSelection::Interior,
            ))
        });
    }
    case(
        cases,
        "hdf5",
        "a dataset name that exists",
        "already exists",
        || {
            let path = temp("exists.h5");
            let _ = std::fs::remove_file(&path);
            write_field_to_file(&path, "phi", &sample(), GhostSelection::Interior).unwrap();
            err(write_field_to_file(
                &path,
                "phi",
                &sample(),
                GhostSelection::Interior,
            ))
        },
    );
    case(
        cases,
        "hdf5",
        "a nested name that exists",
        "already exists",
        || {
            let path = temp("nested.h5");
            let _ = std::fs::remove_file(&path);
            write_field_to_file(&path, "phi", &sample(), GhostSelection::Interior).unwrap();
            err(write_field_to_file(
                &path,
                "/phi",
                &sample(),
                GhostSelection::Interior,
            ))
        },
    );
    case(cases, "hdf5", "an f64 dataset read as f32", "f32", || {
        let path = temp("types.h5");
        let _ = std::fs::remove_file(&path);
        write_field_to_file(&path, "phi", &sample(), GhostSelection::WithGhosts).unwrap();
        err(read_field_from_file::<CellCentre, f32>(&path, "phi"))
    });
    case(
        cases,
        "hdf5",
        "a cell dataset read as x faces",
        "XFace",
        || {
            let path = temp("location.h5");
            let _ = std::fs::remove_file(&path);
            write_field_to_file(&path, "phi", &sample(), GhostSelection::Interior).unwrap();
            err(read_field_from_file::<XFace, f64>(&path, "phi"))
        },
    );
    case(cases, "hdf5", "a missing file", "missing.h5", || {
        err(read_field_from_file::<CellCentre, f64>(
            temp("missing.h5"),
            "phi",
        ))
    });
    case(cases, "hdf5", "a missing dataset", "nope", || {
        let path = temp("dataset.h5");
        let _ = std::fs::remove_file(&path);
        write_field_to_file(&path, "phi", &sample(), GhostSelection::Interior).unwrap();
        err(read_field_from_file::<CellCentre, f64>(&path, "nope"))
    });
    for (label, bytes) in [
        ("an empty file", Vec::new()),
        ("a text file", b"not an HDF5 file at all\n".repeat(40)),
        (
            "random bytes",
            (0..4096u32)
                .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
                .collect(),
        ),
    ] {
        let first = bytes.clone();
        case(
            cases,
            "hdf5",
            format!("reading {label}"),
            "HDF5",
            move || {
                let path = temp(&format!("junk-{}.h5", first.len()));
                std::fs::write(&path, &first).unwrap();
                err(read_field_from_file::<CellCentre, f64>(&path, "phi"))
            },
        );
        case(
            cases,
            "hdf5",
            format!("appending to {label}"),
            "HDF5",
            move || {
                let path = temp(&format!("junk-append-{}.h5", bytes.len()));
                std::fs::write(&path, &bytes).unwrap();
                let result = err(write_field_to_file(
                    &path,
                    "phi",
                    &sample(),
                    GhostSelection::Interior,
                ));
                // The bad file is left as it was, not replaced by a new one.
                if std::fs::read(&path).unwrap() != bytes {
                    return Ok(()); // counted as a silent Ok: data was replaced
                }
                result
            },
        );
    }
    for keep in [64usize, 512, 2048] {
        case(
            cases,
            "hdf5",
            format!("a file truncated to {keep} bytes"),
            "HDF5",
            move || {
                let path = temp(&format!("truncated-{keep}.h5"));
                let _ = std::fs::remove_file(&path);
                write_field_to_file(&path, "phi", &sample(), GhostSelection::Interior).unwrap();
                let bytes = std::fs::read(&path).unwrap();
                std::fs::write(&path, &bytes[..keep.min(bytes.len() / 2)]).unwrap();
                err(read_field_from_file::<CellCentre, f64>(&path, "phi"))
            },
        );
    }
    case(cases, "hdf5", "a corrupted value", "phi", || {
        let path = temp("corrupt.h5");
        let _ = std::fs::remove_file(&path);
        let mut f = sample();
        f.fill(98765.4321).unwrap();
        write_field_to_file(&path, "phi", &f, GhostSelection::Interior).unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        let at = bytes
            .windows(8)
            .position(|w| w == 98765.4321f64.to_le_bytes())
            .unwrap();
        bytes[at] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        err(read_field_from_file::<CellCentre, f64>(&path, "phi"))
    });
    case(cases, "hdf5", "writing to a directory path", "dir", || {
        let path = temp("a-dir");
        std::fs::create_dir_all(&path).unwrap();
        err(write_field_to_file(
            &path,
            "phi",
            &sample(),
            GhostSelection::Interior,
        ))
    });
    case(
        cases,
        "hdf5",
        "writing into a missing directory",
        "no-such-dir",
        || {
            err(write_field_to_file(
                temp("no-such-dir/x.h5"),
                "phi",
                &sample(),
                GhostSelection::Interior,
            ))
        },
    );
}

#[test]
fn every_bad_input_is_refused_with_a_clear_error() {
    let mut cases = Vec::new();
    fields_cases(&mut cases);
    operators_cases(&mut cases);
    graph_cases(&mut cases);
    solver_cases(&mut cases);
    hdf5_cases(&mut cases);
    assert!(cases.len() >= 150, "only {} cases", cases.len());

    let previous_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut results = Vec::new();
    for case in cases {
        let outcome = match catch_unwind(AssertUnwindSafe(case.run)) {
            Err(_) => (Outcome::Panic, String::new()),
            Ok(Ok(())) => (Outcome::SilentOk, String::new()),
            Ok(Err(message)) if message.contains(&case.word) => (Outcome::Refused, message),
            Ok(Err(message)) => (Outcome::VagueError, message),
        };
        results.push((case.area, case.what, case.word, outcome));
    }
    std::panic::set_hook(previous_hook);
    // The HDF5 cases' files (each case created what it needed).
    let _ = std::fs::remove_dir_all(
        std::env::temp_dir().join(format!("watershed-bad-input-{}", std::process::id())),
    );

    let mut counts = std::collections::BTreeMap::<(&str, Outcome), usize>::new();
    for (area, _, _, (outcome, _)) in &results {
        *counts.entry((area, *outcome)).or_default() += 1;
    }
    println!("bad-input suite: {} cases", results.len());
    for ((area, outcome), n) in &counts {
        println!("  {area:<10} {outcome:?}: {n}");
    }
    let failures: Vec<String> = results
        .iter()
        .filter(|(_, _, _, (o, _))| *o != Outcome::Refused)
        .map(|(area, what, word, (o, m))| format!("{area}: {what}: {o:?} (wanted '{word}'): {m}"))
        .collect();
    let refused = results.len() - failures.len();
    println!(
        "refused with a clear error: {refused}; anything else: {}",
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
