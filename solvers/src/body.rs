//! Solid bodies immersed in a flow: their shape as a signed distance and
//! the rigid motion of their surface.
//!
//! A [`Shape`] is a signed distance `phi(x)`: negative inside the body,
//! zero on its surface, positive in the fluid, `|grad phi| = 1` near the
//! surface. Circles (cylinders), spheres, boxes, their unions and any
//! distance function a user writes are shapes. A [`Body`] is a named shape
//! and the velocity of its surface (at rest, or a rigid rotation about an
//! axis, which keeps a body of revolution in place). What the staggered
//! grid makes of a body (solid and forced faces, the projection's masks,
//! the force weights) is `crate::immersed`'s job.
//!
//! ```
//! use watershed_solvers::{Body, Shape};
//! let cylinder = Body::fixed("cylinder", Shape::circle([0.2, 0.2, 0.0], 0.05));
//! assert!((cylinder.shape().distance([0.3, 0.2, 0.0]) - 0.05).abs() < 1e-15);
//! let rotor = Body::fixed("rotor", Shape::circle([0.0; 3], 1.0)).rotating([0.0, 0.0, 2.0]);
//! assert_eq!(rotor.velocity_at([1.0, 0.0, 0.0]), [0.0, 2.0, 0.0]);
//! ```

use std::fmt;
use std::sync::Arc;

/// A signed distance: negative inside, positive outside.
#[derive(Clone)]
pub enum Shape {
    /// A circle in the plane normal to `axis` (a cylinder along `axis`,
    /// infinite in 3D; a disc in 2D with `axis = 2`).
    Cylinder {
        /// A point on the axis.
        centre: [f64; 3],
        /// The radius.
        radius: f64,
        /// The axis it extends along (0, 1 or 2).
        axis: usize,
    },
    /// A sphere.
    Sphere {
        /// The centre.
        centre: [f64; 3],
        /// The radius.
        radius: f64,
    },
    /// An axis-aligned box `lo <= x <= hi`.
    Box {
        /// The lower corner.
        lo: [f64; 3],
        /// The upper corner.
        hi: [f64; 3],
    },
    /// The union of shapes (the smallest of their distances).
    Union(Vec<Shape>),
    /// The complement of a shape (its distance negated): the solid outside
    /// a circle is the outer wall of an annulus.
    Outside(std::boxed::Box<Shape>),
    /// A distance function of the user's, with a name for messages.
    Distance {
        /// What it is, for messages.
        name: String,
        /// `phi(x)`.
        function: Arc<dyn Fn([f64; 3]) -> f64 + Send + Sync>,
    },
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shape::Cylinder {
                centre,
                radius,
                axis,
            } => write!(
                f,
                "cylinder(centre {centre:?}, radius {radius}, axis {axis})"
            ),
            Shape::Sphere { centre, radius } => {
                write!(f, "sphere(centre {centre:?}, radius {radius})")
            }
            Shape::Box { lo, hi } => write!(f, "box({lo:?} to {hi:?})"),
            Shape::Union(shapes) => f.debug_list().entries(shapes).finish(),
            Shape::Outside(shape) => write!(f, "outside({shape:?})"),
            Shape::Distance { name, .. } => write!(f, "distance '{name}'"),
        }
    }
}

impl Shape {
    /// A disc in the x-y plane (a cylinder along z).
    pub fn circle(centre: [f64; 3], radius: f64) -> Self {
        Shape::Cylinder {
            centre,
            radius,
            axis: 2,
        }
    }

    /// A distance function of the user's.
    pub fn distance_function(
        name: &str,
        function: impl Fn([f64; 3]) -> f64 + Send + Sync + 'static,
    ) -> Self {
        Shape::Distance {
            name: name.to_string(),
            function: Arc::new(function),
        }
    }

    /// The signed distance at `x`.
    pub fn distance(&self, x: [f64; 3]) -> f64 {
        match self {
            Shape::Cylinder {
                centre,
                radius,
                axis,
            } => {
                let squared: f64 = (0..3)
                    .filter(|a| a != axis)
                    .map(|a| (x[a] - centre[a]).powi(2))
                    .sum();
                squared.sqrt() - radius
            }
            Shape::Sphere { centre, radius } => {
                let squared: f64 = (0..3).map(|a| (x[a] - centre[a]).powi(2)).sum();
                squared.sqrt() - radius
            }
            Shape::Box { lo, hi } => {
                // Outside: the distance to the box; inside: minus the
                // distance to the nearest face.
                let (mut outside, mut inside) = (0.0f64, f64::NEG_INFINITY);
                for a in 0..3 {
                    let centre = 0.5 * (lo[a] + hi[a]);
                    let half = 0.5 * (hi[a] - lo[a]);
                    let d = (x[a] - centre).abs() - half;
                    outside += d.max(0.0).powi(2);
                    inside = inside.max(d);
                }
                outside.sqrt() + inside.min(0.0)
            }
            Shape::Union(shapes) => shapes
                .iter()
                .map(|s| s.distance(x))
                .fold(f64::INFINITY, f64::min),
            Shape::Outside(shape) => -shape.distance(x),
            Shape::Distance { function, .. } => function(x),
        }
    }

    /// What is wrong with the shape's numbers (a radius that is not
    /// positive, a box with `lo > hi`, an axis outside 0..=2), if anything.
    pub fn problem(&self) -> Option<String> {
        let finite = |v: &[f64; 3]| v.iter().all(|c| c.is_finite());
        match self {
            Shape::Cylinder {
                centre,
                radius,
                axis,
            } => {
                if *axis > 2 {
                    Some(format!("the cylinder's axis is {axis}; use 0, 1 or 2"))
                } else if !(radius.is_finite() && *radius > 0.0 && finite(centre)) {
                    Some(format!(
                        "the cylinder has radius {radius} and centre {centre:?}: both must be finite, the radius positive"
                    ))
                } else {
                    None
                }
            }
            Shape::Sphere { centre, radius } => {
                (!(radius.is_finite() && *radius > 0.0 && finite(centre))).then(|| {
                    format!(
                        "the sphere has radius {radius} and centre {centre:?}: both must be finite, the radius positive"
                    )
                })
            }
            Shape::Box { lo, hi } => (!finite(lo) || !finite(hi) || (0..3).any(|a| lo[a] > hi[a]))
                .then(|| format!("the box from {lo:?} to {hi:?} needs finite corners with lo <= hi")),
            Shape::Union(shapes) => {
                if shapes.is_empty() {
                    Some("the union has no shapes".into())
                } else {
                    shapes.iter().find_map(Shape::problem)
                }
            }
            Shape::Outside(shape) => shape.problem(),
            Shape::Distance { .. } => None,
        }
    }
}

/// A solid body: a shape and the velocity of its surface.
#[derive(Debug, Clone)]
pub struct Body {
    name: String,
    shape: Shape,
    /// Angular velocity (rad per unit time) of the surface about
    /// `rotation_centre`.
    angular_velocity: [f64; 3],
    rotation_centre: [f64; 3],
    /// The force band ([`Self::force_band`]), if set.
    band: Option<(f64, f64)>,
}

impl Body {
    /// A body at rest.
    pub fn fixed(name: &str, shape: Shape) -> Self {
        let rotation_centre = match &shape {
            Shape::Cylinder { centre, .. } | Shape::Sphere { centre, .. } => *centre,
            _ => [0.0; 3],
        };
        Body {
            name: name.to_string(),
            shape,
            angular_velocity: [0.0; 3],
            rotation_centre,
            band: None,
        }
    }

    /// The surface turns with angular velocity `omega` (a vector, rad per
    /// unit time) about the shape's centre (a cylinder's or a sphere's;
    /// the origin otherwise, see [`Self::rotating_about`]). The shape stays
    /// where it is, so this is a body of revolution spinning in place.
    pub fn rotating(mut self, omega: [f64; 3]) -> Self {
        self.angular_velocity = omega;
        self
    }

    /// [`Self::rotating`] about the point `centre`.
    pub fn rotating_about(mut self, omega: [f64; 3], centre: [f64; 3]) -> Self {
        self.angular_velocity = omega;
        self.rotation_centre = centre;
        self
    }

    /// Where the weight of the force's volume integral falls from 1 to 0:
    /// from `inner` to `outer` distance from the surface (see
    /// `crate::immersed`). Default: from 2 to 8 of the largest grid
    /// spacing. The band must stay two cells away from the domain's
    /// non-periodic sides and from other bodies, else the force of this
    /// body is not computed.
    pub fn force_band(mut self, inner: f64, outer: f64) -> Self {
        self.band = Some((inner, outer));
        self
    }

    /// The band set by [`Self::force_band`], if any.
    pub fn band(&self) -> Option<(f64, f64)> {
        self.band
    }

    /// The body's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The body's shape.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// The velocity of the body's material at `x`: `omega x (x - centre)`.
    pub fn velocity_at(&self, x: [f64; 3]) -> [f64; 3] {
        let r = [0, 1, 2].map(|a| x[a] - self.rotation_centre[a]);
        let w = self.angular_velocity;
        [
            w[1] * r[2] - w[2] * r[1],
            w[2] * r[0] - w[0] * r[2],
            w[0] * r[1] - w[1] * r[0],
        ]
    }

    /// What is wrong with the body's numbers, if anything.
    pub fn problem(&self) -> Option<String> {
        if let Some(problem) = self.shape.problem() {
            return Some(problem);
        }
        if self
            .angular_velocity
            .iter()
            .chain(&self.rotation_centre)
            .any(|v| !v.is_finite())
        {
            return Some(format!(
                "the angular velocity {:?} and its centre {:?} must be finite",
                self.angular_velocity, self.rotation_centre
            ));
        }
        if let Some((inner, outer)) = self.band
            && !(inner.is_finite() && outer.is_finite() && inner >= 0.0 && outer > inner)
        {
            return Some(format!(
                "the force band from {inner} to {outer} needs 0 <= inner < outer, both finite"
            ));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances_of_the_shapes() {
        let sphere = Shape::Sphere {
            centre: [1.0, 2.0, 3.0],
            radius: 0.5,
        };
        assert_eq!(sphere.distance([1.0, 2.0, 4.0]), 0.5);
        assert_eq!(sphere.distance([1.0, 2.0, 3.0]), -0.5);
        let cube = Shape::Box {
            lo: [0.0; 3],
            hi: [1.0; 3],
        };
        assert_eq!(cube.distance([0.5, 0.5, 0.5]), -0.5);
        assert_eq!(cube.distance([0.5, 0.9, 0.5]), -0.09999999999999998);
        assert_eq!(cube.distance([2.0, 0.5, 0.5]), 1.0);
        // The corner region: the Euclidean distance to the corner.
        assert_eq!(cube.distance([4.0, 5.0, 0.5]), 5.0);
        let cylinder = Shape::Cylinder {
            centre: [0.0; 3],
            radius: 1.0,
            axis: 0,
        };
        assert_eq!(cylinder.distance([100.0, 3.0, 4.0]), 4.0);
        let both = Shape::Union(vec![cube, sphere]);
        assert_eq!(both.distance([1.0, 2.0, 3.0]), -0.5);
        assert_eq!(both.distance([0.5, 0.5, 0.5]), -0.5);
        let annulus_wall = Shape::Outside(std::boxed::Box::new(Shape::circle([0.0; 3], 2.0)));
        assert_eq!(annulus_wall.distance([3.0, 0.0, 0.0]), -1.0);
    }

    #[test]
    fn bad_numbers_are_named() {
        let problem = Shape::circle([0.0; 3], -1.0).problem().unwrap();
        assert!(problem.contains("radius -1"), "{problem}");
        let problem = Shape::Box {
            lo: [1.0; 3],
            hi: [0.0; 3],
        }
        .problem()
        .unwrap();
        assert!(problem.contains("lo <= hi"), "{problem}");
        let problem = Body::fixed("c", Shape::circle([0.0; 3], 1.0))
            .force_band(0.3, 0.1)
            .problem()
            .unwrap();
        assert!(problem.contains("inner < outer"), "{problem}");
    }
}
