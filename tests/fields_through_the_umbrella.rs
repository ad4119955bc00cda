//! Cross-crate checks through the umbrella crate: a user's view of the
//! foundation. A field set from an analytic function, written to HDF5 and
//! read back, with its coordinates matching the analytic values.

use watershed::fields::io::{GhostSelection, read_field_from_file, write_field_to_file};
use watershed::fields::*;

#[test]
fn analytic_field_survives_an_hdf5_round_trip() {
    let grid = Grid::new([12, 10, 1], [2.0, 1.0, 1.0], [-1.0, 0.0, 0.0]).unwrap();
    let patch = grid.whole_domain(2);
    let mut phi = SpatialField::<CellCentre>::builder("phi", &patch)
        .lifetime(Lifetime::Persistent)
        .build()
        .unwrap();
    let layout = phi.layout().clone();
    let exact = |[x, y, _]: [f64; 3]| (std::f64::consts::PI * x).sin() * y;
    {
        let values = phi.values_mut().unwrap();
        for index in layout.allocated() {
            values[layout.linear_index(index)] = exact(layout.coordinate(index));
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("phi.h5");
    write_field_to_file(&path, "phi", &phi, GhostSelection::WithGhosts).unwrap();
    let back: SpatialField<CellCentre> = read_field_from_file(&path, "phi").unwrap();
    for index in layout.allocated() {
        let value = back.values().unwrap()[layout.linear_index(index)];
        assert_eq!(
            value,
            exact(back.layout().coordinate(index)),
            "at {index:?}"
        );
    }
    // Cell centres of the first interior cell.
    assert_eq!(layout.coordinate([0, 0, 0]), [-1.0 + 1.0 / 12.0, 0.05, 0.5]);
}
