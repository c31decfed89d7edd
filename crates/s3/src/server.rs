//! The HTTP server: accepts connections, serves each with hyper's HTTP/1.1 and the s3s
//! service, and shuts down gracefully (stop accepting, let requests in flight finish, flush,
//! hand the store back).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use osd::Osd;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::auth::Credentials;
use crate::engine::{Engine, Limits};
use crate::service::{OssdS3, Shared};
use crate::Error;

/// Settings of the S3 face; `Default` gives the documented defaults.
#[derive(Clone, Debug)]
pub struct S3Config {
    /// Object and part limits.
    pub limits: Limits,
    /// How long a client may take to send a request's headers, and how long an idle
    /// keep-alive connection waits for its next request (default 30 s).
    pub header_timeout: Duration,
    /// How long a request body may stall between chunks before the upload fails (default 30 s).
    pub body_timeout: Duration,
    /// How long shutdown waits for requests in flight (default 10 s).
    pub drain_timeout: Duration,
}

impl Default for S3Config {
    fn default() -> Self {
        S3Config {
            limits: Limits::default(),
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(30),
            drain_timeout: Duration::from_secs(10),
        }
    }
}

/// Serves S3 over HTTP on `listener` for the buckets on `store` until `shutdown` completes;
/// then drains, flushes and returns the store (the caller closes it).
pub async fn serve<S, F>(
    listener: TcpListener,
    store: S,
    credentials: Credentials,
    config: S3Config,
    shutdown: F,
) -> Result<S, Error>
where
    S: Osd + Send + 'static,
    F: std::future::Future<Output = ()>,
{
    let limits = config.limits.clone();
    let engine = tokio::task::spawn_blocking(move || Engine::open(store, limits))
        .await
        .map_err(|e| Error::Poisoned(format!("opening the buckets: {e}")))??;
    let shared = Arc::new(Shared {
        engine: Mutex::new(Some(engine)),
        config: config.clone(),
    });
    let mut builder = s3s::service::S3ServiceBuilder::new(OssdS3::new(shared.clone()));
    builder.set_auth(credentials);
    builder.set_access(crate::auth::Access);
    let service = builder.build();
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    let _ = stream.set_nodelay(true);
                    connections.spawn(connection(stream, service.clone(), config.header_timeout, stop_rx.clone()));
                }
                Err(e) => {
                    // Out of descriptors and the like: log and keep accepting.
                    eprintln!("ossd serve --s3: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let drain = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(config.drain_timeout, drain)
        .await
        .is_err()
    {
        eprintln!("ossd serve --s3: drain timed out; closing the remaining connections");
        connections.abort_all();
    }
    let engine = shared
        .engine
        .lock()
        .map_err(|_| Error::Poisoned("a request panicked holding the store".into()))?
        .take()
        .ok_or_else(|| Error::Poisoned("the store was taken twice".into()))?;
    tokio::task::spawn_blocking(move || engine.close())
        .await
        .map_err(|e| Error::Poisoned(format!("closing the buckets: {e}")))?
}

async fn connection(
    stream: tokio::net::TcpStream,
    service: s3s::service::S3Service,
    header_timeout: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .keep_alive(true);
    let conn = http.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    tokio::select! {
        _ = &mut conn => return,
        _ = stop.changed() => {}
    }
    // Finish the request in flight, then close.
    conn.as_mut().graceful_shutdown();
    let _ = conn.await;
}
