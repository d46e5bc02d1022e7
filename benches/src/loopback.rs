//! The bare servers' common part: an axum router served on a tokio runtime
//! of as many workers as the venue is given (its default `workers = 1`), on an ephemeral
//! loopback port, with `TCP_NODELAY` on every accepted socket as the venue
//! sets it; stopped gracefully when dropped.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use tokio::sync::Notify;

use crate::engines::BenchError;

/// A running bare server.
pub struct LoopbackServer {
    pub addr: SocketAddr,
    runtime: Option<tokio::runtime::Runtime>,
    shutdown: Arc<Notify>,
    server: Option<tokio::task::JoinHandle<()>>,
}

impl LoopbackServer {
    /// Serves `router` on `workers` threads named `thread_name` (the CPU
    /// tables group threads by name).
    pub fn start(
        thread_name: &str,
        workers: usize,
        router: Router,
    ) -> Result<LoopbackServer, BenchError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers.max(1))
            .thread_name(thread_name)
            .enable_all()
            .build()?;
        let shutdown = Arc::new(Notify::new());
        let stop = shutdown.clone();
        let (addr, server) = runtime.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            let addr = listener.local_addr()?;
            let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
                let _ = tcp.set_nodelay(true);
            });
            let server = tokio::spawn(async move {
                let _ = axum::serve(listener, router)
                    .with_graceful_shutdown(async move { stop.notified().await })
                    .await;
            });
            Ok::<_, std::io::Error>((addr, server))
        })?;
        Ok(LoopbackServer {
            addr,
            runtime: Some(runtime),
            shutdown,
            server: Some(server),
        })
    }
}

impl Drop for LoopbackServer {
    fn drop(&mut self) {
        let Some(runtime) = self.runtime.take() else {
            return;
        };
        self.shutdown.notify_waiters();
        if let Some(server) = self.server.take() {
            let _ = runtime
                .block_on(async { tokio::time::timeout(Duration::from_secs(5), server).await });
        }
        runtime.shutdown_timeout(Duration::from_secs(1));
    }
}
