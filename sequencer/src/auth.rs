//! Whether a key may act, and the spec's 401 messages. The gateway calls
//! this with the caller's address; the sequencer calls it again, without the
//! address, when the command arrives, so a revocation takes effect at once.

use core::net::IpAddr;

use crate::state::Key;
use crate::types::{Environment, TsMs};

/// Why a key is refused, in the order the checks run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyRefusal {
    /// No key on the request.
    Missing,
    /// Unknown key, or wrong secret.
    Invalid,
    Revoked,
    Expired,
    /// A key of the other environment.
    WrongEnvironment {
        key: Environment,
        server: Environment,
    },
    IpNotAllowed,
    Suspended,
}

impl KeyRefusal {
    /// The spec's message for this refusal.
    pub fn message(self) -> String {
        match self {
            Self::Missing => "Send the API key as `Authorization: Bearer tk_...`.".to_string(),
            Self::Invalid => "Invalid API key.".to_string(),
            Self::Revoked => "This API key has been revoked.".to_string(),
            Self::Expired => "This API key has expired.".to_string(),
            Self::WrongEnvironment { key, server } => format!(
                "This API key is for the {} environment and can't be used on the {} endpoint.",
                key.as_str(),
                server.as_str()
            ),
            Self::IpNotAllowed => "This API key can't be used from this IP address.".to_string(),
            Self::Suspended => "This account is suspended.".to_string(),
        }
    }
}

/// Checks everything about a key except its secret (the gateway compares
/// fingerprints). `ip` is `None` inside the sequencer, which has no address.
pub fn check_key(
    key: &Key,
    account_suspended: bool,
    now: TsMs,
    server: Environment,
    ip: Option<IpAddr>,
) -> Result<(), KeyRefusal> {
    if key.revoked_ts_ms.is_some() {
        return Err(KeyRefusal::Revoked);
    }
    if key.expires_ts_ms.is_some_and(|t| now >= t) {
        return Err(KeyRefusal::Expired);
    }
    if key.environment != server {
        return Err(KeyRefusal::WrongEnvironment {
            key: key.environment,
            server,
        });
    }
    if let Some(ip) = ip {
        if !ip_allowed(&key.ip_allowlist, ip) {
            return Err(KeyRefusal::IpNotAllowed);
        }
    }
    if account_suspended {
        return Err(KeyRefusal::Suspended);
    }
    Ok(())
}

/// An empty allowlist allows every address. IPv4-mapped IPv6 addresses
/// compare as their IPv4 form.
pub fn ip_allowed(allowlist: &[String], ip: IpAddr) -> bool {
    let canonical = |ip: IpAddr| match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    allowlist.is_empty()
        || allowlist
            .iter()
            .filter_map(|a| a.parse::<IpAddr>().ok())
            .any(|a| canonical(a) == canonical(ip))
}
