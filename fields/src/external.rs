//! External storage: memory owned by the caller that Watershed never frees.
//!
//! Outer frameworks (Uintah in Wasatch's case) own the memory of the fields
//! they hand to a graph. An [`ExternalBuffer`] wraps such memory: a raw
//! pointer the caller keeps alive, or an `ndarray::Array3` / `Vec` moved in
//! and handed back unchanged by [`crate::SpatialField::into_external`]. It is
//! never taken from or returned to a [`crate::MemoryPool`].

use crate::scalar::FieldScalar;
use ndarray::Array3;
use std::ptr::NonNull;

enum Owner<T> {
    /// The caller owns the memory and keeps it alive.
    Caller,
    /// An array moved in, handed back by `into_array`.
    Array(Array3<T>),
    /// A vector moved in, handed back by `into_vec`.
    Vec(Vec<T>),
}

/// Caller-owned memory a field can use as its CPU storage (x-fastest order).
///
/// ```
/// use ndarray::{Array3, ShapeBuilder};
/// use watershed_fields::ExternalBuffer;
/// let array = Array3::<f64>::zeros((4, 3, 2).f()); // x fastest
/// let buffer = ExternalBuffer::from_array(array).unwrap();
/// assert_eq!(buffer.len(), 24);
/// assert_eq!(buffer.into_array().unwrap().dim(), (4, 3, 2));
/// ```
pub struct ExternalBuffer<T: FieldScalar> {
    pointer: NonNull<T>,
    len: usize,
    shape: Option<[usize; 3]>,
    owner: Owner<T>,
}

// SAFETY: the buffer is exclusively used through the field that holds it; the
// raw-pointer constructor makes the caller promise the same.
unsafe impl<T: FieldScalar> Send for ExternalBuffer<T> {}
// SAFETY: shared access only reads.
unsafe impl<T: FieldScalar> Sync for ExternalBuffer<T> {}

impl<T: FieldScalar> std::fmt::Debug for ExternalBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let owner = match self.owner {
            Owner::Caller => "caller pointer",
            Owner::Array(_) => "ndarray",
            Owner::Vec(_) => "Vec",
        };
        f.debug_struct("ExternalBuffer")
            .field("len", &self.len)
            .field("owner", &owner)
            .finish()
    }
}

impl<T: FieldScalar> ExternalBuffer<T> {
    /// Wraps memory that the caller owns.
    ///
    /// # Safety
    /// `pointer` must be valid for reads and writes of `len` elements, suitably
    /// aligned, not accessed by anything else, and must outlive every field
    /// built on this buffer. Watershed never frees it.
    pub unsafe fn from_raw_parts(pointer: NonNull<T>, len: usize) -> Self {
        ExternalBuffer {
            pointer,
            len,
            shape: None,
            owner: Owner::Caller,
        }
    }

    /// Wraps an array whose memory is contiguous with x fastest, i.e. built
    /// with `Array3::zeros((nx, ny, nz).f())`. Errors (returning nothing
    /// lost: the message says how to build a suitable array) otherwise.
    pub fn from_array(mut array: Array3<T>) -> Result<Self, String> {
        let (nx, ny, nz) = array.dim();
        let strides = array.strides();
        let fortran = array.len() <= 1
            || (strides[0] == 1
                && (ny <= 1 || strides[1] == nx as isize)
                && (nz <= 1 || strides[2] == (nx * ny) as isize));
        if !fortran {
            return Err(format!(
                "the array of shape ({nx}, {ny}, {nz}) has strides {strides:?}; Watershed stores x fastest, so build it with Array3::zeros((nx, ny, nz).f())"
            ));
        }
        let pointer = NonNull::new(array.as_mut_ptr()).ok_or("the array has no memory")?;
        Ok(ExternalBuffer {
            pointer,
            len: array.len(),
            shape: Some([nx, ny, nz]),
            owner: Owner::Array(array),
        })
    }

    /// Wraps a vector holding the field in x-fastest order.
    pub fn from_vec(mut values: Vec<T>) -> Self {
        let pointer = NonNull::new(values.as_mut_ptr()).unwrap_or(NonNull::dangling());
        ExternalBuffer {
            pointer,
            len: values.len(),
            shape: None,
            owner: Owner::Vec(values),
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the buffer holds no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The (nx, ny, nz) shape, for buffers built from an array.
    pub fn shape(&self) -> Option<[usize; 3]> {
        self.shape
    }

    /// Hands back the array this buffer was built from (`None` for other kinds).
    pub fn into_array(self) -> Option<Array3<T>> {
        match self.owner {
            Owner::Array(array) => Some(array),
            _ => None,
        }
    }

    /// Hands back the vector this buffer was built from (`None` for other kinds).
    pub fn into_vec(self) -> Option<Vec<T>> {
        match self.owner {
            Owner::Vec(values) => Some(values),
            _ => None,
        }
    }

    pub(crate) fn as_ptr(&self) -> *mut T {
        self.pointer.as_ptr()
    }
}
