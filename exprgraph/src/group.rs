//! The node that horizontal fusion forms ([`crate::passes::horizontal`]):
//! independent language expressions over the same box of the same
//! location, evaluated as one loop nest whose members compute their rows
//! of a strip of planes in turn ([`watershed_operators::assign_nodes_then`]).
//! Each member keeps its own kernel, so values are bitwise those of the
//! members run one by one.

use crate::error::{GraphError, GraphResult};
use crate::expression::{EvaluationContext, Expression, ExpressionKind, LanguageExpression};
use crate::store::{AnyField, GraphLocation};
use crate::tag::Tag;
use std::sync::Arc;
use watershed_fields::{CellCentre, FieldLayout, LocationKind, XFace, YFace, ZFace};
use watershed_operators::{
    AssignOptions, BoundField, NodeAssignment, OperatorError, Region, assign_nodes_then,
};

/// The most members one group takes.
pub const MAX_MEMBERS: usize = 64;

/// Independent language nodes evaluated as one loop nest (see the module
/// docs).
pub struct HorizontalGroup {
    members: Vec<Arc<LanguageExpression>>,
    location: LocationKind,
}

impl HorizontalGroup {
    /// A group of `members` (at least two language expressions whose
    /// outputs are at `location`; see [`crate::passes::horizontal`]).
    pub(crate) fn new(members: Vec<Arc<LanguageExpression>>, location: LocationKind) -> Self {
        HorizontalGroup { members, location }
    }

    /// The members' language forms, in evaluation order.
    pub fn members(&self) -> impl Iterator<Item = &LanguageExpression> {
        self.members.iter().map(|m| m.as_ref())
    }

    /// How many expressions run side by side.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Always false: a group has at least two members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }
}

impl Expression for HorizontalGroup {
    fn name(&self) -> String {
        let names: Vec<String> = self.members.iter().map(|m| m.name()).collect();
        format!("side by side: {}", names.join(", "))
    }

    fn computes(&self) -> Vec<(Tag, LocationKind)> {
        self.members.iter().flat_map(|m| m.computes()).collect()
    }

    fn requires(&self) -> Vec<Tag> {
        let mut all: Vec<Tag> = Vec::new();
        for tag in self.members.iter().flat_map(|m| m.requires()) {
            if !all.contains(&tag) {
                all.push(tag);
            }
        }
        all
    }

    fn kind(&self) -> ExpressionKind {
        ExpressionKind::Language
    }

    fn kernels(&self, layout: &FieldLayout) -> usize {
        self.members.iter().map(|m| m.kernels(layout)).sum()
    }

    fn parameters_read(&self, layout: &FieldLayout) -> GraphResult<Vec<u64>> {
        let mut ids = Vec::new();
        for member in &self.members {
            ids.extend(member.parameters_read(layout)?);
        }
        ids.sort_unstable();
        ids.dedup();
        Ok(ids)
    }

    fn evaluate(&self, context: &mut EvaluationContext<'_>) -> GraphResult<()> {
        match self.location {
            LocationKind::CellCentre => self.run::<CellCentre>(context),
            LocationKind::XFace => self.run::<XFace>(context),
            LocationKind::YFace => self.run::<YFace>(context),
            LocationKind::ZFace => self.run::<ZFace>(context),
        }
    }
}

impl HorizontalGroup {
    fn run<L: GraphLocation>(&self, context: &mut EvaluationContext<'_>) -> GraphResult<()> {
        let expression = context.expression.to_string();
        let unavailable = |tag: &Tag, reason: &str| GraphError::FieldUnavailable {
            tag: tag.clone(),
            expression: expression.clone(),
            reason: reason.to_string(),
        };
        let region = match context.region {
            Some(region) => Region::Box(region),
            None => Region::Interior,
        };
        let parallelism = context.parallelism;
        let (bindings, outputs) = context.split_for_group()?;
        let bound: Vec<&dyn BoundField> = bindings.iter().map(|b| b as &dyn BoundField).collect();
        let languages: Vec<&LanguageExpression> = self.members().collect();
        // Each member's target, in member order (the guards are distinct,
        // so their `&mut` borrows are too).
        let mut targets: Vec<Option<&mut AnyField>> = languages.iter().map(|_| None).collect();
        for (tag, field) in outputs {
            if let Some(m) = languages.iter().position(|l| l.target() == tag) {
                targets[m] = field;
            }
        }
        let mut thens = Vec::with_capacity(languages.len());
        let mut members = Vec::with_capacity(languages.len());
        for (language, target) in languages.iter().zip(&mut targets) {
            let tag = language.target();
            let field = target
                .as_deref_mut()
                .ok_or_else(|| unavailable(tag, "it has not been allocated"))?;
            let actual = field.kind();
            let field = L::get_mut(field).ok_or_else(|| GraphError::WrongLocation {
                tag: tag.clone(),
                actual,
                requested: L::KIND,
            })?;
            thens.push(language.fused_assignments(field.layout())?);
            members.push((language, field));
        }
        let mut assignments: Vec<NodeAssignment<'_, L>> = members
            .into_iter()
            .zip(&thens)
            .map(|((language, field), then)| NodeAssignment {
                target: field,
                target_leaf: language.target().id(),
                root: language.root(),
                options: AssignOptions {
                    region,
                    parallelism,
                    check_finite: language.checks_finite(),
                    ..Default::default()
                },
                then,
            })
            .collect();
        assign_nodes_then(&mut assignments, &bound).map_err(|error| match &error {
            // Name the member whose value is not finite, as its own node
            // would have been named.
            OperatorError::NotFinite { target, .. } => GraphError::Expression {
                expression: target.clone(),
                source: Box::new(GraphError::Operator(error)),
            },
            _ => GraphError::Operator(error),
        })
    }
}
