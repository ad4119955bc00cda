//! The step's reductions of a decomposed flow, on its patches (issue 51,
//! plan step 4 in `docs/architecture.md`).
//!
//! After a step's last stage a flow whose state lives on the patches
//! (`crate::flow_patches`) reduces, for the driver and the cases, the
//! speeds of the CFL limit (`max |u|` per component), the norm of
//! `div(u)`, where it tracks it the squared vorticity of every edge pair,
//! and with immersed bodies their weighted momentum and stresses (the
//! forces; `crate::immersed_nodes`). Here one small graph per owned patch
//! (a [`PatchedGraphs`]) takes its momentum graph's new velocity (and for
//! the forces its `psi`, from which it forms the pressure as the flow's
//! own graph does), has the velocity's seams and periodic images
//! exchanged (the divergence, the vorticity and the stresses read across
//! them; its physical ghosts take the velocity's conditions in the
//! graph), and reduces its interior; [`PatchedGraphs`] combines the
//! patches' partial results in patch order. So nothing of the whole
//! domain is gathered for them:
//!
//! * a maximum is the whole domain's bit for bit;
//! * a sum adds the patches' sums in patch order: the same bits on any
//!   number of ranks for one layout, and one patch's bits on one patch;
//!   to rounding the whole domain's (which adds in another order).
//!
//! The kinetic energy needs no seams: each owned patch's interior sums of
//! squares, combined in patch order ([`FlowPatches::sums_of_squares`]),
//! when a case asks for it.
//!
//! A convective outflow's speed, the mean outward velocity over its side,
//! adds the patches' sums over their parts of the side in patch order
//! (`FlowPatches::side_sum`) before each step.
//!
//! The whole domain's velocity and `psi` are then gathered only when
//! something reads them (a dump, a checkpoint, a case's lines; see
//! `IncompressibleFlow::gather_whole`).

use crate::error::SolverResult;
use crate::flow_patches::FlowPatches;
use crate::flow_projection::PatchProjection;
use crate::windows::{copy_field, take_window};
use std::time::Duration;
use watershed_exprgraph::patched::PatchedGraphs;
use watershed_exprgraph::{ExecutionMode, ExpressionGraph, Tag};
use watershed_fields::{CellCentre, on_face};

/// The graphs reducing a decomposed flow's new velocity, one per owned
/// patch, in patch order.
pub(crate) struct PatchReductions {
    graphs: PatchedGraphs,
    /// The velocity components.
    active: Vec<usize>,
    /// The velocity's tags, the same in the momentum graphs and here.
    velocity: [Tag; 3],
    /// With forces on bodies: the projection potential's tag, from which
    /// each graph forms the pressure the forces read.
    psi: Option<Tag>,
}

impl PatchReductions {
    /// `graphs` (built from one recipe whose reductions read `velocity`,
    /// and `psi` where they form the pressure) for the components
    /// `active`.
    pub(crate) fn new(
        graphs: PatchedGraphs,
        active: &[usize],
        velocity: [Tag; 3],
        psi: Option<Tag>,
    ) -> Self {
        PatchReductions {
            graphs,
            active: active.to_vec(),
            velocity,
            psi,
        }
    }

    /// Copies each owned patch's velocity from its momentum graph in
    /// `momentum` (ghosts included) and, where the graphs read it, its
    /// `psi` interior from `projection` (brought to the host then only),
    /// exchanges the velocity's seams and reduces every patch's interior,
    /// the partial results combined in patch order into the recipe's
    /// parameters (collective: every rank calls it).
    pub(crate) fn reduce(
        &self,
        momentum: &FlowPatches,
        projection: &PatchProjection,
        mode: ExecutionMode,
    ) -> SolverResult<()> {
        self.copy_velocity(momentum)?;
        if let Some(tag) = &self.psi {
            for (from, to) in projection.psi()?.iter().zip(self.graphs.graphs()) {
                to.with_field_mut::<CellCentre, _>(tag, |into| {
                    take_window(from, into, [0; 3], false)
                })??;
            }
        }
        self.graphs
            .exchange_and_execute(&self.velocity_tags(), mode)?;
        Ok(())
    }

    /// Copies each owned patch's velocity from its momentum graph in
    /// `momentum` (ghosts included) and exchanges its seams, without
    /// reducing (collective): what a read of each patch needs.
    pub(crate) fn take_velocity(&self, momentum: &FlowPatches) -> SolverResult<()> {
        self.copy_velocity(momentum)?;
        self.graphs.exchange(&self.velocity_tags())?;
        Ok(())
    }

    fn copy_velocity(&self, momentum: &FlowPatches) -> SolverResult<()> {
        for ((_, from), to) in momentum.graphs().into_iter().zip(self.graphs.graphs()) {
            for &axis in &self.active {
                let tag = &self.velocity[axis];
                on_face!(axis, F => copy_field::<F>(from, tag, to, tag)?);
            }
        }
        Ok(())
    }

    fn velocity_tags(&self) -> Vec<Tag> {
        self.active
            .iter()
            .map(|&a| self.velocity[a].clone())
            .collect()
    }

    /// The graphs on the owned patches, in patch order.
    pub(crate) fn graphs(&self) -> &[ExpressionGraph] {
        self.graphs.graphs()
    }

    /// Wall time in the exchanges of the velocity's seams and the
    /// combination of the partial results across patches.
    pub(crate) fn exchange_time(&self) -> Duration {
        self.graphs.exchange_time()
    }
}
