//! The object store on flash: the OSD command set over an object management layer (OML)
//! that shares the FML with the block baselines (seed 000 IV-V, seed 001 III-IV).

pub mod id;
pub mod onode;
pub mod placement;
