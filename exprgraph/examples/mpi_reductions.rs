//! Reductions of graphs on patches across MPI ranks, checked on every
//! rank: run with `mpirun -np N` (N = 1, 2, 4; `scripts/test.sh` does).
//! Every rank builds the same recipe's graphs on a patch layout twice:
//! alone (one process owning every patch) and spread over the ranks
//! (owning its share), exchanges the ghosts, executes, and compares each
//! reduction's parameter ([`PatchedGraphs::execute`] combines the
//! patches' partial results in patch order). The sums of values that are
//! not small integers depend on the order they are added in, so equal
//! bits show that the rank count does not change it; the largest and
//! smallest values must also equal a hand-written loop over the whole
//! domain. Exits 1 naming the rank, layout and reduction on the first
//! difference (`MPI_Abort` ends every rank).

use mpi::traits::Communicator;
use std::rc::Rc;
use watershed_exprgraph::patched::PatchedGraphs;
use watershed_exprgraph::{
    ExecutionMode, ExpressionGraph, Factory, GraphError, GraphOptions, LanguageExpression,
    LanguageReduction, Tag,
};
use watershed_fields::halo_mpi::MpiLink;
use watershed_fields::ranks::{RankLink, SingleProcess};
use watershed_fields::{CellCentre, GhostWidth, Grid, LocationKind, Patch, PatchLayout};
use watershed_operators::{Parameter, Reduction, shift};

const CELLS: [usize; 3] = [16, 12, 8];

/// The reductions: a name, what it computes, and whether its expression
/// reads the neighbour along x (a ghost on the patch's `+x` side).
const REDUCTIONS: [(&str, Reduction, bool); 5] = [
    ("sum", Reduction::Sum, false),
    ("largest", Reduction::Max, false),
    ("smallest", Reduction::Min, false),
    ("norm", Reduction::SumOfSquares, false),
    ("jumps", Reduction::SumOfSquares, true),
];

/// `phi` at a point: smooth, not a small integer anywhere.
fn phi_at(x: [f64; 3]) -> f64 {
    let tau = std::f64::consts::TAU;
    (tau * x[0]).sin() * (tau * x[1]).cos() + 0.3 * (tau * x[2]).sin() + 0.1 * x[0] * x[1]
}

fn graph(patch: &Patch, parameters: &[Parameter]) -> Result<ExpressionGraph, GraphError> {
    let (phi, next) = (Tag::none("phi"), Tag::none("next"));
    let mut factory = Factory::new();
    factory.placeholder(phi.clone(), LocationKind::CellCentre)?;
    let read = phi.clone();
    factory.register(LanguageExpression::new::<CellCentre>(
        next.clone(),
        move |s| 2.0 * s.field::<CellCentre>(&read),
    ))?;
    let mut roots = vec![next];
    for ((name, kind, neighbour), parameter) in REDUCTIONS.iter().zip(parameters) {
        let read = phi.clone();
        let neighbour = *neighbour;
        let reduction =
            LanguageReduction::new::<CellCentre>(Tag::none(name), parameter, *kind, move |s| {
                let phi = s.field::<CellCentre>(&read);
                if neighbour {
                    shift(phi.clone(), [1, 0, 0]) - phi
                } else {
                    phi
                }
            });
        let reduction = if *name == "norm" {
            reduction.finishing_with(f64::sqrt)
        } else {
            reduction
        };
        factory.register_reduction(reduction)?;
        roots.push(Tag::none(name));
    }
    let graph = ExpressionGraph::build(&factory, &roots, patch, &GraphOptions::default())?;
    graph.fill_placeholder(&phi)?;
    Ok(graph)
}

/// Every reduction's value on `layout`'s patches spread over `link`'s
/// ranks.
fn reduce(layout: &PatchLayout, link: Rc<dyn RankLink>) -> Result<Vec<f64>, String> {
    let parameters: Vec<Parameter> = REDUCTIONS
        .iter()
        .map(|(name, _, _)| Parameter::new(name, f64::NAN))
        .collect();
    let graphs = PatchedGraphs::build(layout.clone(), link, |patch| graph(patch, &parameters))
        .map_err(|e| e.to_string())?;
    let phi = Tag::none("phi");
    graphs
        .set_field::<CellCentre>(&phi, phi_at)
        .map_err(|e| e.to_string())?;
    graphs
        .exchange_and_execute(std::slice::from_ref(&phi), ExecutionMode::Serial)
        .map_err(|e| e.to_string())?;
    Ok(parameters.iter().map(Parameter::get).collect())
}

fn check(counts: [usize; 3], link: Rc<dyn RankLink>) -> Result<(), String> {
    let grid = Grid::new(CELLS, [1.0; 3], [0.0; 3])
        .map_err(|e| e.to_string())?
        .with_periodic([true; 3]);
    let layout =
        PatchLayout::new(&grid, counts, GhostWidth::uniform(1)).map_err(|e| e.to_string())?;
    let alone = reduce(&layout, Rc::new(SingleProcess))?;
    let spread = reduce(&layout, link)?;
    let h = grid.spacing();
    let (mut largest, mut smallest) = (f64::NEG_INFINITY, f64::INFINITY);
    for k in 0..CELLS[2] {
        for j in 0..CELLS[1] {
            for i in 0..CELLS[0] {
                let centre = [i, j, k].map(|n| n as f64 + 0.5);
                let v = phi_at([0, 1, 2].map(|a| centre[a] * h[a]));
                largest = largest.max(v);
                smallest = smallest.min(v);
            }
        }
    }
    for (k, (name, _, _)) in REDUCTIONS.iter().enumerate() {
        if alone[k].to_bits() != spread[k].to_bits() {
            return Err(format!(
                "{counts:?}: {name} is {:e} on the ranks, {:e} in one process",
                spread[k], alone[k]
            ));
        }
    }
    if spread[1] != largest || spread[2] != smallest {
        return Err(format!(
            "{counts:?}: largest {:e} and smallest {:e}, the whole domain's {largest:e} and {smallest:e}",
            spread[1], spread[2]
        ));
    }
    Ok(())
}

fn main() {
    let Some(universe) = mpi::initialize() else {
        eprintln!("MPI was initialised already");
        std::process::exit(1);
    };
    let world = universe.world();
    let (rank, ranks) = (world.rank(), world.size());
    let link: Rc<dyn RankLink> = Rc::new(MpiLink::new(world.duplicate()));
    let layouts = [[4, 1, 1], [2, 2, 1], [1, 2, 2], [2, 2, 2]];
    for counts in layouts {
        if let Err(why) = check(counts, link.clone()) {
            eprintln!("rank {rank} of {ranks}: {why}");
            world.abort(1);
        }
    }
    println!(
        "rank {rank} of {ranks}: 5 reductions of graphs on {} patch layouts give the bits of one process",
        layouts.len()
    );
}
