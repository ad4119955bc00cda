use watershed_exprgraph::*;
use watershed_fields::*;
use watershed_operators::*;

#[test]
fn smoke() {
    let (phi, gamma, flux_x, rhs) = (
        Tag::none("phi"),
        Tag::none("gamma"),
        Tag::none("flux_x"),
        Tag::none("rhs"),
    );
    let mut factory = Factory::new();
    factory
        .placeholder(phi.clone(), LocationKind::CellCentre)
        .unwrap();
    factory
        .placeholder(gamma.clone(), LocationKind::CellCentre)
        .unwrap();
    let (p, g) = (phi.clone(), gamma.clone());
    factory
        .register(LanguageExpression::new::<XFace>(flux_x.clone(), move |s| {
            interpolate_to_face::<XFace>(s.field(&g)) * gradient::<XFace>(s.field(&p))
        }))
        .unwrap();
    let f = flux_x.clone();
    factory
        .register(LanguageExpression::new::<CellCentre>(
            rhs.clone(),
            move |s| divergence::<XFace>(s.field(&f)),
        ))
        .unwrap();
    let patch = Grid::new([8, 6, 4], [1.0; 3], [0.0; 3])
        .unwrap()
        .whole_domain(1);
    for fusion in [false, true] {
        let graph = ExpressionGraph::build(
            &factory,
            &[rhs.clone()],
            &patch,
            &GraphOptions {
                no_fusion: !fusion,
                ..Default::default()
            },
        )
        .unwrap();
        println!(
            "fusion {fusion}: nodes {} fusions {} plan {:?}\n{}",
            graph.node_count(),
            graph.fusions(),
            graph.memory_plan(),
            graph.to_dot()
        );
        graph
            .with_field_mut::<CellCentre, _>(&phi, |f| {
                let l = f.layout().clone();
                let v = f.values_mut().unwrap();
                for i in l.allocated() {
                    let [x, _, _] = l.coordinate(i);
                    v[l.linear_index(i)] = x * x;
                }
            })
            .unwrap();
        graph
            .with_field_mut::<CellCentre, _>(&gamma, |f| f.fill(1.0).unwrap())
            .unwrap();
        for mode in [ExecutionMode::Serial, ExecutionMode::Threaded(2)] {
            let r1 = graph.execute(mode).unwrap();
            let r2 = graph.execute(mode).unwrap();
            println!("{r1:?}\n{r2:?}");
        }
        graph
            .with_field::<CellCentre, _>(&rhs, |f| {
                let l = f.layout();
                for i in l.interior() {
                    let v = f.values().unwrap()[l.linear_index(i)];
                    assert!((v - 2.0).abs() < 1e-9, "{i:?} {v}");
                }
            })
            .unwrap();
        println!("{}", graph.timing_table());
        println!("{}", graph.chrome_trace());
    }
}
