use watershed_fields::Grid;
use watershed_operators::Side;
use watershed_solvers::*;
fn main() {
    let ny: usize = std::env::args().nth(1).unwrap().parse().unwrap();
    let umax: f64 = std::env::args().nth(2).unwrap().parse().unwrap();
    let end: f64 = std::env::args().nth(3).unwrap().parse().unwrap();
    let h = 0.41 / ny as f64;
    let nx = ((2.2 / h / 16.0).ceil() as usize) * 16;
    let grid = Grid::new([nx, ny, 1], [nx as f64 * h, 0.41, 1.0], [0.0; 3]).unwrap();
    let inflow = BoundaryExpression::new("inflow", move |p| {
        4.0 * umax * p.y.clone() * (0.41 - p.y.clone()) / (0.41 * 0.41)
    });
    let walls = BoundaryConditions::all(BoundaryCondition::Dirichlet(0.0));
    let cyl = Body::fixed("cylinder", Shape::circle([0.2, 0.2, 0.0], 0.05));
    let mut flow = IncompressibleFlowBuilder::new(&grid.whole_domain(1), 1e-3)
        .velocity_conditions(
            0,
            walls.clone().with(
                Side::MINUS_X,
                BoundaryCondition::DirichletExpression(inflow),
            ),
        )
        .velocity_conditions(1, walls)
        .outflow_of(Side::PLUS_X, Outflow::Convective)
        .body(cyl)
        .build()
        .unwrap();
    println!("grid {nx}x{ny}, faces {:?}", flow.immersed_faces());
    let umean = 2.0 / 3.0 * umax;
    let scale = 2.0 / (umean * umean * 0.1);
    let start = std::time::Instant::now();
    let mut next = 0.0;
    let mut iters = 0;
    while flow.time() < end {
        let dt = flow
            .stable_time_step(0.5, 0.2)
            .unwrap()
            .min(0.5 * h / (1.5 * umax));
        flow.step(dt).unwrap();
        iters += flow.last_projection().iterations;
        if flow.time() >= next {
            let f = flow.body_force("cylinder").unwrap();
            println!(
                "t {:.3} steps {} cD {:.5} cL {:.5} iters/step {:.1} {:.1}s",
                flow.time(),
                flow.steps(),
                f[0] * scale,
                f[1] * scale,
                iters as f64 / flow.steps() as f64,
                start.elapsed().as_secs_f64()
            );
            next += end / 20.0;
        }
    }
}
