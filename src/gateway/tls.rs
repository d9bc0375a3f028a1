//! TLS on the gateway's listener (`--tls-cert FILE --tls-key FILE`, PEM): rustls (its
//! `ring` provider), ALPN `h2` and `http/1.1`. E2B's code-interpreter SDK reaches a sandbox
//! at `https://{port}-{sandboxID}.{domain}` unless given `E2B_SANDBOX_URL`, so a gateway
//! addressed by host names serves a certificate for `*.{domain}`.
//!
//! Handshakes run each in a task of its own, at most [`HANDSHAKE_TIME`] long: a client
//! that connects and sends nothing holds one task and one descriptor until then, never
//! the accepting loop.

use crate::error::{Error, Result};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::server::TlsStream;

/// How long a client may take over its TLS handshake.
const HANDSHAKE_TIME: Duration = Duration::from_secs(10);

/// Connections whose handshake is done, waiting for the HTTP side to take them.
const READY: usize = 64;

/// The server's TLS configuration from PEM files: `cert` the chain (the server's first),
/// `key` its private key (PKCS#8, PKCS#1 or SEC1).
pub fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor> {
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<std::result::Result<Vec<_>, _>>())
        .map_err(|err| {
            Error::input(format!(
                "--tls-cert {}: cannot read a PEM certificate chain: {err}; give the server's certificate (then its CA chain) in PEM",
                cert.display()
            ))
        })?;
    if certs.is_empty() {
        return Err(Error::input(format!(
            "--tls-cert {}: no CERTIFICATE in it; give the server's certificate (then its CA chain) in PEM",
            cert.display()
        )));
    }
    let private = PrivateKeyDer::from_pem_file(key).map_err(|err| {
        Error::input(format!(
            "--tls-key {}: cannot read a PEM private key: {err}; give the certificate's key in PEM (PKCS#8, RSA or EC)",
            key.display()
        ))
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|err| Error::setup(format!("brig gateway: TLS versions: {err}")))?
        .with_no_client_auth()
        .with_single_cert(certs, private)
        .map_err(|err| {
            Error::input(format!(
                "--tls-key {}: does not go with --tls-cert {} ({err}); give the key of that certificate",
                key.display(),
                cert.display()
            ))
        })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// A listener whose connections have done their TLS handshake, for `axum::serve`.
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    address: SocketAddr,
}

impl TlsListener {
    /// Accepts on `listener` in a task of its own, a handshake task a connection.
    pub fn new(listener: TcpListener, acceptor: TlsAcceptor) -> std::io::Result<TlsListener> {
        let address = listener.local_addr()?;
        let (sender, ready) = mpsc::channel(READY);
        tokio::spawn(async move {
            loop {
                let (connection, peer) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    // Out of descriptors, or a connection reset before it was taken:
                    // wait a little rather than spin.
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                if sender.is_closed() {
                    return;
                }
                // Nagle's algorithm would hold each small frame of a stream until the
                // client's delayed ACK.
                let _ = connection.set_nodelay(true);
                let acceptor = acceptor.clone();
                let sender = sender.clone();
                tokio::spawn(async move {
                    let handshake =
                        tokio::time::timeout(HANDSHAKE_TIME, acceptor.accept(connection));
                    if let Ok(Ok(stream)) = handshake.await {
                        let _ = sender.send((stream, peer)).await;
                    }
                });
            }
        });
        Ok(TlsListener { ready, address })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(ready) => ready,
            // The accepting task ends only with the runtime.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.address)
    }
}
