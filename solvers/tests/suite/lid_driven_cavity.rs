//! Lid-driven cavity at Re = 100 on a 64 x 64 grid: the centreline velocity
//! profiles of the steady state agree with the table of Ghia, Ghia and Shin
//! (1982) (in `tests/data/ghia_re100.csv`, with its citation) to within
//! 0.02, in units of the lid speed.

use watershed_fields::{Grid, XFace, YFace};
use watershed_operators::Side;
use watershed_solvers::{
    BoundaryCondition, BoundaryConditions, IncompressibleFlowBuilder, TimeIntegrator,
};

/// (table, coordinate, velocity) rows of the reference data.
fn ghia() -> Vec<(String, f64, f64)> {
    include_str!("../data/ghia_re100.csv")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let parts: Vec<&str> = l.split(',').collect();
            (
                parts[0].to_string(),
                parts[1].parse().unwrap(),
                parts[2].parse().unwrap(),
            )
        })
        .collect()
}

/// Linear interpolation of (position, value) samples sorted by position.
fn interpolate(samples: &[(f64, f64)], at: f64) -> f64 {
    let k = samples
        .iter()
        .position(|&(p, _)| p >= at)
        .unwrap_or(samples.len() - 1)
        .max(1);
    let ((p0, v0), (p1, v1)) = (samples[k - 1], samples[k]);
    v0 + (v1 - v0) * (at - p0) / (p1 - p0)
}

#[test]
fn centreline_velocities_match_ghia_at_re_100() {
    let n = 64;
    let patch = Grid::new([n, n, 1], [1.0; 3], [0.0; 3])
        .unwrap()
        .whole_domain(1);
    let walls = BoundaryConditions::all(BoundaryCondition::Dirichlet(0.0));
    let mut flow = IncompressibleFlowBuilder::new(&patch, 0.01)
        .velocity_conditions(
            0,
            walls
                .clone()
                .with(Side::PLUS_Y, BoundaryCondition::Dirichlet(1.0)),
        )
        .velocity_conditions(1, walls)
        .integrator(TimeIntegrator::ForwardEuler)
        .build()
        .unwrap();
    // March to the steady state (forward Euler: the steady state does not
    // depend on the scheme): stop when the kinetic energy changes by less
    // than 1e-4 (relative) over one time unit.
    let mut previous = 0.0;
    let mut time = 0.0;
    loop {
        time += 1.0;
        flow.advance(time, 0.5, 0.2).unwrap();
        let energy = flow.kinetic_energy().unwrap();
        if (energy - previous).abs() <= 1e-4 * energy || time >= 40.0 {
            break;
        }
        previous = energy;
    }
    eprintln!("steady after t = {time}, {} steps", flow.steps());

    // u on the x faces at x = 0.5 (face index n/2), v on the y faces at y = 0.5.
    let u_line: Vec<(f64, f64)> = flow
        .with_velocity::<XFace, _>(|u| {
            let layout = u.layout();
            let values = u.values().unwrap();
            let mut line = vec![(0.0, 0.0)];
            for j in 0..n as isize {
                let index = [n as isize / 2, j, 0];
                line.push((
                    layout.coordinate(index)[1],
                    values[layout.linear_index(index)],
                ));
            }
            line.push((1.0, 1.0));
            line
        })
        .unwrap();
    let v_line: Vec<(f64, f64)> = flow
        .with_velocity::<YFace, _>(|v| {
            let layout = v.layout();
            let values = v.values().unwrap();
            let mut line = vec![(0.0, 0.0)];
            for i in 0..n as isize {
                let index = [i, n as isize / 2, 0];
                line.push((
                    layout.coordinate(index)[0],
                    values[layout.linear_index(index)],
                ));
            }
            line.push((1.0, 0.0));
            line
        })
        .unwrap();
    let mut worst: f64 = 0.0;
    for (table, coordinate, reference) in ghia() {
        let computed = if table == "u" {
            interpolate(&u_line, coordinate)
        } else {
            interpolate(&v_line, coordinate)
        };
        let difference = (computed - reference).abs();
        eprintln!(
            "{table}({coordinate:.4}) = {computed:+.5}, Ghia {reference:+.5}, difference {difference:.5}"
        );
        worst = worst.max(difference);
    }
    assert!(worst <= 0.02, "largest difference from Ghia et al. {worst}");
    let p = flow.last_projection();
    assert!(
        p.divergence_after <= 1e-8 * p.divergence_before.max(1e-12) + 1e-12,
        "{p:?}"
    );
}
