//! The cost of a seam exchange between patch graphs in one process
//! ([`PatchedGraphs::exchange`]): ten cell fields on a periodic 32^3 grid
//! (the ExprLib scalability case's shape), on 2 x 2 x 1 and 1 x 2 x 2
//! patches with one and two ghost layers, timed over many exchanges and
//! reported per ghost value written, beside a plain copy of as many
//! values between two slices (what the exchange cannot beat). Run:
//! `cargo bench -p watershed-exprgraph --bench exchange`.

use std::hint::black_box;
use std::rc::Rc;
use std::time::Instant;
use watershed_exprgraph::patched::PatchedGraphs;
use watershed_exprgraph::{ExpressionGraph, Factory, GraphError, GraphOptions, Tag};
use watershed_fields::ranks::SingleProcess;
use watershed_fields::{CellCentre, GhostWidth, Grid, LocationKind, PatchLayout};

const FIELDS: usize = 10;
const CELLS: usize = 32;

fn graphs(counts: [usize; 3], ghosts: usize, tags: &[Tag]) -> PatchedGraphs {
    let grid = Grid::new([CELLS; 3], [1.0; 3], [0.0; 3])
        .expect("grid")
        .with_periodic([true; 3]);
    let layout = PatchLayout::new(&grid, counts, GhostWidth::uniform(ghosts)).expect("layout");
    PatchedGraphs::build(layout, Rc::new(SingleProcess), |patch| {
        let mut factory = Factory::new();
        for tag in tags {
            factory.placeholder(tag.clone(), LocationKind::CellCentre)?;
        }
        let graph = ExpressionGraph::build(&factory, tags, patch, &GraphOptions::default())?;
        for tag in tags {
            graph.fill_placeholder(tag)?;
        }
        Ok::<_, GraphError>(graph)
    })
    .expect("graphs")
}

fn main() {
    let tags: Vec<Tag> = (0..FIELDS).map(|i| Tag::none(&format!("phi{i}"))).collect();
    println!("exchange of {FIELDS} cell fields, periodic {CELLS}^3, one process");
    println!(
        "| patches | ghosts | values per exchange | ns per value | plain copy, ns per value |"
    );
    println!("| --- | --- | --- | --- | --- |");
    for counts in [[2, 2, 1], [1, 2, 2]] {
        for ghosts in [1, 2] {
            let patched = graphs(counts, ghosts, &tags);
            for (i, tag) in tags.iter().enumerate() {
                patched
                    .set_field::<CellCentre>(tag, |x| x[0] + 2.0 * x[1] + 3.0 * x[2] + i as f64)
                    .expect("set");
            }
            let points = patched.exchange(&tags).expect("exchange");
            let values = points * FIELDS;
            let rounds = (20_000_000 / values).max(10);
            let started = Instant::now();
            for _ in 0..rounds {
                black_box(patched.exchange(black_box(&tags)).expect("exchange"));
            }
            let per_value = started.elapsed().as_secs_f64() * 1e9 / (rounds * values) as f64;
            // As many values copied between two slices, for scale.
            let source = vec![1.5f64; values];
            let mut destination = vec![0.0f64; values];
            let started = Instant::now();
            for _ in 0..rounds {
                destination.copy_from_slice(black_box(&source));
                black_box(&mut destination);
            }
            let plain = started.elapsed().as_secs_f64() * 1e9 / (rounds * values) as f64;
            println!(
                "| {} x {} x {} | {ghosts} | {values} | {per_value:.2} | {plain:.2} |",
                counts[0], counts[1], counts[2]
            );
        }
    }
}
