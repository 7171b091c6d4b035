//! TLS for every PostgreSQL connection (the source, its `doctor` checks, the destination), by
//! libpq's `sslmode`, with rustls:
//!
//! | `sslmode` | TLS | certificate checked |
//! |---|---|---|
//! | `disable` | never | - |
//! | `prefer` (default) | when the server offers it, else plain | no |
//! | `require` | always (a server without TLS is refused) | no |
//! | `verify-full` | always | chain to a trusted root, and the host name |
//!
//! As in libpq, `prefer` and `require` encrypt without checking who answers (they guard
//! against reading on the wire, not against a server in the middle); `verify-full` checks the
//! chain against `sslrootcert` (a PEM file of CA certificates) or, without it, the system's
//! trusted roots, and the certificate's names against the host connected to.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::config::connectors::PgSslMode;

/// How a connection uses TLS: libpq's `sslmode`, resolved.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum PgTls {
    /// Never.
    Disable,
    /// When the server offers it, without checking the certificate.
    Prefer,
    /// Always, without checking the certificate.
    Require,
    /// Always, checking the chain and the host name.
    VerifyFull {
        /// A PEM file of the CA certificates to trust; `None`: the system's roots.
        root_cert: Option<PathBuf>,
    },
}

impl PgTls {
    /// The `sslmode` tokio-postgres negotiates with (`verify-full` requires TLS like `require`).
    pub fn ssl_mode(&self) -> tokio_postgres::config::SslMode {
        use tokio_postgres::config::SslMode;
        match self {
            PgTls::Disable => SslMode::Disable,
            PgTls::Prefer => SslMode::Prefer,
            PgTls::Require | PgTls::VerifyFull { .. } => SslMode::Require,
        }
    }

    /// The connector for this mode; `None` for `disable`. Built once per mode and process
    /// (the trust store is read once, not at every connection; a destination connects at every
    /// delivery). Fails when `sslrootcert` cannot be read or holds no certificate, or the
    /// system's roots cannot be loaded; the message names the file. A failure is not kept, so
    /// a file fixed meanwhile is read at the next connection.
    pub fn connector(&self) -> Result<Option<MakeRustlsConnect>, String> {
        static BUILT: Mutex<BTreeMap<PgTls, MakeRustlsConnect>> = Mutex::new(BTreeMap::new());
        if *self == PgTls::Disable {
            return Ok(None);
        }
        if let Some(built) = BUILT.lock().ok().and_then(|b| b.get(self).cloned()) {
            return Ok(Some(built));
        }
        let built = self.build()?;
        if let Ok(mut cache) = BUILT.lock() {
            cache.insert(self.clone(), built.clone());
        }
        Ok(Some(built))
    }

    /// A new connector for this mode (not `disable`).
    fn build(&self) -> Result<MakeRustlsConnect, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS set-up: {e}"))?;
        let config = match self {
            PgTls::Disable | PgTls::Prefer | PgTls::Require => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Unchecked {
                    algorithms: provider.signature_verification_algorithms,
                }))
                .with_no_client_auth(),
            PgTls::VerifyFull { root_cert } => {
                let roots = match root_cert {
                    Some(path) => roots_from_file(path)?,
                    None => system_roots()?,
                };
                builder.with_root_certificates(roots).with_no_client_auth()
            }
        };
        Ok(MakeRustlsConnect::new(config))
    }
}

/// A libpq connection string as tokio-postgres reads it, and the `sslmode` it asks for.
/// tokio-postgres knows `disable`, `prefer` and `require`; `verify-full` is negotiated as
/// `require` and the certificate then checked by our connector. `None` when the text is not a
/// connection string (the parser's message may quote the text, a secret, so it is dropped).
pub fn parse_connection_string(text: &str) -> Option<(tokio_postgres::Config, PgSslMode)> {
    let verify_full = text.contains("sslmode=verify-full");
    let config = text
        .replace("sslmode=verify-full", "sslmode=require")
        .parse::<tokio_postgres::Config>()
        .ok()?;
    let mode = match (verify_full, config.get_ssl_mode()) {
        (true, _) => PgSslMode::VerifyFull,
        (false, tokio_postgres::config::SslMode::Disable) => PgSslMode::Disable,
        (false, tokio_postgres::config::SslMode::Require) => PgSslMode::Require,
        (false, _) => PgSslMode::Prefer,
    };
    Some((config, mode))
}

/// The CA certificates in the PEM file `path`.
fn roots_from_file(path: &Path) -> Result<rustls::RootCertStore, String> {
    let shown = path.display();
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("sslrootcert `{shown}`: {e}"))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("sslrootcert `{shown}`: {e}"))?;
    let mut roots = rustls::RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(format!(
            "sslrootcert `{shown}` holds no usable CA certificate (PEM `BEGIN CERTIFICATE` blocks)"
        ));
    }
    Ok(roots)
}

/// The operating system's trusted roots.
fn system_roots() -> Result<rustls::RootCertStore, String> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = rustls::RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let why = found
            .errors
            .first()
            .map(|e| format!(": {e}"))
            .unwrap_or_default();
        return Err(format!(
            "sslmode verify-full: no trusted root certificates found on this system{why}; set `sslrootcert` to the CA file"
        ));
    }
    Ok(roots)
}

/// `prefer` and `require`: any certificate is accepted (libpq's behaviour without a root
/// file); the handshake's signatures are still checked, so the session is encrypted to the
/// holder of the presented key.
#[derive(Debug)]
struct Unchecked {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// Whether `e` (a connection error) is the server's certificate refused by `verify-full`:
/// connecting again cannot help until the configuration or the certificate changes.
pub fn certificate_refused(e: &(dyn std::error::Error + 'static)) -> bool {
    let refused = |tls: &rustls::Error| {
        matches!(
            tls,
            rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented
        )
    };
    let mut source = Some(e);
    while let Some(inner) = source {
        let tls = inner.downcast_ref::<rustls::Error>().or_else(|| {
            inner
                .downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|e| e.downcast_ref::<rustls::Error>())
        });
        if let Some(tls) = tls {
            return refused(tls);
        }
        source = inner.source();
    }
    false
}
