use watershed_fields::*;
use watershed_operators::*;

#[test]
fn smoke() {
    let grid = Grid::new([8, 6, 5], [1.0; 3], [0.0; 3]).unwrap();
    let patch = grid.whole_domain(1);
    let mut phi = SpatialField::<CellCentre>::new("phi", &patch, Device::Cpu).unwrap();
    let mut gamma = SpatialField::<CellCentre>::new("gamma", &patch, Device::Cpu).unwrap();
    let layout = phi.layout().clone();
    {
        let v = phi.values_mut().unwrap();
        for i in layout.allocated() {
            let [x, y, z] = layout.coordinate(i);
            v[layout.linear_index(i)] = x * x + 2.0 * y * y + 3.0 * z * z;
        }
    }
    gamma.fill(2.0).unwrap();
    let mut rhs = SpatialField::<CellCentre>::new("rhs", &patch, Device::Cpu).unwrap();
    let e = div(interp(&gamma) * grad(&phi));
    let k = kernel::Kernel::compile(e.node(), &patch, true).unwrap();
    println!("{}\n{k}", e);
    rhs.assign(e).unwrap();
    for i in layout.interior() {
        let v = rhs.values().unwrap()[layout.linear_index(i)];
        assert!((v - 24.0).abs() < 1e-9, "{i:?} {v}");
    }
    let s = interior_sum(&rhs).unwrap();
    assert!((s - 24.0 * 240.0).abs() < 1e-6, "{s}");
}
