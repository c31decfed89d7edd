//! OFS, the object file system (OSSD-13 V-B, OSCM-11 III-A and IV): files and directories as
//! objects on the object store, behind the [`vfs::FileSystem`] interface the lab drives.
//!
//! - Each inode is one data object, id = inode number + 0x10000 (as EXOFS and OSSD-13 do), in
//!   one partition made at format. The root directory is inode [`vfs::ROOT`].
//! - A file's bytes are its object's bytes; its size and modification time are the object's
//!   logical length and modified time, kept by the store in the onode. Its kind and link (the
//!   parent directory) are an inode record in a user attribute, or, with `inode_objects`, in a
//!   small inode object of its own that the store embeds in its onode (OSCM-11 V-D).
//! - A directory's object is a linear-hashing table of name -> inode entries ([`dir`]), so a
//!   lookup reads one bucket however large the directory; with `dirent_objects` the names are
//!   in one small object per entry.
//! - fsync and fdatasync are an object FLUSH, sync a device FLUSH. A superblock attribute on
//!   the root records the layout and a clean flag: a mount after an unclean end repairs the
//!   tree (see [`check`]).
//!
//! - A file's priority is its data object's `Priority` attribute ([`priority`]); the `host`
//!   crate can send a file's reads and writes through OAQ, the host-side scheduler, as object
//!   I/O of that object.
//!
//! See docs/OFS.md for the layout, the formats and what is not built.

#![deny(clippy::unwrap_used, clippy::expect_used)]
#![warn(missing_docs)]

pub mod check;
pub mod config;
pub mod dir;
pub mod fs;
pub mod layout;
pub mod priority;
pub mod store;

pub use config::OfsConfig;
pub use fs::{Ofs, OfsCounters};
pub use store::Store;
