//! The location state machine: property tests over random operation
//! sequences, and the error messages of misuse.
//!
//! The rules are tested twice: on [`LocationTable`] alone over several GPUs
//! (pure logic, so it runs everywhere), and on real [`SpatialField`]s over the
//! devices this machine has (the CPU, plus GPUs where present), checking the
//! data itself.

use proptest::prelude::*;
use std::collections::HashMap;
use watershed_fields::state::LocationTable;
use watershed_fields::*;

#[derive(Debug, Clone, Copy)]
enum Operation {
    Add(Device),
    Remove(Device),
    Validate(Device),
    Activate(Device),
    Write(Device),
    Read(Device),
}

fn device_strategy(gpus: usize) -> impl Strategy<Value = Device> + Clone {
    (0..=gpus).prop_map(|k| {
        if k == 0 {
            Device::Cpu
        } else {
            Device::Gpu(k - 1)
        }
    })
}

fn operation_strategy(gpus: usize) -> impl Strategy<Value = Operation> {
    let d = device_strategy(gpus);
    prop_oneof![
        d.clone().prop_map(Operation::Add),
        d.clone().prop_map(Operation::Remove),
        d.clone().prop_map(Operation::Validate),
        d.clone().prop_map(Operation::Activate),
        d.clone().prop_map(Operation::Write),
        d.prop_map(Operation::Read),
    ]
}

/// The reference model: which devices have a location, which are valid, the
/// active one, and the data version each location holds.
#[derive(Debug)]
struct Model {
    present: Vec<Device>,
    valid: HashMap<Device, bool>,
    active: Device,
}

impl Model {
    fn new(device: Device) -> Self {
        Model {
            present: vec![device],
            valid: HashMap::from([(device, true)]),
            active: device,
        }
    }
    fn has(&self, d: Device) -> bool {
        self.present.contains(&d)
    }
    fn is_valid(&self, d: Device) -> bool {
        self.has(d) && self.valid[&d]
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any sequence keeps the invariants, each operation succeeds exactly when
    /// the model says it may, and every successful read sees the last write.
    #[test]
    fn location_table_follows_the_model(
        start in device_strategy(3),
        operations in proptest::collection::vec(operation_strategy(3), 1..60),
    ) {
        let mut table = LocationTable::new(start);
        let mut model = Model::new(start);
        // Data version held by each location; writes bump `latest`.
        let mut data: HashMap<Device, u64> = HashMap::from([(start, 0)]);
        let mut latest = 0u64;
        for op in operations {
            match op {
                Operation::Add(d) => {
                    let result = table.add("phi", d);
                    prop_assert_eq!(result.is_ok(), !model.has(d));
                    if !model.has(d) {
                        model.present.push(d);
                        model.valid.insert(d, false);
                        data.insert(d, u64::MAX); // garbage
                    }
                }
                Operation::Remove(d) => {
                    let allowed = model.has(d) && d != model.active;
                    prop_assert_eq!(table.remove("phi", d).is_ok(), allowed);
                    if allowed {
                        model.present.retain(|&x| x != d);
                        data.remove(&d);
                    }
                }
                Operation::Validate(d) => {
                    // What SpatialField::validate_on does with the table.
                    if !table.is_valid(d) {
                        if table.position(d).is_none() {
                            table.add("phi", d).unwrap();
                            model.present.push(d);
                        }
                        let source = table.active();
                        prop_assert!(table.is_valid(source));
                        data.insert(d, data[&source]);
                        table.mark_valid("phi", d).unwrap();
                    }
                    model.valid.insert(d, true);
                }
                Operation::Activate(d) => {
                    let allowed = model.is_valid(d);
                    prop_assert_eq!(table.set_active("phi", d).is_ok(), allowed);
                    if allowed {
                        model.active = d;
                    }
                }
                Operation::Write(d) => {
                    let allowed = model.has(d) && d == model.active;
                    prop_assert_eq!(table.begin_write("phi", d).is_ok(), allowed);
                    if allowed {
                        latest += 1;
                        data.insert(d, latest);
                        for (device, valid) in model.valid.iter_mut() {
                            *valid = *device == d;
                        }
                    }
                }
                Operation::Read(d) => {
                    let result = table.require_valid("phi", d);
                    prop_assert_eq!(result.is_ok(), model.is_valid(d));
                    if result.is_ok() {
                        prop_assert_eq!(data[&d], latest, "read on {} saw a stale copy", d);
                    }
                }
            }
            prop_assert!(table.invariants_hold(), "invariants broken: {}", table.describe());
            prop_assert_eq!(table.active(), model.active);
            let devices: Vec<Device> = table.devices().collect();
            prop_assert_eq!(&devices, &model.present);
            for &d in &model.present {
                prop_assert_eq!(table.is_valid(d), model.valid[&d]);
            }
        }
    }
}

/// The devices this machine can use for real fields: the CPU and its GPUs.
fn usable_gpus() -> usize {
    watershed_fields::gpu::gpu_count().min(2)
}

/// Reads every value of the location on `device` without changing states.
fn read_values(field: &SpatialField<CellCentre>, device: Device) -> FieldResult<Vec<f64>> {
    field.values_on(device)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Real fields: invariants hold, misuse is refused without losing data,
    /// and a read after any sequence sees the last written values. GPUs this
    /// machine lacks must be refused with "no CUDA device".
    #[test]
    fn spatial_field_reads_see_the_last_write(
        operations in proptest::collection::vec(operation_strategy(2), 1..40),
    ) {
        let gpus = usable_gpus();
        let exists = |d: Device| d.gpu_ordinal().is_none_or(|k| k < gpus);
        let grid = Grid::new([5, 3, 2], [1.0; 3], [0.0; 3]).unwrap();
        let patch = grid.whole_domain(1);
        let mut field = SpatialField::<CellCentre>::new("phi", &patch, Device::Cpu).unwrap();
        let mut model = Model::new(Device::Cpu);
        let mut last_written = 0.0;
        for (step, op) in operations.into_iter().enumerate() {
            let outcome = match op {
                Operation::Add(d) => {
                    let allowed = exists(d) && !model.has(d);
                    let r = field.add_location(d);
                    prop_assert_eq!(r.is_ok(), allowed, "{:?}: {:?}", op, r);
                    if allowed { model.present.push(d); model.valid.insert(d, false); }
                    r.err()
                }
                Operation::Remove(d) => {
                    let allowed = model.has(d) && d != model.active;
                    let r = field.remove_location(d);
                    prop_assert_eq!(r.is_ok(), allowed, "{:?}: {:?}", op, r);
                    if allowed { model.present.retain(|&x| x != d); }
                    r.err()
                }
                Operation::Validate(d) => {
                    let r = field.validate_on(d);
                    prop_assert_eq!(r.is_ok(), exists(d), "{:?}: {:?}", op, r);
                    if exists(d) {
                        if !model.has(d) { model.present.push(d); }
                        model.valid.insert(d, true);
                    }
                    r.err()
                }
                Operation::Activate(d) => {
                    let allowed = model.is_valid(d);
                    let r = field.set_active(d);
                    prop_assert_eq!(r.is_ok(), allowed, "{:?}: {:?}", op, r);
                    if allowed { model.active = d; }
                    r.err()
                }
                Operation::Write(d) => {
                    let allowed = model.has(d) && d == model.active;
                    let value = step as f64 + 0.25;
                    let r = if d.is_cpu() {
                        field.values_mut().map(|v| v.fill(value))
                    } else if allowed {
                        field.fill(value)
                    } else {
                        field.gpu_buffer_mut(d).map(drop)
                    };
                    prop_assert_eq!(r.is_ok(), allowed, "{:?}: {:?}", op, r);
                    if allowed {
                        last_written = value;
                        for (device, valid) in model.valid.iter_mut() { *valid = *device == d; }
                    }
                    r.err()
                }
                Operation::Read(d) => {
                    let r = read_values(&field, d);
                    prop_assert_eq!(r.is_ok(), model.is_valid(d), "{:?}", op);
                    if let Ok(values) = &r {
                        prop_assert!(values.iter().all(|&v| v == last_written),
                            "read on {} after writing {} saw {:?}", d, last_written, &values[..3]);
                    }
                    r.err()
                }
            };
            if let Some(error) = outcome {
                let message = error.to_string();
                prop_assert!(message.contains("'phi'") || message.contains("no CUDA device"), "{}", message);
            }
            prop_assert_eq!(field.active_device(), model.active);
            prop_assert!(field.is_valid_on(field.active_device()));
            let states = field.location_states();
            prop_assert_eq!(states.iter().filter(|s| s.active).count(), 1);
            prop_assert!(states.iter().all(|s| !s.active || s.valid));
        }
        // Whatever happened, the data is still there.
        field.validate_on(Device::Cpu).unwrap();
        prop_assert!(field.values().unwrap().iter().all(|&v| v == last_written));
    }
}

fn small_field() -> SpatialField<CellCentre> {
    let grid = Grid::new([4, 4, 1], [1.0; 3], [0.0; 3]).unwrap();
    SpatialField::new("temperature", &grid.whole_domain(1), Device::Cpu).unwrap()
}

#[test]
fn writing_an_inactive_location_names_the_field_and_the_states() {
    let mut table = LocationTable::new(Device::Cpu);
    table.add("temperature", Device::Gpu(0)).unwrap();
    table.mark_valid("temperature", Device::Gpu(0)).unwrap();
    let err = table
        .begin_write("temperature", Device::Gpu(0))
        .unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, FieldError::NotActive { .. }));
    assert!(message.contains("'temperature'"), "{message}");
    assert!(
        message.contains("CPU: valid, active; GPU 0: valid"),
        "{message}"
    );
    assert!(message.contains("set_active(GPU 0)"), "{message}");
}

#[test]
fn reading_an_invalid_location_is_refused() {
    let mut table = LocationTable::new(Device::Gpu(1));
    table.add("rho", Device::Cpu).unwrap();
    let err = table.require_valid("rho", Device::Cpu).unwrap_err();
    assert!(matches!(err, FieldError::NotValid { .. }));
    assert!(err.to_string().contains("validate_on(CPU)"), "{err}");
    // Activating an invalid location is refused the same way.
    assert!(matches!(
        table.set_active("rho", Device::Cpu),
        Err(FieldError::NotValid { .. })
    ));
}

#[test]
fn removing_the_active_location_is_refused() {
    let mut field = small_field();
    let err = field.remove_location(Device::Cpu).unwrap_err();
    assert!(matches!(err, FieldError::RemoveActive { .. }));
    assert!(err.to_string().contains("'temperature'"), "{err}");
}

#[test]
fn adding_a_location_twice_is_refused() {
    let mut field = small_field();
    let err = field.add_location(Device::Cpu).unwrap_err();
    assert!(matches!(err, FieldError::LocationExists { .. }), "{err}");
}

#[test]
fn missing_locations_are_named() {
    let field = small_field();
    let err = field.gpu_buffer(Device::Gpu(3)).unwrap_err();
    assert!(matches!(err, FieldError::LocationMissing { .. }));
    assert!(err.to_string().contains("GPU 3"), "{err}");
}

#[test]
fn a_gpu_request_without_a_gpu_is_an_error_and_keeps_the_data() {
    if watershed_fields::gpu::gpu_count() > 0 {
        eprintln!("skipped: this machine has a GPU, so the no-GPU error cannot be produced");
        return;
    }
    let mut field = small_field();
    field.fill(3.0).unwrap();
    let err = field.validate_on(Device::Gpu(0)).unwrap_err();
    assert!(matches!(err, FieldError::NoCudaDevice { .. }), "{err}");
    assert!(
        err.to_string().contains("no CUDA device for GPU 0"),
        "{err}"
    );
    assert!(field.values().unwrap().iter().all(|&v| v == 3.0));
    assert_eq!(field.location_states().len(), 1);
    assert!(matches!(
        MemoryPool::gpu(0),
        Err(FieldError::NoCudaDevice { .. })
    ));
    assert!(watershed_fields::GpuStream::new(0).is_err());
}
