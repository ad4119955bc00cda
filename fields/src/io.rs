//! HDF5
