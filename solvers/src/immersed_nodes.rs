//! The graph nodes immersed bodies add to a flow (`crate::immersed` says
//! what they compute): the forcing of each provisional velocity component,
//! the force reductions of each body, and the fill of the coefficient and
//! weight fields those nodes read (placeholders, computed once from the
//! bodies on each field's own layout).

use crate::error::SolverResult;
use crate::immersed::{FaceForcing, Immersed};
use watershed_exprgraph::{
    ExpressionGraph, Factory, GraphLocation, LanguageExpression, LanguageReduction, Tag,
};
use watershed_fields::{CellCentre, FieldLayout, LocationKind, on_face};
use watershed_operators::{
    Expr, FaceLocation, Parameter, Reduction, divergence, interpolate_to_cell, shift,
};

const NAMES: [&str; 3] = ["u", "v", "w"];
const AXES: [&str; 3] = ["x", "y", "z"];

/// The tags of one velocity component's forcing: the stage's unforced
/// result and the coefficient fields of the map
/// `u* = keep u_free + value + sum_d c_d u_free(+d)`, plus the projection's
/// `open` field.
pub(crate) struct ForcingTags {
    pub free: Tag,
    keep: Tag,
    value: Tag,
    pub open: Tag,
    neighbours: Vec<([isize; 3], Tag)>,
}

impl ForcingTags {
    /// The tags of component `axis`, with a neighbour coefficient for
    /// each direction along the `active` axes.
    pub(crate) fn new(axis: usize, active: &[usize]) -> Self {
        let name = NAMES[axis];
        let mut neighbours = Vec::new();
        for &a in active {
            for (step, sign) in [(-1isize, "-"), (1, "+")] {
                let mut offset = [0isize; 3];
                offset[a] = step;
                neighbours.push((
                    offset,
                    Tag::none(&format!("forcing {name} from {sign}{}", AXES[a])),
                ));
            }
        }
        ForcingTags {
            free: Tag::none(&format!("{name}* unforced")),
            keep: Tag::none(&format!("forcing {name} keep")),
            value: Tag::none(&format!("forcing {name} value")),
            open: Tag::none(&format!("open {name} faces")),
            neighbours,
        }
    }

    /// Declares the coefficient fields (placeholders at `location`).
    pub(crate) fn declare(
        &self,
        factory: &mut Factory,
        location: LocationKind,
    ) -> SolverResult<()> {
        for tag in [&self.keep, &self.value, &self.open]
            .into_iter()
            .chain(self.neighbours.iter().map(|(_, t)| t))
        {
            factory.placeholder(tag.clone(), location)?;
        }
        Ok(())
    }

    /// The node writing the forced `provisional` velocity.
    pub(crate) fn expression<F: FaceLocation + GraphLocation>(
        &self,
        provisional: &Tag,
    ) -> LanguageExpression {
        let (free, keep, value) = (self.free.clone(), self.keep.clone(), self.value.clone());
        let neighbours = self.neighbours.clone();
        LanguageExpression::new::<F>(provisional.clone(), move |s| {
            let unforced: Expr<'static, F> = s.field(&free);
            let mut forced = s.field::<F>(&keep) * unforced.clone() + s.field::<F>(&value);
            for (offset, tag) in &neighbours {
                forced = forced + s.field::<F>(tag) * shift(unforced.clone(), *offset);
            }
            forced
        })
    }

    /// Fills the coefficient fields of component `F` that `graph` holds
    /// from the bodies (a graph forcing u* holds every one but the open
    /// faces, a graph correcting u* on a patch only those); returns the
    /// counts of solid and forced interior faces of the graph's patch.
    pub(crate) fn fill<F: FaceLocation + GraphLocation>(
        &self,
        graph: &ExpressionGraph,
        immersed: &Immersed,
    ) -> SolverResult<(usize, usize)> {
        let axis = F::AXIS;
        // The map is computed once per layout the coefficient fields have
        // (usually one), not once per field.
        let mut computed: Option<(FieldLayout, FaceForcing)> = None;
        // `pick` gives the coefficients, or `None` for zeros (a direction
        // no face interpolates along).
        let mut write = |tag: &Tag, pick: &dyn Fn(&FaceForcing) -> Option<&[f64]>| {
            graph.with_field_mut::<F, _>(tag, |field| -> SolverResult<()> {
                let layout = field.layout();
                if computed.as_ref().is_none_or(|(l, _)| l != layout) {
                    computed = Some((layout.clone(), immersed.forcing(axis, layout)?));
                }
                if let Some((_, forcing)) = &computed {
                    match pick(forcing) {
                        Some(values) => field.values_mut()?.copy_from_slice(values),
                        None => field.fill(0.0)?,
                    }
                }
                Ok(())
            })??;
            graph.fill_placeholder(tag)?;
            SolverResult::Ok(())
        };
        let held = |tag: &Tag| graph.field_info(tag).is_some();
        if held(&self.keep) {
            write(&self.keep, &|f| Some(&f.keep))?;
        }
        if held(&self.value) {
            write(&self.value, &|f| Some(&f.value))?;
        }
        // The open faces are read by the velocity's correction only: a
        // graph that forces u* without correcting it (a decomposed
        // projection's forcing graph) does not hold them.
        if held(&self.open) {
            write(&self.open, &|f| Some(&f.open))?;
        }
        for (offset, tag) in self.neighbours.iter().filter(|(_, t)| held(t)) {
            write(tag, &|f| {
                f.neighbours
                    .iter()
                    .find(|(o, _)| o == offset)
                    .map(|(_, c)| c.as_slice())
            })?;
        }
        let counts = computed.map_or((0, 0), |(_, f)| (f.solid, f.forced));
        Ok(counts)
    }
}

/// The force reductions of one body (`crate::immersed`, John's volume
/// form): per active component `k`, the weighted momentum `sum w u_k dV`
/// and the steady part `sum (-u_k u.grad w + nu grad u_k . grad w - p
/// d_k w) dV`, both reduced in the graph at every stage.
pub(crate) struct ForceReductions {
    /// The body's index among the flow's bodies and its name.
    pub body: usize,
    pub name: String,
    /// The tags of the reduction nodes (graph roots).
    pub roots: Vec<Tag>,
    /// The weight and its gradient components (cell placeholders).
    weight: Tag,
    gradient: [Tag; 3],
    momentum: [Parameter; 3],
    steady: [Parameter; 3],
    /// `sum_fluid w dV`, for the body force per unit mass.
    pub fluid_weight: f64,
    /// The cell volume (the product of the active spacings).
    volume: f64,
    /// The weighted momentum at the start of the step.
    pub previous: [f64; 3],
}

impl ForceReductions {
    /// Declares the weight fields of body `body` and registers its
    /// reductions over the velocity `velocity` and the pressure
    /// `pressure` of each stage.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn register(
        factory: &mut Factory,
        immersed: &Immersed,
        body: usize,
        velocity: &[Tag; 3],
        pressure: &Tag,
        active: &[usize],
        spacing: [f64; 3],
        viscosity: f64,
    ) -> SolverResult<Self> {
        let name = immersed.bodies()[body].name().to_string();
        let weight = Tag::none(&format!("force weight of {name}"));
        let gradient = AXES.map(|a| Tag::none(&format!("d{a} force weight of {name}")));
        factory.placeholder(weight.clone(), LocationKind::CellCentre)?;
        for &a in active {
            factory.placeholder(gradient[a].clone(), LocationKind::CellCentre)?;
        }
        let momentum = AXES.map(|a| Parameter::new(&format!("{name} momentum {a}"), 0.0));
        let steady = AXES.map(|a| Parameter::new(&format!("{name} stresses {a}"), 0.0));
        let mut roots = Vec::new();
        for &k in active {
            let tag = Tag::none(&format!("{name} momentum {}", AXES[k]));
            let (w, u) = (weight.clone(), velocity[k].clone());
            factory.register_reduction(LanguageReduction::new::<CellCentre>(
                tag.clone(),
                &momentum[k],
                Reduction::Sum,
                move |s| {
                    let cell = on_face!(k, F => interpolate_to_cell::<F>(s.field::<F>(&u)));
                    s.field::<CellCentre>(&w) * cell
                },
            ))?;
            roots.push(tag);
            let tag = Tag::none(&format!("{name} stresses {}", AXES[k]));
            let (velocity, pressure, gradient) =
                (velocity.clone(), pressure.clone(), gradient.clone());
            let active = active.to_vec();
            factory.register_reduction(LanguageReduction::new::<CellCentre>(
                tag.clone(),
                &steady[k],
                Reduction::Sum,
                move |s| {
                    let cells: Vec<(usize, Expr<'static, CellCentre>)> = active
                        .iter()
                        .map(|&a| {
                            (a, on_face!(a, F => interpolate_to_cell::<F>(s.field::<F>(&velocity[a]))))
                        })
                        .collect();
                    let own = cells
                        .iter()
                        .find(|(a, _)| *a == k)
                        .map(|(_, c)| c.clone())
                        .unwrap_or_else(|| Expr::constant(0.0));
                    let mut carried: Expr<'static, CellCentre> = Expr::constant(0.0);
                    let mut viscous: Expr<'static, CellCentre> = Expr::constant(0.0);
                    for (a, cell) in &cells {
                        let dw: Expr<'static, CellCentre> = s.field(&gradient[*a]);
                        carried = carried + cell.clone() * dw.clone();
                        let derivative = if *a == k {
                            on_face!(k, F => divergence::<F>(s.field::<F>(&velocity[k])))
                        } else {
                            (crate::staggered::along(&own, *a, 1)
                                - crate::staggered::along(&own, *a, -1))
                                * (0.5 / spacing[*a])
                        };
                        viscous = viscous + derivative * dw;
                    }
                    let dw_k: Expr<'static, CellCentre> = s.field(&gradient[k]);
                    -1.0 * own * carried + viscosity * viscous
                        - s.field::<CellCentre>(&pressure) * dw_k
                },
            ))?;
            roots.push(tag);
        }
        let volume = active.iter().map(|&a| spacing[a]).product();
        Ok(ForceReductions {
            body,
            name,
            roots,
            weight,
            gradient,
            momentum,
            steady,
            fluid_weight: 0.0,
            volume,
            previous: [0.0; 3],
        })
    }

    /// Fills the weight fields of `graph` (on the whole domain or on one
    /// patch: the points are placed in the grid by the patch's offset)
    /// from the body's band.
    pub(crate) fn fill_weights(
        &self,
        graph: &ExpressionGraph,
        immersed: &Immersed,
        active: &[usize],
    ) -> SolverResult<()> {
        let body = self.body;
        let fill = |tag: &Tag, pick: &dyn Fn(f64, [f64; 3]) -> f64| -> SolverResult<()> {
            graph.with_field_mut::<CellCentre, _>(tag, |field| -> SolverResult<()> {
                let layout: FieldLayout = field.layout().clone();
                let offset = layout.patch().offset().map(|o| o as isize);
                let values = field.values_mut()?;
                for index in layout.allocated().iter() {
                    let global = [0, 1, 2].map(|a| index[a] + offset[a]);
                    let (w, g) = immersed.force_weight(body, immersed.cell_position(global));
                    values[layout.linear_index(index)] = pick(w, g);
                }
                Ok(())
            })??;
            graph.fill_placeholder(tag)?;
            Ok(())
        };
        fill(&self.weight, &|w, _| w)?;
        for &a in active {
            fill(&self.gradient[a], &move |_, g| g[a])?;
        }
        Ok(())
    }

    /// Sums the weight over the fluid cells of the whole domain, whose
    /// cells `whole` (a layout of the whole grid) numbers.
    pub(crate) fn sum_fluid_weight(&mut self, immersed: &Immersed, whole: &FieldLayout) {
        let mut sum = 0.0;
        for index in whole.interior().iter() {
            let x = immersed.cell_position(index);
            if immersed.nearest(x).0 >= 0.0 {
                let (w, _) = immersed.force_weight(self.body, x);
                sum += w;
            }
        }
        self.fluid_weight = sum * self.volume;
    }

    /// The sums the graph reduced for the weighted momentum of the last
    /// stage (before the cell volume scales them), per component: what a
    /// checkpoint keeps so that a restart's first step has its force.
    pub(crate) fn momentum_sums(&self) -> [f64; 3] {
        self.momentum.each_ref().map(Parameter::get)
    }

    /// Puts back sums [`Self::momentum_sums`] gave.
    pub(crate) fn restore_momentum_sums(&self, sums: [f64; 3]) {
        for (parameter, value) in self.momentum.iter().zip(sums) {
            parameter.set(value);
        }
    }

    /// The weighted momentum of the last stage, per component.
    pub(crate) fn momentum(&self) -> [f64; 3] {
        self.momentum.each_ref().map(|p| p.get() * self.volume)
    }

    /// The force after a step of `dt` whose start had the weighted
    /// momentum `self.previous`, with body force `force` per unit mass:
    /// `-(dM/dt + S - f W_fluid)`.
    pub(crate) fn force(&self, dt: f64, force: [f64; 3], active: &[usize]) -> [f64; 3] {
        let now = self.momentum();
        let mut out = [0.0; 3];
        for &k in active {
            let rate = (now[k] - self.previous[k]) / dt;
            out[k] = -(rate + self.steady[k].get() * self.volume - force[k] * self.fluid_weight);
        }
        out
    }
}
