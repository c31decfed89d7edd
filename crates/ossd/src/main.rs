//! `ossd`: run experiments on the simulated device, format and inspect device images.

#![deny(clippy::unwrap_used, clippy::expect_used)]
#![warn(missing_docs)]

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Parser, Subcommand};
use flash::image::ImageStore;
use flash::{Flash, Nand};
use indicatif::{ProgressBar, ProgressStyle};
use lab::RunReport;

mod benchmount;
mod mountcmd;
mod net;
mod objects;
mod reliability;
mod results;
mod sweep;
mod torture;
mod validate;

use ossd::{reproduce, settings};

#[derive(Parser)]
#[command(
    name = "ossd",
    version,
    about = "Object-based SSD stack: a NAND device model, one flash management layer, block and object mapping layers, and the papers' experiments"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the papers' experiments (experiments/*.toml) on the simulated device and write a
    /// report with plots: report.md, report.html, metrics.csv, results.json.
    Reproduce {
        /// Shrink sizes, counts and the device by this factor (1 = the papers' scale).
        #[arg(long, default_value_t = 0.05)]
        scale: f64,
        /// Only experiments whose names start with these.
        #[arg(long, num_args = 1..)]
        only: Vec<String>,
        /// Parallel jobs (one per experiment variant at a time).
        #[arg(long, default_value_t = 2)]
        jobs: usize,
        /// Where the report goes.
        #[arg(long, default_value = "out/reproduce")]
        out: PathBuf,
        /// Where the experiment definitions are.
        #[arg(long, default_value = "experiments")]
        experiments: PathBuf,
        /// Seeds every experiment runs at: its own and the next ones. A claim whose verdict
        /// (direction or magnitude) changes with the seed is reported unstable, not agreeing.
        /// The pinned paper-scale verdicts use 3 (README: why 1 is the default).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=16))]
        seeds: u64,
    },
    /// Real programs (fio, PostMark, a video reader under a background writer) on OFS mounted
    /// with FUSE and on real ext4 on the page-mapping FTL (`blockdev` under a loop device), with
    /// `--timing emulate` on the same device model; writes `ossd reproduce`'s report, with
    /// OSSD-13 VI-B and VI-F's claims judged. Needs root for ext4; a missing program is SKIPPED.
    BenchMount {
        /// Device preset.
        #[arg(long, default_value = "rawssd")]
        device: String,
        /// Shrink (or grow) run lengths and sizes; 1 takes a few minutes of device time.
        #[arg(long, default_value_t = 1.0)]
        scale: f64,
        /// Where the report goes.
        #[arg(long, default_value = "out/bench-mount")]
        out: PathBuf,
        /// Where the images and mount points go while it runs [default: OUT/work].
        #[arg(long)]
        work: Option<PathBuf>,
        /// Where the experiment definitions (the claims) are.
        #[arg(long, default_value = "experiments")]
        experiments: PathBuf,
        /// emulate: replies wait for the device model's time; none: as fast as the host goes.
        #[arg(long, default_value = "emulate")]
        timing: String,
        /// Age each file system first (OSSD-13 VI-F aged to 85%): fill this percentage of its
        /// blocks with 128 KiB files and rewrite as many, hot/cold, at host speed; 0: no aging.
        #[arg(long = "age", default_value_t = 0.0)]
        age_percent: f64,
    },
    /// The pinned paper-scale verdicts (docs/results/reproduce-1.json) and the documents
    /// generated from them (docs/RESULTS.md, the README's headline): print the headline,
    /// `--write` them from a run's results.json, or `--check` that they have not drifted.
    Results {
        /// A `ossd reproduce --scale 1` run's results.json to pin [default: the pinned file].
        /// Repeatable: later files replace earlier ones' experiments of the same name, so
        /// `--from docs/results/reproduce-1.json --from out/one/results.json` re-pins one
        /// experiment rerun alone.
        #[arg(long)]
        from: Vec<PathBuf>,
        /// Write the pinned file (each claim's why refreshed from its experiment file),
        /// docs/RESULTS.md and the README's headline.
        #[arg(long)]
        write: bool,
        /// Fail when docs/RESULTS.md or the README differ from what the pinned file generates.
        #[arg(long)]
        check: bool,
        /// The repository's root.
        #[arg(long, default_value = ".")]
        root: PathBuf,
    },
    /// Replay another simulator's scenarios on ossd and judge ossd's figures against the
    /// reference's, kept in the validation file (validation/mqsim.toml: MQSim, issue 22).
    Validate {
        /// The validation file.
        #[arg(long, default_value = "validation/mqsim.toml")]
        file: PathBuf,
        /// Only scenarios whose names start with this.
        #[arg(long)]
        only: Option<String>,
        /// Write every scenario's figures and full run report to this JSON file.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Run every point of a grid (axes x fixed settings, keys as `--set`) on Ray (a local
    /// cluster on all cores, or --ray-address), or on local processes without Ray; resumable.
    /// Writes results.csv (and .parquet), sweep.json and report.md. Needs the Python package
    /// (pip install ./crates/py; docs/PYTHON.md).
    Sweep(sweep::Args),
    /// List the built-in device presets.
    Presets,
    /// Run a workload or replay a trace on a simulated device and report every metric.
    #[command(after_long_help = settings::SET_KEYS_HELP)]
    Run(RunArgs),
    /// Create a device image file formatted as an empty object store (one partition, 0x10000).
    Format {
        #[arg(long)]
        image: PathBuf,
        #[arg(long, default_value = "rawssd")]
        device: String,
        /// Placement policy: one (OFS-ONE), combined, semantic, split, split+atime.
        #[arg(long, default_value = "semantic")]
        policy: String,
        /// Seed of the factory bad-block draw.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Also make a file system: `ofs` on the object store, or `blockfs` (the ext4-like
        /// block file system on the page-mapping FTL); mount either with `ossd mount`
        /// (`--fs blockfs` for the second).
        #[arg(long)]
        fs: Option<String>,
        /// Format for the page-mapping FTL instead of the object store: a block device, to
        /// export with `ossd blockdev` (the block baseline for real ext4).
        #[arg(long, conflicts_with_all = ["fs", "policy"])]
        block: bool,
        /// Copies of every object-store metadata unit (index nodes, onodes' descriptor pages,
        /// checkpoints, small-object pages): 1, or 2 to keep a second copy beside each, which
        /// reads and recovery take when the first is damaged (docs/RELIABILITY.md). The image
        /// keeps the setting.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2), conflicts_with = "block")]
        metadata_copies: u8,
    },
    /// Mount the OFS on an image (made by `format --fs ofs`) with FUSE, or with `--fs blockfs`
    /// the ext4-like block file system (made by `format --fs blockfs`). Runs in the
    /// foreground until Ctrl-C, SIGTERM or `fusermount3 -u MOUNTPOINT`, then unmounts cleanly.
    Mount(MountFsArgs),
    /// Export the page-mapping FTL on an image (made by `format --block`) through FUSE as one
    /// file, MOUNTPOINT/disk: reads and writes are sectors, fallocate punch-hole is TRIM, fsync
    /// is FLUSH. Put a loop device on it for a real file system: `losetup -f --show
    /// MOUNTPOINT/disk`, then `mkfs.ext4` and `mount -o discard`. Runs like `ossd mount`.
    Blockdev(MountArgs),
    /// Store a file (or standard input, with -) as an object; prints the object id.
    Put {
        #[arg(long)]
        image: PathBuf,
        #[arg(long, default_value = "0x10000", value_parser = objects::parse_id)]
        partition: u64,
        /// Object id (at least 0x10000); the device assigns one when absent.
        #[arg(long)]
        id: Option<String>,
        /// Parity units per parity group of the object's data (OSCM-11 III; 0 = none, at
        /// most 4): damaged units are rebuilt on read and by `ossd scrub --repair`.
        #[arg(long, default_value_t = 0)]
        reliability: u8,
        /// Encrypt the object (XChaCha20-Poly1305 under a fresh data key wrapped by the device
        /// master key in --key-file; docs/SECURITY.md "Data at rest"). Not with --reliability.
        #[arg(long, requires = "key_file", conflicts_with = "reliability")]
        encrypt: bool,
        /// Per-object compression: none, lz4, zstd, or auto (zstd unless the content starts
        /// like a compressed format; docs/DESIGN.md "Per-object compression"). Chunks that do
        /// not compress by a unit are stored raw. Not with --reliability.
        #[arg(long, default_value = "none", value_parser = parse_compression)]
        compression: osd::compress::Compression,
        /// Device master key file (from `ossd keygen`): needed to encrypt, and to read or
        /// write encrypted objects.
        #[arg(long)]
        key_file: Option<PathBuf>,
        file: String,
    },
    /// Write an object's bytes to a file, or to standard output.
    Get {
        #[command(flatten)]
        object: ObjectRef,
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Remove an object.
    Rm {
        #[command(flatten)]
        object: ObjectRef,
    },
    /// List partitions and their objects.
    Ls {
        #[arg(long)]
        image: PathBuf,
        #[arg(long, value_parser = objects::parse_id)]
        partition: Option<u64>,
    },
    /// Show an object's attributes.
    Stat {
        #[command(flatten)]
        object: ObjectRef,
    },
    /// Set an attribute: priority, expected-size, length, read-only, inode, reliability,
    /// encryption (none | xchacha20-poly1305, on an empty object, with --key-file), compression
    /// (none | lz4 | zstd | auto, on an empty object), or a user id (0x1000+).
    Setattr {
        #[command(flatten)]
        object: ObjectRef,
        #[arg(long)]
        attr: String,
        #[arg(long)]
        value: String,
    },
    /// Apply a script of object commands as one transaction: all of them, durably, or none
    /// (even through a power cut; docs/DESIGN.md "Transactions"). One command a line, `#`
    /// comments: `create [ID]`, `put ID FILE` (the object becomes the file's bytes), `write ID
    /// OFFSET FILE`, `truncate ID LENGTH`, `setattr ID ATTR VALUE` (attributes as `setattr`
    /// takes them, but not services, inode or times), `rm ID`. SCRIPT `-` is standard input.
    /// At most 256 write units of commands and data (1 MiB with 4 KiB units); objects of one
    /// partition; not the data of encrypted objects.
    Txn {
        #[arg(long)]
        image: PathBuf,
        #[arg(long, default_value = "0x10000", value_parser = objects::parse_id)]
        partition: u64,
        /// Device master key file, for images holding encrypted objects.
        #[arg(long)]
        key_file: Option<PathBuf>,
        script: String,
    },
    /// Check every invariant of an object store image; non-zero exit on any problem.
    Fsck {
        #[arg(long)]
        image: PathBuf,
    },
    /// Read every data unit of every object and check it (and each parity group against its
    /// data); with --repair, rebuild damaged units from parity. Non-zero exit while damage is
    /// left.
    Scrub {
        #[arg(long)]
        image: PathBuf,
        /// Rewrite what parity can rebuild (and recompute stale parity).
        #[arg(long)]
        repair: bool,
        /// The quick scan only: parity groups checked against their data units' OOB records,
        /// no payload read (so damaged bytes are not seen).
        #[arg(long, conflicts_with = "repair")]
        quick: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// OSCM-11 Table III: PostMark on OFS with and without per-object parity (parity page
    /// I/Os against all page I/Os), then one failed unit per parity group, read back.
    Reliability(reliability::Args),
    /// Torture a stack: seeded workloads under power cuts and media faults, checked against an
    /// oracle; failures print a seed that `--replay` reruns exactly.
    Torture(torture::TortureArgs),
    /// Serve an image's object store over TCP (the OSD command set with capabilities; see
    /// docs/PROTOCOL.md) and/or S3 over HTTP until SIGTERM or Ctrl-C, then drain, flush and
    /// close the image.
    Serve {
        #[arg(long, required_unless_present = "memory")]
        image: Option<PathBuf>,
        /// Serve a fresh in-memory device of this preset instead of an image (nothing persists;
        /// for measuring the network path apart from the image file).
        #[arg(long, conflicts_with = "image")]
        memory: Option<String>,
        /// Address of the OSD face (port 0 picks one; the chosen address is printed); default
        /// 127.0.0.1:7000 when --key-file is given.
        #[arg(long)]
        listen: Option<String>,
        /// Master key file of the OSD face (from `ossd keygen`).
        #[arg(long, required_unless_present = "s3")]
        key_file: Option<PathBuf>,
        /// Address of the S3 face (HTTP; port 0 picks one, printed as `s3 listening on ...`).
        #[arg(long)]
        s3: Option<String>,
        /// Credentials of the S3 face: a TOML file of `[[credentials]]` access_key / secret_key.
        #[arg(long)]
        s3_credentials: Option<PathBuf>,
        /// Largest S3 object or part, bytes.
        #[arg(long, default_value_t = 5 << 30)]
        s3_max_object_bytes: u64,
        /// Smallest multipart part but the last, bytes (S3: 5 MiB).
        #[arg(long, default_value_t = 5 << 20)]
        s3_min_part_bytes: u64,
        /// Largest frame body accepted.
        #[arg(long, default_value_t = proto::DEFAULT_MAX_FRAME_BYTES)]
        max_frame_bytes: u32,
        /// Seconds a connection may sit idle between frames.
        #[arg(long, default_value_t = 300)]
        idle_timeout_s: u64,
        /// Seconds a started frame may take to arrive whole.
        #[arg(long, default_value_t = 10)]
        frame_timeout_s: u64,
    },
    /// Write a fresh random master key (mode 0600).
    Keygen {
        #[arg(long)]
        out: PathBuf,
        /// Replace an existing file.
        #[arg(long)]
        force: bool,
    },
    /// Rotate the device master key of a stopped image: every encrypted object's data key is
    /// unwrapped with --key-file and wrapped with --new-key-file; no data is rewritten. Run it
    /// again with the same keys if it was interrupted.
    Rekey {
        #[arg(long)]
        image: PathBuf,
        /// The current master key file.
        #[arg(long)]
        key_file: PathBuf,
        /// The new master key file (`ossd keygen --out NEW`).
        #[arg(long)]
        new_key_file: PathBuf,
    },
    /// Print a capability and its capability key (hex) for a client.
    Cap {
        #[arg(long)]
        key_file: PathBuf,
        /// Partition (0 = the device: create and list partitions, device flush).
        #[arg(long, value_parser = objects::parse_id)]
        partition: u64,
        /// One object; all objects of the partition when absent.
        #[arg(long, value_parser = objects::parse_id)]
        object: Option<u64>,
        /// Operations: all, or a list of read, write, create, remove, get-attr, set-attr, list,
        /// flush, partition-admin.
        #[arg(long)]
        ops: String,
        /// Seconds from now until the capability expires.
        #[arg(long, default_value_t = 3600)]
        expires: u64,
        /// The partition's current key version.
        #[arg(long, default_value_t = 0)]
        key_version: u32,
    },
    /// Revoke a partition's capabilities on a stopped image: bump its key version.
    Revoke {
        #[arg(long)]
        image: PathBuf,
        #[arg(long, value_parser = objects::parse_id)]
        partition: u64,
        /// The new key version (default: current + 1).
        #[arg(long)]
        version: Option<u32>,
    },
    /// Measure a running server: MiB/s of large objects and ops/s of small ones.
    BenchNet {
        #[arg(long, default_value = "127.0.0.1:7000")]
        addr: String,
        /// Master key file (the OSD face).
        #[arg(long, required_unless_present = "s3_credentials")]
        key_file: Option<PathBuf>,
        /// Measure the S3 face at --addr instead, with the first access key of this credentials
        /// file (bucket `bench-net`).
        #[arg(long, conflicts_with = "key_file")]
        s3_credentials: Option<PathBuf>,
        #[arg(long, default_value = "0x10000", value_parser = objects::parse_id)]
        partition: u64,
        #[arg(long, default_value_t = 8)]
        clients: usize,
        #[arg(long, default_value_t = 1 << 20)]
        large_bytes: usize,
        #[arg(long, default_value_t = 4096)]
        small_bytes: usize,
        /// Seconds per phase (large write, large read, small write+read).
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
    },
    /// Show a device image's geometry, wear and bad blocks.
    Info {
        #[arg(long)]
        image: PathBuf,
        /// Also write the summary as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Live statistics of an OFS mount (`ossd mount`): write amplification, GC copies,
    /// erases, free blocks, OAQ's merging and the latency per priority class.
    Stats {
        /// Where OFS is mounted.
        mountpoint: PathBuf,
        /// Print the whole document (`MOUNTPOINT/.ossd-stats.json`) instead of a summary.
        #[arg(long)]
        json: bool,
    },
}

/// An object in a store image.
#[derive(clap::Args)]
struct ObjectRef {
    #[arg(long)]
    image: PathBuf,
    #[arg(long, default_value = "0x10000", value_parser = objects::parse_id)]
    partition: u64,
    /// Object id, decimal or 0x-hex.
    #[arg(long)]
    id: String,
    /// Device master key file (from `ossd keygen`), for encrypted objects.
    #[arg(long)]
    key_file: Option<PathBuf>,
}

#[derive(clap::Args)]
struct RunArgs {
    /// Stack under test: ftl (page mapping), dftl (cached page mapping), osd (the object store; `ossd` is accepted too).
    #[arg(long)]
    stack: Option<String>,
    /// Device preset (see `ossd presets`).
    #[arg(long)]
    device: Option<String>,
    /// A TOML file with run settings (same keys as --set).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Built-in workload: seq-write, seq-read, rand-write, rand-read, zipf, hotcold.
    #[arg(long)]
    workload: Option<String>,
    /// Replay a block trace (MQSim ASCII .trace, MSR Cambridge .csv, blkparse text, FIU).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Set any run setting: --set key=value (repeatable; keys listed below).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
    /// Seed of every random choice in the run.
    #[arg(long)]
    seed: Option<u64>,
    /// Write the report as one JSON object to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Run one experiment definition (a TOML file like those in experiments/) instead of a
    /// workload or trace: its variants, claims and report, as `ossd reproduce` does.
    #[arg(long, conflicts_with_all = ["stack", "device", "config", "workload", "trace", "sets", "json"])]
    experiment: Option<PathBuf>,
    /// With --experiment: shrink sizes, counts and the device by this factor [default: 1].
    #[arg(long)]
    scale: Option<f64>,
    /// With --experiment: parallel jobs [default: 2].
    #[arg(long)]
    jobs: Option<usize>,
    /// With --experiment: where the report goes [default: out/run].
    #[arg(long)]
    out: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Rust ignores SIGPIPE, so printing into a closed pipe (`ossd presets | head`) would
    // panic; restore the default (end quietly, as other tools do) for every command that
    // does not write to sockets, where a vanished peer must be an error, not death.
    if !matches!(
        cli.command,
        Command::Serve { .. } | Command::BenchNet { .. }
    ) {
        sigpipe::reset();
    }
    let result = match cli.command {
        Command::BenchMount {
            device,
            scale,
            out,
            work,
            experiments,
            timing,
            age_percent,
        } => benchmount::run(benchmount::Args {
            device,
            scale,
            out,
            work,
            experiments,
            timing,
            age_percent,
        })
        .map(drop)
        .map_err(anyhow::Error::from),
        Command::Reproduce {
            scale,
            only,
            jobs,
            out,
            experiments,
            seeds,
        } => reproduce::run(reproduce::Args {
            scale,
            only,
            jobs,
            out,
            experiments,
            seeds: seeds as usize,
        }),
        Command::Results {
            from,
            write,
            check,
            root,
        } => results::run(results::Args {
            from,
            write,
            check,
            root,
        }),
        Command::Validate { file, only, json } => {
            validate::run(&file, only.as_deref(), json.as_ref())
        }
        Command::Presets => presets(),
        Command::Sweep(args) => match sweep::run(args) {
            Ok(code) => return code,
            Err(e) => Err(e),
        },
        Command::Run(args) => run(args),
        Command::Format {
            image,
            device,
            policy,
            seed,
            fs,
            block,
            metadata_copies,
        } => {
            if block {
                format_block(&image, &device, seed)
            } else {
                format(
                    &image,
                    &device,
                    &policy,
                    seed,
                    fs.as_deref(),
                    metadata_copies,
                )
            }
        }
        Command::Mount(m) => {
            let remote = m.remote.map(|addr| mountcmd::Remote {
                addr,
                // clap's `requires` makes --key-file present with --remote.
                key_file: m.key_file.unwrap_or_default(),
                format: m.format,
            });
            mountcmd::Export::for_fs(&m.fs).and_then(|e| {
                mountcmd::run(mountcmd::Args {
                    remote,
                    ..m.mount.into_args(e)
                })
            })
        }
        Command::Blockdev(m) => mountcmd::run(m.into_args(mountcmd::Export::Block)),
        Command::Info { image, json } => info(&image, json.as_deref()),
        Command::Stats { mountpoint, json } => mountcmd::stats(&mountpoint, json),
        Command::Put {
            image,
            partition,
            id,
            reliability,
            encrypt,
            compression,
            key_file,
            file,
        } => objects::put(
            &image,
            partition,
            id.as_deref(),
            &objects::PutOptions {
                reliability,
                encrypt,
                compression,
                key_file: key_file.as_deref(),
            },
            &file,
        ),
        Command::Get { object: o, output } => objects::get(
            &o.image,
            o.key_file.as_deref(),
            o.partition,
            &o.id,
            output.as_deref(),
        ),
        Command::Rekey {
            image,
            key_file,
            new_key_file,
        } => objects::rekey(&image, &key_file, &new_key_file),
        Command::Rm { object: o } => objects::rm(&o.image, o.partition, &o.id),
        Command::Ls { image, partition } => objects::ls(&image, partition),
        Command::Stat { object: o } => objects::stat(&o.image, o.partition, &o.id),
        Command::Setattr {
            object: o,
            attr,
            value,
        } => objects::setattr(
            &o.image,
            o.key_file.as_deref(),
            o.partition,
            &o.id,
            &attr,
            &value,
        ),
        Command::Txn {
            image,
            partition,
            key_file,
            script,
        } => objects::txn(&image, key_file.as_deref(), partition, &script),
        Command::Fsck { image } => objects::fsck(&image),
        Command::Scrub {
            image,
            repair,
            quick,
            json,
        } => objects::scrub(&image, repair, quick, json),
        Command::Torture(args) => torture::run(args),
        Command::Reliability(args) => reliability::run(args),
        Command::Serve {
            image,
            memory,
            listen,
            key_file,
            max_frame_bytes,
            idle_timeout_s,
            frame_timeout_s,
            s3,
            s3_credentials,
            s3_max_object_bytes,
            s3_min_part_bytes,
        } => net::serve(net::ServeArgs {
            image,
            memory,
            listen,
            key_file,
            max_frame_bytes,
            idle_timeout_s,
            frame_timeout_s,
            s3,
            s3_credentials,
            s3_max_object_bytes,
            s3_min_part_bytes,
        }),
        Command::Keygen { out, force } => net::keygen(&out, force),
        Command::Cap {
            key_file,
            partition,
            object,
            ops,
            expires,
            key_version,
        } => net::cap(&key_file, partition, object, &ops, expires, key_version),
        Command::Revoke {
            image,
            partition,
            version,
        } => net::revoke(&image, partition, version),
        Command::BenchNet {
            addr,
            key_file,
            s3_credentials,
            partition,
            clients,
            large_bytes,
            small_bytes,
            seconds,
        } => match (key_file, s3_credentials) {
            (_, Some(creds)) => net::bench_s3(net::BenchS3Args {
                addr,
                credentials: creds,
                clients,
                large_bytes,
                small_bytes,
                seconds,
            }),
            (Some(key_file), None) => net::bench(net::BenchArgs {
                addr,
                key_file,
                partition,
                clients,
                large_bytes,
                small_bytes,
                seconds,
            }),
            (None, None) => Err(anyhow::anyhow!(
                "give --key-file (OSD) or --s3-credentials (S3)"
            )),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn presets() -> Result<()> {
    println!(
        "{:<14} {:>10} {:>11} {:>12} {:>10}  about",
        "name", "capacity", "write unit", "erase unit", "dies"
    );
    for p in flash::presets() {
        let c = p.config;
        let g = c.geometry;
        println!(
            "{:<14} {:>10} {:>11} {:>12} {:>10}  {}",
            p.name,
            human(g.capacity_bytes()),
            human(c.write_unit_bytes() as u64),
            human(c.gang.superblock_bytes(&g)),
            g.dies(),
            p.about
        );
    }
    Ok(())
}

fn human(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i < UNITS.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[i])
    } else {
        format!("{v:.2} {}", UNITS[i])
    }
}

#[expect(
    clippy::unwrap_used,
    reason = "the progress bar's template is a constant that indicatif accepts"
)]
fn run(args: RunArgs) -> Result<()> {
    // Checked here, not by clap: clap drops a `requires` whose target conflicts with another
    // argument given (e.g. --scale with --workload).
    if args.experiment.is_none()
        && (args.scale.is_some() || args.jobs.is_some() || args.out.is_some())
    {
        anyhow::bail!("--scale, --jobs and --out go with --experiment FILE");
    }
    if let Some(path) = &args.experiment {
        let out = args.out.clone().unwrap_or_else(|| PathBuf::from("out/run"));
        return reproduce::run_one(
            path,
            args.scale.unwrap_or(1.0),
            args.seed,
            args.jobs.unwrap_or(2),
            &out,
        );
    }
    let mut sets = Vec::new();
    if let Some(s) = &args.stack {
        sets.push(format!("stack={s}"));
    }
    if let Some(d) = &args.device {
        sets.push(format!("device={d}"));
    }
    if let Some(w) = &args.workload {
        sets.push(format!("workload.kind={w}"));
    }
    if let Some(t) = &args.trace {
        sets.push(format!("trace={}", t.display()));
    }
    if let Some(s) = args.seed {
        sets.push(format!("seed={s}"));
    }
    sets.extend(args.sets.iter().cloned());
    let cfg = settings::build(args.config.as_deref(), &sets)?;
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template(
            "{prefix:>8} [{bar:40}] {pos}/{len} requests ({per_sec}, eta {eta})",
        )
        .unwrap()
        .progress_chars("=> "),
    );
    let mut last_phase = "";
    let report = lab::run(&cfg, &mut |phase, done, total| {
        if phase != last_phase {
            last_phase = phase;
            bar.reset();
            bar.set_prefix(phase);
            bar.set_length(total);
        }
        bar.set_position(done);
    })
    .map_err(|e| anyhow!("{e}"))?;
    bar.finish_and_clear();
    print_report(&report);
    if let Some(path) = &args.json {
        write_json(path, &report)?;
        println!("\nreport written to {}", path.display());
    }
    Ok(())
}

fn write_json(path: &Path, value: &impl serde::Serialize) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut f =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    serde_json::to_writer_pretty(&mut f, value)?;
    writeln!(f)?;
    Ok(())
}

fn print_report(r: &RunReport) {
    let row = |k: &str, v: String| println!("  {k:<28} {v}");
    println!(
        "{} on {} running {} (seed {})",
        r.stack, r.device, r.workload, r.seed
    );
    row("requests", r.requests.to_string());
    row(
        "host written / read",
        format!(
            "{} / {}",
            human(r.host_write_bytes),
            human(r.host_read_bytes)
        ),
    );
    row(
        "write unit / logical space",
        format!(
            "{} / {} (footprint {})",
            human(r.write_unit_bytes),
            human(r.logical_capacity_bytes),
            human(r.footprint_bytes)
        ),
    );
    row(
        "flash pages programmed",
        r.flash_pages_programmed.to_string(),
    );
    row("flash pages read", r.flash_pages_read.to_string());
    row("flash blocks erased", r.flash_blocks_erased.to_string());
    row("GC unit copies", r.gc_page_copies.to_string());
    row("read-modify-write reads", r.rmw_reads.to_string());
    row(
        "write amplification",
        format!("{:.3}", r.write_amplification),
    );
    if r.index_pages_written + r.index_pages_read > 0 {
        row(
            "mapping pages written / read",
            format!("{} / {}", r.index_pages_written, r.index_pages_read),
        );
    }
    row("virtual time", format!("{:.3} s", r.virtual_seconds));
    row("throughput", format!("{:.2} MiB/s", r.throughput_mib_s));
    row(
        "latency p50 / p99 / p99.9 / max",
        format!(
            "{:.1} / {:.1} / {:.1} / {:.1} us",
            r.p50_us, r.p99_us, r.p999_us, r.max_us
        ),
    );
    if r.read_latency.count > 0 {
        row(
            "  reads p50 / p99",
            format!(
                "{:.1} / {:.1} us",
                r.read_latency.p50_us, r.read_latency.p99_us
            ),
        );
    }
    if r.write_latency.count > 0 {
        row(
            "  writes p50 / p99",
            format!(
                "{:.1} / {:.1} us",
                r.write_latency.p50_us, r.write_latency.p99_us
            ),
        );
    }
    row(
        "erase count min / max / mean",
        format!(
            "{} / {} / {:.2}",
            r.erase_count_min, r.erase_count_max, r.erase_count_mean
        ),
    );
    row("reads verified", r.verified_reads.to_string());
    row(
        "wall time",
        format!(
            "{:.2} s ({:.0} requests/s)",
            r.wall_seconds, r.requests_per_wall_second
        ),
    );
}

fn format_block(image: &Path, device: &str, seed: u64) -> Result<()> {
    let mut cfg = flash::preset(device).map_err(|e| anyhow!(e))?;
    cfg.seed = seed;
    let capacity = mount::blockdev::format(image, cfg)?;
    println!(
        "formatted {} as a block device on {device}: the page-mapping FTL, {} of logical space; export it with: ossd blockdev --image {} DIR",
        image.display(),
        human(capacity),
        image.display()
    );
    Ok(())
}

fn format(
    image: &Path,
    device: &str,
    policy: &str,
    seed: u64,
    fs: Option<&str>,
    metadata_copies: u8,
) -> Result<()> {
    let mut cfg = flash::preset(device).map_err(|e| anyhow!(e))?;
    cfg.seed = seed;
    let placement: osd::Placement = policy.parse()?;
    match fs {
        None => {}
        Some("ofs") => {
            let store = osd::OsdConfig {
                metadata_copies,
                ..mount::image::store_config(&cfg, placement)
            };
            mount::image::format_with(image, cfg, store, ofs::OfsConfig::default())?;
            println!(
                "formatted {} as an object store on {device} ({}, placement {placement}) with OFS on it; mount it with: ossd mount --image {} MOUNTPOINT",
                image.display(),
                human(cfg.geometry.capacity_bytes()),
                image.display()
            );
            return Ok(());
        }
        Some("blockfs") => {
            if placement != osd::Placement::Semantic {
                bail!("--policy is an object store setting; --fs blockfs has no placement policy");
            }
            if metadata_copies != 1 {
                bail!("--metadata-copies is an object store setting; --fs blockfs has no object store");
            }
            let data = mount::blockfs_mount::format(image, cfg, blockfs::BlockFsConfig::default())?;
            println!(
                "formatted {} on {device} as the page-mapping FTL with the ext4-like block file system on it ({} for file data); mount it with: ossd mount --fs blockfs --image {} MOUNTPOINT",
                image.display(),
                human(data),
                image.display()
            );
            return Ok(());
        }
        Some(other) => bail!("--fs {other}: the file systems ossd formats are ofs and blockfs"),
    }
    objects::format(image, cfg, placement, metadata_copies)?;
    println!(
        "formatted {} as an object store on {device} ({}, placement {placement}{}); partition {:#x} created",
        image.display(),
        human(cfg.geometry.capacity_bytes()),
        if metadata_copies == 2 {
            ", two copies of its metadata"
        } else {
            ""
        },
        objects::DEFAULT_PARTITION
    );
    Ok(())
}

/// The options of `ossd mount` and `ossd blockdev`.
#[derive(clap::Args)]
struct MountArgs {
    /// The device image (made by `ossd format`).
    #[arg(long)]
    image: Option<PathBuf>,
    mountpoint: PathBuf,
    /// Run in the background; returns once the mount is in place.
    #[arg(long)]
    daemon: bool,
    /// Where the background daemon's messages go (with --daemon).
    #[arg(long)]
    log: Option<PathBuf>,
    /// none: reply when done; emulate: hold each reply until the device model's
    /// completion time, so programs feel the simulated device.
    #[arg(long, default_value = "none")]
    timing: String,
    /// Let other users use the mount (FUSE allow_other).
    #[arg(long)]
    allow_other: bool,
    /// Call OFS directly, one call at a time, instead of through OAQ and the device-side
    /// controller (the default host path); a reference for comparisons.
    #[arg(long)]
    direct: bool,
    /// Where the statistics (`.ossd-stats.json`) are written on unmount (default: IMAGE.stats.json
    /// beside the image).
    #[arg(long)]
    stats_out: Option<PathBuf>,
}

/// The options of `ossd mount`: those of `ossd blockdev`, and which file system.
#[derive(clap::Args)]
struct MountFsArgs {
    #[command(flatten)]
    mount: MountArgs,
    /// The file system on the image: ofs (made by `format --fs ofs`) or blockfs (made by
    /// `format --fs blockfs`).
    #[arg(long, default_value = "ofs")]
    fs: String,
    /// Mount the OFS of a remote target (`ossd serve --listen ADDR --key-file K`) instead of
    /// an image: OFS runs here and sends OSD commands over TCP (needs --key-file).
    #[arg(long, value_name = "ADDR", requires = "key_file")]
    remote: Option<String>,
    /// The target's master key file (with --remote).
    #[arg(long, requires = "remote")]
    key_file: Option<PathBuf>,
    /// With --remote: format OFS on the target's store if it holds none.
    #[arg(long, requires = "remote")]
    format: bool,
}

impl MountArgs {
    fn into_args(self, export: mountcmd::Export) -> mountcmd::Args {
        mountcmd::Args {
            export,
            remote: None,
            image: self.image,
            mountpoint: self.mountpoint,
            daemon: self.daemon,
            log: self.log,
            timing: self.timing,
            allow_other: self.allow_other,
            direct: self.direct,
            stats_out: self.stats_out,
        }
    }
}

#[derive(serde::Serialize)]
struct Info {
    image: String,
    /// What the image was formatted for (`flash::image::ImageContent`).
    content: String,
    device: flash::DeviceConfig,
    capacity_bytes: u64,
    blocks: u32,
    pages_programmed: u64,
    erase_count_min: u32,
    erase_count_max: u32,
    erase_count_mean: f64,
    factory_bad_blocks: Vec<String>,
    grown_bad_blocks: Vec<String>,
    /// An object store's space: logical and physical bytes, overall and of compressed
    /// objects.
    #[serde(skip_serializing_if = "Option::is_none")]
    objects: Option<osd::store::SpaceTotals>,
}

fn parse_compression(s: &str) -> Result<osd::compress::Compression, String> {
    osd::compress::Compression::from_name(s)
        .ok_or_else(|| format!("'{s}' is not a compression: none, lz4, zstd or auto"))
}

fn info(image: &Path, json: Option<&Path>) -> Result<()> {
    let (cfg, store) = ImageStore::open(image)?;
    let is_store = store.content() == flash::image::ImageContent::ObjectStore;
    let content = store.content().to_string();
    let nand = Nand::open(cfg, store)?;
    let g = cfg.geometry;
    let (mut min, mut max, mut sum, mut programmed) = (u32::MAX, 0u32, 0u64, 0u64);
    let (mut factory, mut grown) = (Vec::new(), Vec::new());
    for i in 0..g.blocks() {
        let addr = g.block_at(i);
        let b = nand.block_info(addr);
        min = min.min(b.erase_count);
        max = max.max(b.erase_count);
        sum += b.erase_count as u64;
        programmed += b.next_page as u64;
        if b.factory_bad {
            factory.push(addr.to_string());
        } else if b.bad {
            grown.push(addr.to_string());
        }
    }
    let info = Info {
        image: image.display().to_string(),
        content,
        device: cfg,
        capacity_bytes: g.capacity_bytes(),
        blocks: g.blocks(),
        pages_programmed: programmed,
        erase_count_min: min,
        erase_count_max: max,
        erase_count_mean: sum as f64 / g.blocks() as f64,
        factory_bad_blocks: factory,
        grown_bad_blocks: grown,
        objects: None,
    };
    drop(nand);
    let mut info = info;
    if is_store {
        let mut s = objects::open(image)?;
        info.objects = Some(s.space_totals().map_err(|e| anyhow!(e))?);
        objects::close(s)?;
    }
    println!("image {}", info.image);
    println!("  content    {}", info.content);
    println!(
        "  geometry   {} channels x {} dies x {} planes x {} blocks x {} pages x {} B (+{} B spare)",
        g.channels, g.dies_per_channel, g.planes_per_die, g.blocks_per_plane, g.pages_per_block, g.page_size_bytes, g.oob_size_bytes
    );
    println!(
        "  capacity   {} in {} blocks; write unit {}",
        human(info.capacity_bytes),
        info.blocks,
        human(cfg.write_unit_bytes() as u64)
    );
    println!(
        "  timing     read {} ns, program {} ns, erase {} ns, bus {} MB/s",
        cfg.timing.read_ns, cfg.timing.program_ns, cfg.timing.erase_ns, cfg.timing.bus_mb_s
    );
    println!(
        "  programmed {} pages ({})",
        programmed,
        human(programmed * g.page_size_bytes as u64)
    );
    println!(
        "  wear       erase count min {min} / max {max} / mean {:.2} (endurance {})",
        info.erase_count_mean, cfg.endurance_cycles
    );
    println!(
        "  bad blocks {} factory, {} grown",
        info.factory_bad_blocks.len(),
        info.grown_bad_blocks.len()
    );
    for b in info.grown_bad_blocks.iter().take(20) {
        println!("    grown bad: {b}");
    }
    if let Some(t) = &info.objects {
        println!(
            "  objects    {} objects: {} logical in {} of flash ({})",
            t.objects,
            human(t.logical_bytes),
            human(t.physical_bytes),
            objects::saved(t.logical_bytes, t.physical_bytes)
        );
        println!(
            "  compressed {} objects: {} logical in {} of flash ({})",
            t.compressed_objects,
            human(t.compressed_logical_bytes),
            human(t.compressed_physical_bytes),
            objects::saved(t.compressed_logical_bytes, t.compressed_physical_bytes)
        );
    }
    if let Some(path) = json {
        write_json(path, &info)?;
    }
    if min == u32::MAX {
        bail!("image has no blocks");
    }
    Ok(())
}
