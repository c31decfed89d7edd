//! The native half of the `ossd` Python package (`ossd._ossd`): thin bindings over the same
//! library code the `ossd` command line runs. The pure-Python half (crates/py/python/ossd)
//! turns dicts into `--set` pairs, parses the JSON these functions return, and holds the sweep
//! driver and `ossd.frame`.
//!
//! Every error is raised as `ossd.OssdError` with the Rust error's message (its whole cause
//! chain, as the CLI prints after `error:`). Runs release the GIL, so Python threads can run
//! simulations side by side.

#![deny(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

create_exception!(
    ossd,
    OssdError,
    PyException,
    "An error from ossd: bad settings, a failed run, an unusable image. The message is the \
     Rust error's, as the CLI prints it."
);

fn err(e: anyhow::Error) -> PyErr {
    OssdError::new_err(format!("{e:#}"))
}

/// The device presets: a list of dicts with name, about, capacity_bytes, write_unit_bytes,
/// erase_unit_bytes, dies and the whole device config (as `ossd presets` lists them).
#[pyfunction]
fn presets(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyDict>>> {
    let json = py.import("json")?;
    let mut out = Vec::new();
    for p in flash::presets() {
        let c = p.config;
        let g = c.geometry;
        let d = PyDict::new(py);
        d.set_item("name", p.name)?;
        d.set_item("about", p.about)?;
        d.set_item("capacity_bytes", g.capacity_bytes())?;
        d.set_item("write_unit_bytes", c.write_unit_bytes() as u64)?;
        d.set_item("erase_unit_bytes", c.gang.superblock_bytes(&g))?;
        d.set_item("dies", g.dies())?;
        let config = serde_json::to_string(&c).map_err(|e| err(e.into()))?;
        d.set_item("config", json.call_method1("loads", (config,))?)?;
        out.push(d);
    }
    Ok(out)
}

/// Runs one workload or trace: `sets` are `KEY=VALUE` pairs exactly as `ossd run --set` takes
/// them, over the defaults and an optional TOML file (`config`, as `--config FILE`). Returns
/// the report as JSON, the document `ossd run --json` writes. The GIL is released while the
/// simulation runs.
#[pyfunction]
#[pyo3(signature = (sets, config = None))]
fn run_json(py: Python<'_>, sets: Vec<String>, config: Option<PathBuf>) -> PyResult<String> {
    py.allow_threads(|| {
        let cfg = ossd::settings::build(config.as_deref(), &sets)?;
        let report = lab::run(&cfg, &mut |_, _, _| {}).map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(serde_json::to_string(&report)?)
    })
    .map_err(err)
}

/// Checks run settings without running: the same checks as [`run_json`]; returns the whole
/// configuration they give, as JSON.
#[pyfunction]
#[pyo3(signature = (sets, config = None))]
fn check_json(sets: Vec<String>, config: Option<PathBuf>) -> PyResult<String> {
    let cfg = ossd::settings::build(config.as_deref(), &sets).map_err(err)?;
    serde_json::to_string(&cfg).map_err(|e| err(e.into()))
}

/// `ossd reproduce`: runs the experiments (all, or those whose names start with one of
/// `only`), writes the report into `out`, and returns (results.json's text, report.md's
/// path). The GIL is released while it runs.
#[pyfunction]
#[pyo3(signature = (scale, only, jobs, out, experiments, progress))]
fn reproduce_json(
    py: Python<'_>,
    scale: f64,
    only: Vec<String>,
    jobs: usize,
    out: PathBuf,
    experiments: PathBuf,
    progress: bool,
) -> PyResult<(String, String)> {
    py.allow_threads(|| {
        let args = ossd::reproduce::Args {
            scale,
            only,
            jobs,
            out,
            experiments,
            seeds: 1,
        };
        let (results, report) = ossd::reproduce::reproduce(&args, progress)?;
        Ok((
            serde_json::to_string(&results)?,
            report.display().to_string(),
        ))
    })
    .map_err(err)
}

/// An object store on a device image (made by `ossd format`), open until `close()` (or the
/// end of a `with` block). The image is locked meanwhile, as the CLI's object commands lock
/// it. Encrypted objects are not reachable from Python yet (no master key is taken).
#[pyclass(module = "ossd._ossd")]
struct ObjectStore {
    image: PathBuf,
    /// In a mutex only to be `Sync`, as Python classes must be: the store keeps per-thread
    /// caches in `Cell`s (the index's routing memo). Every method but `__repr__` takes `&mut
    /// self` and reaches it through `get_mut`, without locking.
    open: std::sync::Mutex<Opened>,
}

type Opened = Option<(ossd::store::Store, mount::image::ImageLock)>;

/// The open store and its lock, if open, through `&mut` without locking (a poisoned mutex is
/// impossible: only `__repr__` locks it, and holds it for a read).
fn opened(open: &mut std::sync::Mutex<Opened>) -> &mut Opened {
    match open.get_mut() {
        Ok(o) => o,
        Err(poisoned) => poisoned.into_inner(),
    }
}

impl ObjectStore {
    fn opened(&mut self) -> &mut Opened {
        opened(&mut self.open)
    }

    fn store(&mut self) -> PyResult<&mut ossd::store::Store> {
        match opened(&mut self.open) {
            Some((s, _)) => Ok(s),
            None => Err(OssdError::new_err(format!(
                "the object store on {} is closed",
                self.image.display()
            ))),
        }
    }
}

fn oid(partition: u64, id: &Bound<'_, PyAny>) -> PyResult<osd::Oid> {
    let id: String = match id.extract::<u64>() {
        Ok(n) => n.to_string(),
        Err(_) => id.extract::<String>().map_err(|_| {
            OssdError::new_err("an object id is an int, or a str in decimal or 0x-hex")
        })?,
    };
    ossd::store::oid(partition, &id).map_err(err)
}

fn attr_value<'py>(py: Python<'py>, v: &osd::AttrValue) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        osd::AttrValue::U64(n) => n.into_pyobject(py)?.into_any(),
        osd::AttrValue::Bool(b) => b.into_pyobject(py)?.to_owned().into_any(),
        osd::AttrValue::Pattern(p) => format!("{p:?}").into_pyobject(py)?.into_any(),
        osd::AttrValue::Bytes(b) => PyBytes::new(py, b).into_any(),
        osd::AttrValue::Absent => py.None().into_bound(py),
    })
}

#[pymethods]
impl ObjectStore {
    /// Opens (and locks) the store on `image`; recovery runs if it was not closed cleanly.
    #[new]
    fn new(py: Python<'_>, image: PathBuf) -> PyResult<Self> {
        let opened = py
            .allow_threads(|| ossd::store::open_locked(&image))
            .map_err(err)?;
        Ok(Self {
            image,
            open: std::sync::Mutex::new(Some(opened)),
        })
    }

    /// Creates `image` as an empty object store (one partition, `DEFAULT_PARTITION`) on the
    /// device preset `device` with placement `policy`, as `ossd format` does, and opens it.
    #[staticmethod]
    #[pyo3(signature = (image, device = "rawssd", policy = "semantic", seed = 0))]
    fn format(
        py: Python<'_>,
        image: PathBuf,
        device: &str,
        policy: &str,
        seed: u64,
    ) -> PyResult<Self> {
        let mut cfg = flash::preset(device).map_err(|e| OssdError::new_err(e.to_string()))?;
        cfg.seed = seed;
        let placement: osd::Placement = policy
            .parse()
            .map_err(|e: osd::placement::UnknownPlacement| OssdError::new_err(e.to_string()))?;
        py.allow_threads(|| ossd::store::format(&image, cfg, placement))
            .map_err(err)?;
        Self::new(py, image)
    }

    /// Stores `data` as a new object (id `id`, or one the device picks) with `reliability`
    /// parity units per parity group; flushes the device; returns the object's id.
    #[pyo3(signature = (data, id = None, partition = ossd::store::DEFAULT_PARTITION, reliability = 0))]
    fn put(
        &mut self,
        data: &[u8],
        id: Option<&Bound<'_, PyAny>>,
        partition: u64,
        reliability: u8,
    ) -> PyResult<u64> {
        let want = id
            .map(|i| oid(partition, i))
            .transpose()?
            .map(|o| o.object.0);
        let s = self.store()?;
        ossd::store::put(
            s,
            partition,
            want,
            reliability,
            false,
            osd::compress::Compression::None,
            data,
        )
        .map(|o| o.0)
        .map_err(err)
    }

    /// An object's bytes (every unit checked first).
    #[pyo3(signature = (id, partition = ossd::store::DEFAULT_PARTITION))]
    fn get<'py>(
        &mut self,
        py: Python<'py>,
        id: &Bound<'py, PyAny>,
        partition: u64,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let o = oid(partition, id)?;
        let data = ossd::store::get(self.store()?, o).map_err(err)?;
        Ok(PyBytes::new(py, &data))
    }

    /// Removes an object.
    #[pyo3(signature = (id, partition = ossd::store::DEFAULT_PARTITION))]
    fn rm(&mut self, id: &Bound<'_, PyAny>, partition: u64) -> PyResult<()> {
        use osd::Osd as _;
        let o = oid(partition, id)?;
        self.store()?.remove(o).map_err(|e| err(anyhow::anyhow!(e)))
    }

    /// The objects: {partition id: {object id: length in bytes}}, of one partition or all.
    #[pyo3(signature = (partition = None))]
    fn ls<'py>(&mut self, py: Python<'py>, partition: Option<u64>) -> PyResult<Bound<'py, PyDict>> {
        let listing = ossd::store::ls(self.store()?, partition).map_err(err)?;
        let out = PyDict::new(py);
        for p in listing {
            let objects = PyDict::new(py);
            for (o, len) in p.objects {
                objects.set_item(o, len)?;
            }
            out.set_item(p.partition, objects)?;
        }
        Ok(out)
    }

    /// An object's attributes as `ossd stat` shows them: a dict of name -> value, with
    /// "encryption" and "user" ({id: bytes}).
    #[pyo3(signature = (id, partition = ossd::store::DEFAULT_PARTITION))]
    fn stat<'py>(
        &mut self,
        py: Python<'py>,
        id: &Bound<'py, PyAny>,
        partition: u64,
    ) -> PyResult<Bound<'py, PyDict>> {
        let o = oid(partition, id)?;
        let st = ossd::store::stat(self.store()?, o).map_err(err)?;
        let d = PyDict::new(py);
        d.set_item(
            "encryption",
            if st.encrypted {
                "xchacha20-poly1305"
            } else {
                "none"
            },
        )?;
        for (name, v) in &st.attrs {
            d.set_item(*name, attr_value(py, v)?)?;
        }
        let user = PyDict::new(py);
        for (id, v) in &st.user {
            user.set_item(*id, PyBytes::new(py, v))?;
        }
        d.set_item("user", user)?;
        Ok(d)
    }

    /// Sets an attribute, named and valued as `ossd setattr --attr A --value V` takes them
    /// (priority, expected-size, length, read-only, inode, reliability, or a user id 0x1000+).
    #[pyo3(signature = (id, attr, value, partition = ossd::store::DEFAULT_PARTITION))]
    fn setattr(
        &mut self,
        id: &Bound<'_, PyAny>,
        attr: &str,
        value: &Bound<'_, PyAny>,
        partition: u64,
    ) -> PyResult<()> {
        let o = oid(partition, id)?;
        let value: String = if let Ok(b) = value.extract::<bool>() {
            b.to_string()
        } else {
            value.str()?.to_string()
        };
        ossd::store::setattr(self.store()?, o, attr, &value).map_err(err)
    }

    /// Checks every invariant (and OFS's, when OFS is on the store), closing and reopening
    /// the store around the check. Returns a dict: objects, index_entries, units_scanned,
    /// records_rolled_forward, ofs, ofs_repair_fixes, problems, damaged, clean.
    fn fsck<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (s, lock) = self.opened().take().ok_or_else(|| {
            OssdError::new_err(format!(
                "the object store on {} is closed",
                self.image.display()
            ))
        })?;
        let image = self.image.clone();
        let (f, reopened) = py.allow_threads(move || {
            let f = ossd::store::fsck(s);
            // The lock is still held: reopen under it.
            let reopened = mount::image::open_store(&image).map_err(anyhow::Error::from);
            (f, reopened)
        });
        match reopened {
            Ok(s) => *self.opened() = Some((s, lock)),
            Err(e) => return Err(err(e.context("reopening after fsck"))),
        }
        let f = f.map_err(err)?;
        let d = PyDict::new(py);
        d.set_item("objects", f.objects)?;
        d.set_item("index_entries", f.index_entries)?;
        d.set_item("units_scanned", f.units_scanned)?;
        d.set_item("records_rolled_forward", f.records_rolled_forward)?;
        d.set_item("ofs", f.ofs)?;
        d.set_item("ofs_repair_fixes", f.ofs_repair_fixes)?;
        d.set_item(
            "clean",
            f.problems.is_empty() && f.damaged.is_empty() && f.masked.is_empty(),
        )?;
        d.set_item("problems", PyList::new(py, &f.problems)?)?;
        d.set_item("damaged", PyList::new(py, &f.damaged)?)?;
        d.set_item("masked", PyList::new(py, &f.masked)?)?;
        Ok(d)
    }

    /// Flushes and closes the store, and releases the image's lock. Closing twice is allowed.
    fn close(&mut self) -> PyResult<()> {
        if let Some((s, lock)) = self.opened().take() {
            let r = s.close().map_err(|e| err(anyhow::anyhow!(e)));
            drop(lock);
            r?;
        }
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&mut self, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close()?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        // `&self` here: the one place the mutex is locked (never held anywhere else).
        let open = match self.open.lock() {
            Ok(o) => o.is_some(),
            Err(poisoned) => poisoned.into_inner().is_some(),
        };
        format!(
            "ObjectStore({:?}{})",
            self.image.display().to_string(),
            if open { "" } else { ", closed" }
        )
    }
}

/// The native module, imported by the `ossd` package.
#[pymodule]
fn _ossd(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("OssdError", m.py().get_type::<OssdError>())?;
    m.add_function(wrap_pyfunction!(presets, m)?)?;
    m.add_function(wrap_pyfunction!(run_json, m)?)?;
    m.add_function(wrap_pyfunction!(check_json, m)?)?;
    m.add_function(wrap_pyfunction!(reproduce_json, m)?)?;
    m.add_class::<ObjectStore>()?;
    m.add("DEFAULT_PARTITION", ossd::store::DEFAULT_PARTITION)?;
    Ok(())
}
