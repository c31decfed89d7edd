// ossd's copy of littlefs2-sys 0.4.0's build script: it compiles littlefs's C source with cc, as
// the original does, but does not run bindgen. The bindings are the ones bindgen 0.70.1
// generated from this lfs.h on x86_64 Linux with the `multiversion` feature (the one littlefs2
// 0.6 turns on), in src/bindings.rs; so building needs a C compiler and no libclang. Why:
// ossd's README promises that its first command works on a fresh machine, and bindgen needs
// libclang, which a fresh Debian does not have (vendor/README.md).
use std::env;

fn main() {
    let littlefs_path = "littlefs";
    for file in ["lfs.h", "lfs.c", "lfs_util.h", "lfs_util.c"] {
        println!("cargo::rerun-if-changed={littlefs_path}/{file}");
    }
    let feature = |name: &str| env::var_os(format!("CARGO_FEATURE_{name}")).is_some();
    for unsupported in ["UNSTABLE_LITTLEFS_PATCHED", "TINYRLIBC"] {
        if feature(unsupported) {
            panic!("ossd's littlefs2-sys copy does not carry the feature {}", unsupported);
        }
    }

    let mut builder = cc::Build::new();
    builder
        .flag("-std=c99")
        .flag("-DLFS_NO_DEBUG")
        .flag("-DLFS_NO_WARN")
        .flag("-DLFS_NO_ERROR")
        // The pre-generated bindings carry lfs_config::disk_version, so always on.
        .flag("-DLFS_MULTIVERSION")
        .include(littlefs_path)
        .file(format!("{littlefs_path}/lfs.c"))
        .file(format!("{littlefs_path}/lfs_util.c"));
    if feature("SOFTWARE_INTRINSICS") {
        builder.flag("-DLFS_NO_INTRINSICS");
    }
    if !feature("ASSERTIONS") {
        builder.flag("-DLFS_NO_ASSERT");
    }
    if feature("TRACE") {
        builder.flag("-DLFS_YES_TRACE");
    }
    if !feature("MALLOC") {
        builder.flag("-DLFS_NO_MALLOC");
    }
    builder.compile("lfs-sys");
}
