//! Layout tests: sizes per location and ghost width, interior and ghost index
//! ranges, coordinates, and external storage that is never freed.

use ndarray::{Array3, ShapeBuilder};
use proptest::prelude::*;
use std::collections::HashSet;
use std::ptr::NonNull;
use watershed_fields::*;

fn grid(cells: [usize; 3]) -> Grid {
    Grid::new(cells, [1.0, 2.0, 3.0], [-0.5, 0.0, 1.0]).unwrap()
}

#[test]
fn sizes_per_location_on_a_whole_domain_patch() {
    let patch = grid([5, 4, 3]).whole_domain(2);
    let expected = [
        (LocationKind::CellCentre, [5, 4, 3]),
        (LocationKind::XFace, [6, 4, 3]),
        (LocationKind::YFace, [5, 5, 3]),
        (LocationKind::ZFace, [5, 4, 4]),
    ];
    for (kind, interior) in expected {
        let layout = FieldLayout::new(&patch, kind);
        assert_eq!(layout.interior_extent(), interior, "{kind}");
        assert_eq!(
            layout.allocated_extent(),
            interior.map(|n| n + 4),
            "{kind} allocated"
        );
        assert_eq!(
            layout.allocated_len(),
            interior.iter().map(|n| n + 4).product()
        );
    }
}

#[test]
fn faces_get_the_extra_point_only_on_a_physical_plus_boundary() {
    let g = grid([8, 8, 8]);
    // Lower half in x: its +x side is an internal patch boundary.
    let lower = Patch::new(&g, [0, 0, 0], [4, 8, 8], GhostWidth::uniform(1)).unwrap();
    let upper = Patch::new(&g, [4, 0, 0], [4, 8, 8], GhostWidth::uniform(1)).unwrap();
    assert_eq!(
        FieldLayout::new(&lower, LocationKind::XFace).interior_extent(),
        [4, 8, 8]
    );
    assert_eq!(
        FieldLayout::new(&upper, LocationKind::XFace).interior_extent(),
        [5, 8, 8]
    );
    // Periodic x: no boundary face anywhere.
    let periodic = g.clone().with_periodic([true, false, false]);
    let whole = periodic.whole_domain(1);
    assert_eq!(
        FieldLayout::new(&whole, LocationKind::XFace).interior_extent(),
        [8, 8, 8]
    );
    assert_eq!(
        FieldLayout::new(&whole, LocationKind::YFace).interior_extent(),
        [8, 9, 8]
    );
    assert_eq!(whole.minus_boundary(), [false, true, true]);
}

#[test]
fn inactive_dimensions_have_no_ghosts_and_no_extra_faces() {
    let patch = grid([6, 1, 1]).whole_domain(3);
    assert_eq!(patch.ghosts().minus, [3, 0, 0]);
    let cells = FieldLayout::new(&patch, LocationKind::CellCentre);
    assert_eq!(cells.allocated_extent(), [12, 1, 1]);
    let yfaces = FieldLayout::new(&patch, LocationKind::YFace);
    assert_eq!(yfaces.interior_extent(), [6, 1, 1]);
    let xfaces = FieldLayout::new(&patch, LocationKind::XFace);
    assert_eq!(xfaces.interior_extent(), [7, 1, 1]);
}

#[test]
fn patches_outside_the_grid_are_refused_with_the_axis_named() {
    let g = grid([4, 4, 4]);
    let err = Patch::new(&g, [0, 2, 0], [4, 3, 4], GhostWidth::none()).unwrap_err();
    let message = err.to_string();
    assert!(message.contains("axis y"), "{message}");
    let err = Grid::new([4, 0, 1], [1.0; 3], [0.0; 3]).unwrap_err();
    assert!(err.to_string().contains("axis y"), "{err}");
    let err = Grid::new([4, 4, 1], [1.0, f64::NAN, 1.0], [0.0; 3]).unwrap_err();
    assert!(err.to_string().contains("finite"), "{err}");
}

#[test]
fn coordinates_follow_the_staggering() {
    let g = Grid::new([4, 2, 1], [1.0, 1.0, 1.0], [10.0, 20.0, 0.0]).unwrap();
    let patch = Patch::new(&g, [2, 0, 0], [2, 2, 1], GhostWidth::uniform(1)).unwrap();
    let cells = FieldLayout::new(&patch, LocationKind::CellCentre);
    assert_eq!(cells.coordinate([0, 0, 0]), [10.0 + 2.5 * 0.25, 20.25, 0.5]);
    assert_eq!(
        cells.coordinate([-1, 0, 0]),
        [10.0 + 1.5 * 0.25, 20.25, 0.5]
    );
    let xfaces = FieldLayout::new(&patch, LocationKind::XFace);
    assert_eq!(xfaces.coordinate([0, 0, 0]), [10.5, 20.25, 0.5]);
    // The last x face of the +x boundary patch sits on the domain boundary.
    assert_eq!(xfaces.interior_extent()[0], 3);
    assert_eq!(xfaces.coordinate([2, 0, 0])[0], 11.0);
}

proptest! {
    /// Interior and ghost regions partition the allocated box, and the
    /// linear index is a bijection onto 0..allocated_len.
    #[test]
    fn ghost_regions_and_interior_partition_the_allocated_box(
        nx in 1usize..7, ny in 1usize..6, nz in 1usize..5,
        gm in proptest::array::uniform3(0usize..3),
        gp in proptest::array::uniform3(0usize..3),
        kind in 0usize..4,
    ) {
        let g = Grid::new([nx, ny, nz], [1.0; 3], [0.0; 3]).unwrap();
        let patch = Patch::new(&g, [0; 3], [nx, ny, nz], GhostWidth { minus: gm, plus: gp }).unwrap();
        let layout = FieldLayout::new(&patch, LocationKind::ALL[kind]);
        let mut seen = HashSet::new();
        for index in layout.interior() {
            prop_assert!(seen.insert(index));
        }
        for region in layout.ghost_regions() {
            for index in region {
                prop_assert!(!layout.interior().contains(index));
                prop_assert!(seen.insert(index), "ghost point {:?} covered twice", index);
            }
        }
        prop_assert_eq!(seen.len(), layout.allocated_len());
        let linear: HashSet<usize> = layout.allocated().iter().map(|i| layout.linear_index(i)).collect();
        prop_assert_eq!(linear.len(), layout.allocated_len());
        prop_assert!(linear.iter().all(|&l| l < layout.allocated_len()));
        // x fastest, then y, then z
        let lo = layout.allocated().lo;
        let extent = layout.allocated_extent();
        prop_assert_eq!(layout.linear_index(lo), 0);
        prop_assert_eq!(layout.strides(), [1, extent[0], extent[0] * extent[1]]);
        if extent[1] > 1 {
            prop_assert_eq!(layout.linear_index([lo[0], lo[1] + 1, lo[2]]), extent[0]);
        }
    }
}

#[test]
fn interior_with_ghosts_is_clipped_to_the_allocation() {
    let patch = Patch::new(
        &grid([4, 4, 4]),
        [0; 3],
        [4, 4, 4],
        GhostWidth {
            minus: [1, 2, 0],
            plus: [2, 1, 0],
        },
    )
    .unwrap();
    let layout = FieldLayout::new(&patch, LocationKind::CellCentre);
    let b = layout.interior_with_ghosts(2);
    assert_eq!(b.lo, [-1, -2, 0]);
    assert_eq!(b.hi, [6, 5, 4]);
}

#[test]
fn views_with_and_without_ghosts_see_the_same_memory() {
    let patch = grid([4, 3, 2]).whole_domain(1);
    let mut field = SpatialField::<CellCentre>::new("f", &patch, Device::Cpu).unwrap();
    let layout = field.layout().clone();
    {
        let values = field.values_mut().unwrap();
        for index in layout.allocated() {
            values[layout.linear_index(index)] = (index[0] * 100 + index[1] * 10 + index[2]) as f64;
        }
    }
    let full = field.view().unwrap();
    assert_eq!(full.dim(), (6, 5, 4));
    assert_eq!(full[[0, 0, 0]], (-100 - 10 - 1) as f64);
    let interior = field.interior_view().unwrap();
    assert_eq!(interior.dim(), (4, 3, 2));
    assert_eq!(interior[[3, 2, 1]], 321.0);
    let mut field = field;
    field.interior_view_mut().unwrap()[[1, 1, 1]] = -7.0;
    assert_eq!(
        field.values().unwrap()[layout.linear_index([1, 1, 1])],
        -7.0
    );
}

#[test]
fn external_storage_is_never_freed_or_pooled() {
    let patch = grid([4, 3, 2]).whole_domain(1);
    let layout = FieldLayout::new(&patch, LocationKind::CellCentre);
    let pool = MemoryPool::global(Device::Cpu).unwrap();
    let before = pool.statistics();

    // Raw caller memory: still there and holding what the field wrote after
    // the field is gone.
    let mut caller_memory = vec![1.5f64; layout.allocated_len()];
    let pointer = NonNull::new(caller_memory.as_mut_ptr()).unwrap();
    {
        // SAFETY: `caller_memory` outlives the field and is not touched meanwhile.
        let buffer = unsafe { ExternalBuffer::from_raw_parts(pointer, caller_memory.len()) };
        let mut field = SpatialField::<CellCentre>::from_external("ext", &patch, buffer).unwrap();
        assert!(field.is_external());
        assert_eq!(field.lifetime(), Lifetime::Persistent);
        assert_eq!(field.values().unwrap()[0], 1.5);
        field.fill(4.0).unwrap();
    }
    assert!(caller_memory.iter().all(|&v| v == 4.0));
    assert_eq!(caller_memory.as_mut_ptr(), pointer.as_ptr());

    // An ndarray moved in comes back with the field's values.
    let array = Array3::<f64>::from_elem((6, 5, 4).f(), 2.0);
    let address = array.as_ptr();
    let mut field = SpatialField::<CellCentre>::from_external(
        "arr",
        &patch,
        ExternalBuffer::from_array(array).unwrap(),
    )
    .unwrap();
    field.interior_view_mut().unwrap()[[0, 0, 0]] = 9.0;
    let back = field.into_external().unwrap().into_array().unwrap();
    assert_eq!(back.as_ptr(), address);
    assert_eq!(back[[1, 1, 1]], 9.0);
    assert_eq!(back[[0, 0, 0]], 2.0);

    let after = pool.statistics();
    assert_eq!(after.misses, before.misses);
    assert_eq!(after.hits, before.hits);
}

#[test]
fn external_storage_of_the_wrong_shape_or_order_is_refused() {
    let patch = grid([4, 3, 2]).whole_domain(1);
    let c_order = Array3::<f64>::zeros((6, 5, 4));
    let err = ExternalBuffer::from_array(c_order).unwrap_err();
    assert!(err.contains(".f()"), "{err}");
    let wrong = ExternalBuffer::from_array(Array3::<f64>::zeros((4, 3, 2).f())).unwrap();
    let err = SpatialField::<CellCentre>::from_external("phi", &patch, wrong).unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("'phi'") && message.contains("[6, 5, 4]"),
        "{message}"
    );
    let short = ExternalBuffer::from_vec(vec![0.0; 10]);
    assert!(SpatialField::<XFace>::from_external("u", &patch, short).is_err());
}
