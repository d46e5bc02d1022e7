//! Reading the bearer key and the failed-attempt lockout. The secret is
//! hashed here, on the gateway thread, and dropped: only its SHA-256 goes on
//! to the sequencer thread, which compares it in constant time.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use sequencer::auth::KeyRefusal;
use sequencer::types::Environment;
use sequencer::ErrorCode;
use sha2::{Digest, Sha256};

use crate::engine::Caller;
use crate::error::ApiError;

/// The neutral key prefix of the spec.
pub const KEY_PREFIX: &str = "tk";

/// A key string taken apart: `tk_<live|test>_<key_id>_<secret>`.
#[derive(Debug, PartialEq, Eq)]
pub struct KeyParts<'a> {
    pub environment: Environment,
    pub key_id: &'a str,
    pub secret: &'a str,
}

/// A caller's key id, kept inline: at most `KEY_ID_LEN_MAX` bytes, as
/// `split_key` checked them. A `String` here was allocated on a gateway
/// thread and freed on the sequencer's with every request, where glibc's
/// free of another thread's block costs a few percent of that thread.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct KeyIdText {
    bytes: [u8; sequencer::limits::KEY_ID_LEN_MAX],
    len: u8,
}

impl KeyIdText {
    /// `None` when longer than a key id may be.
    pub fn new(text: &str) -> Option<KeyIdText> {
        let mut bytes = [0; sequencer::limits::KEY_ID_LEN_MAX];
        bytes
            .get_mut(..text.len())?
            .copy_from_slice(text.as_bytes());
        Some(KeyIdText {
            bytes,
            len: text.len() as u8,
        })
    }

    pub fn as_str(&self) -> &str {
        // Always whole: copied from a `&str`, never cut.
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or_default()
    }
}

impl std::fmt::Debug for KeyIdText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

/// Splits a key string; `None` when it is not of the key format.
pub fn split_key(key: &str) -> Option<KeyParts<'_>> {
    let mut parts = key.splitn(4, '_');
    let (prefix, env, key_id, secret) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if prefix != KEY_PREFIX
        || secret.is_empty()
        || secret.contains('_')
        || !sequencer::validate::is_key_id(key_id)
    {
        return None;
    }
    Some(KeyParts {
        environment: Environment::parse(env)?,
        key_id,
        secret,
    })
}

/// SHA-256 of a secret: the only form in which a secret is kept.
pub fn fingerprint(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// The token of an `Authorization: Bearer <token>` value. The scheme is
/// matched without regard to case (RFC 9110 11.1); no token, or another
/// scheme, is no key at all.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("Bearer") && !token.is_empty()).then_some(token)
}

fn unauthorized(refusal: KeyRefusal) -> ApiError {
    ApiError::new(ErrorCode::Unauthorized, refusal.message())
}

/// The caller of a request that needs a key. Checks what can be checked
/// without the registry: presence, format and environment.
pub fn caller(
    headers: &HeaderMap,
    ip: IpAddr,
    server: Environment,
    rate_limited: bool,
) -> Result<Caller, ApiError> {
    // Exactly one: with two (a proxy's and the client's, say) which one
    // is the caller's key cannot be told.
    let mut sent = headers.get_all(axum::http::header::AUTHORIZATION).iter();
    let value = match (sent.next(), sent.next()) {
        (Some(value), None) => value.to_str().ok(),
        _ => None,
    }
    .ok_or_else(|| unauthorized(KeyRefusal::Missing))?;
    let key = bearer_token(value).ok_or_else(|| unauthorized(KeyRefusal::Missing))?;
    // A token was sent: whatever its form, it is a key that does not exist,
    // answered (and counted towards the lockout) like any other.
    let parts = split_key(key).ok_or_else(|| unauthorized(KeyRefusal::Invalid))?;
    if parts.environment != server {
        return Err(unauthorized(KeyRefusal::WrongEnvironment {
            key: parts.environment,
            server,
        }));
    }
    Ok(Caller {
        // `split_key` checked its length.
        key_id: KeyIdText::new(parts.key_id).ok_or_else(|| unauthorized(KeyRefusal::Invalid))?,
        fingerprint: fingerprint(parts.secret),
        ip,
        rate_limited,
        proven: false,
    })
}

/// Failed authentications per address; an address with too many in the
/// window is locked out for the same length.
pub struct Lockout {
    failures: u32,
    window: Duration,
    entries: Mutex<Entries>,
    /// Addresses tracked at most (`LOCKOUT_ENTRIES_MAX` but in tests).
    capacity: usize,
}

struct Entries {
    map: HashMap<IpAddr, Entry>,
    /// When ended entries were last swept out (a sweep walks them all, so
    /// it runs at most once a second however fast failures come).
    swept: Option<Instant>,
    /// Until when the table is known to be full of locked-out parties: a
    /// failure from a new party is not counted, without a walk of the
    /// table for one to forget (looked at again at most once a second).
    full_until: Option<Instant>,
}

/// Whom a failure counts against: an IPv4 address, or an IPv6 address's
/// /64 (one host can use a whole /64, so per-address counting would let
/// it try keys without end and fill the table).
pub(crate) fn party(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(std::net::Ipv6Addr::from(
                u128::from(v6) & !((1u128 << 64) - 1),
            )),
        },
        v4 => v4,
    }
}

struct Entry {
    count: u32,
    since: Instant,
    locked_until: Option<Instant>,
}

/// Addresses tracked at once; the oldest are forgotten past this.
const LOCKOUT_ENTRIES_MAX: usize = 100_000;

impl Lockout {
    pub fn new(failures: u32, window: Duration) -> Self {
        Self::with_capacity(failures, window, LOCKOUT_ENTRIES_MAX)
    }

    fn with_capacity(failures: u32, window: Duration, capacity: usize) -> Self {
        Self {
            failures: failures.max(1),
            window,
            entries: Mutex::new(Entries {
                map: HashMap::new(),
                swept: None,
                full_until: None,
            }),
            capacity: capacity.max(1),
        }
    }

    /// `Err(429)` while the address is locked out.
    pub fn check(&self, ip: IpAddr) -> Result<(), ApiError> {
        self.check_at(ip, Instant::now())
    }

    /// `check` as of `now` (the tests set the time).
    fn check_at(&self, ip: IpAddr, now: Instant) -> Result<(), ApiError> {
        let entries = self.entries.lock().expect("lockout lock");
        if let Some(until) = entries.map.get(&party(ip)).and_then(|e| e.locked_until) {
            if until > now {
                let secs = (until - now).as_secs_f64().ceil() as u64;
                return Err(ApiError::rate_limited(
                    "Too many failed authentication attempts from this address; wait before trying again.",
                    secs,
                ));
            }
        }
        Ok(())
    }

    /// Records one failure; returns true when it locked the address.
    pub fn fail(&self, ip: IpAddr) -> bool {
        self.fail_at(ip, Instant::now())
    }

    /// `fail` as of `now` (the tests set the time; it never goes back).
    fn fail_at(&self, ip: IpAddr, now: Instant) -> bool {
        let ip = party(ip);
        let mut guard = self.entries.lock().expect("lockout lock");
        let entries = &mut *guard;
        if entries.map.len() >= self.capacity && !entries.map.contains_key(&ip) {
            if entries.full_until.is_some_and(|until| now < until) {
                return false;
            }
            if entries
                .swept
                .is_none_or(|at| now.duration_since(at) >= Duration::from_secs(1))
            {
                entries.swept = Some(now);
                entries.map.retain(|_, e| {
                    now.duration_since(e.since) < self.window
                        || e.locked_until.is_some_and(|u| u > now)
                });
            }
            if entries.map.len() >= self.capacity {
                // Full of live entries: forget one not locked out, so the
                // table stays bounded and locked addresses stay locked.
                let unlocked = entries
                    .map
                    .iter()
                    .find(|(_, e)| e.locked_until.is_none())
                    .map(|(&k, _)| k);
                match unlocked {
                    Some(k) => {
                        entries.map.remove(&k);
                    }
                    None => {
                        tracing::warn!(
                            "the lockout table is full of locked-out addresses; failures from new ones are not counted for a second"
                        );
                        entries.full_until = Some(now + Duration::from_secs(1));
                        return false;
                    }
                }
            }
        }
        let entry = entries.map.entry(ip).or_insert(Entry {
            count: 0,
            since: now,
            locked_until: None,
        });
        if now.duration_since(entry.since) > self.window
            || entry.locked_until.is_some_and(|u| u <= now)
        {
            *entry = Entry {
                count: 0,
                since: now,
                locked_until: None,
            };
        }
        entry.count += 1;
        if entry.count >= self.failures && entry.locked_until.is_none() {
            entry.locked_until = Some(now + self.window);
            return true;
        }
        false
    }
}

/// A random lowercase alphanumeric string from the operating system's
/// generator (key ids, secrets, admin tokens).
pub fn random_token(len: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut bytes = vec![0u8; len];
    getrandom::fill(&mut bytes).expect("the operating system's random generator");
    // 252 is the largest multiple of 36 below 256; rejection keeps it uniform.
    let mut out = String::with_capacity(len);
    let mut pool = bytes;
    while out.len() < len {
        for &b in &pool {
            if b < 252 && out.len() < len {
                out.push(ALPHABET[usize::from(b % 36)] as char);
            }
        }
        pool = vec![0u8; len];
        getrandom::fill(&mut pool).expect("the operating system's random generator");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_id_is_kept_whole_up_to_its_longest() {
        let longest = "k".repeat(sequencer::limits::KEY_ID_LEN_MAX);
        let id = KeyIdText::new(&longest).unwrap();
        assert_eq!(id.as_str(), longest);
        assert_eq!(KeyIdText::new("abc123").unwrap().as_str(), "abc123");
        assert_eq!(
            format!("{:?}", KeyIdText::new("abc123").unwrap()),
            "\"abc123\""
        );
        assert_eq!(KeyIdText::new(&format!("{longest}k")), None);
        // Every key id `split_key` accepts fits.
        let key = format!("tk_test_{longest}_secret");
        let parts = split_key(&key).unwrap();
        assert_eq!(KeyIdText::new(parts.key_id).unwrap().as_str(), longest);
    }

    /// One Authorization header is read; two are refused as no key, not
    /// settled by taking the first (a security trial's finding).
    #[test]
    fn two_authorization_headers_are_refused() {
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let mut headers = HeaderMap::new();
        let key = "Bearer tk_test_abc123_s3cr3t";
        headers.append(axum::http::header::AUTHORIZATION, key.parse().unwrap());
        assert!(caller(&headers, ip, Environment::Test, true).is_ok());
        headers.append(axum::http::header::AUTHORIZATION, key.parse().unwrap());
        let refused = caller(&headers, ip, Environment::Test, true).unwrap_err();
        assert_eq!(refused.status(), axum::http::StatusCode::UNAUTHORIZED);
        assert_eq!(
            refused.message,
            "Send the API key as `Authorization: Bearer tk_...`."
        );
    }

    #[test]
    fn key_strings() {
        let parts = split_key("tk_test_abc123_s3cr3t").unwrap();
        assert_eq!(
            parts,
            KeyParts {
                environment: Environment::Test,
                key_id: "abc123",
                secret: "s3cr3t"
            }
        );
        assert!(split_key("tk_prod_abc_s").is_none());
        assert!(split_key("xx_test_abc_s").is_none());
        assert!(split_key("tk_test_abc_").is_none());
        assert!(split_key("tk_test_ABC_s").is_none());
        assert!(split_key("tk_test_abc_s_t").is_none());
    }

    #[test]
    fn lockout_after_failures() {
        let lockout = Lockout::new(3, Duration::from_secs(60));
        let ip: IpAddr = "127.0.0.9".parse().unwrap();
        assert!(!lockout.fail(ip));
        assert!(!lockout.fail(ip));
        lockout.check(ip).unwrap();
        assert!(lockout.fail(ip));
        let e = lockout.check(ip).unwrap_err();
        assert_eq!(e.code, ErrorCode::RateLimited);
        assert!(e.retry_after_secs.unwrap() >= 59);
        lockout.check("127.0.0.8".parse().unwrap()).unwrap();
    }

    /// Failures older than the window are forgotten, and a lockout ends
    /// after the window.
    #[test]
    fn failures_and_lockouts_expire_after_the_window() {
        let (t0, window) = (Instant::now(), Duration::from_secs(60));
        let at = |s: u64| t0 + Duration::from_secs(s);
        let ip: IpAddr = "127.0.0.9".parse().unwrap();
        let lockout = Lockout::new(3, window);
        assert!(!lockout.fail_at(ip, at(0)));
        assert!(!lockout.fail_at(ip, at(1)));
        assert!(
            !lockout.fail_at(ip, at(61)),
            "two old failures and a new one"
        );
        lockout.check_at(ip, at(61)).unwrap();

        let strict = Lockout::new(1, window);
        assert!(strict.fail_at(ip, at(0)));
        assert!(
            strict.check_at(ip, at(59)).is_err(),
            "locked for the window"
        );
        strict.check_at(ip, at(60)).expect("the lockout ended");
        assert!(strict.fail_at(ip, at(60)), "a failure after it locks anew");
    }

    #[test]
    fn tokens_are_random_and_of_the_alphabet() {
        let a = random_token(32);
        let b = random_token(32);
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
        assert!(a
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()));
    }

    #[test]
    fn an_ipv6_slash_64_counts_as_one_address() {
        let lockout = Lockout::new(3, Duration::from_secs(60));
        for host in ["2001:db8:1:2::1", "2001:db8:1:2::2", "2001:db8:1:2:ffff::9"] {
            lockout.fail(host.parse().unwrap());
        }
        assert!(lockout.check("2001:db8:1:2::77".parse().unwrap()).is_err());
        lockout.check("2001:db8:1:3::1".parse().unwrap()).unwrap();
        // An IPv4 address written as IPv6 is that IPv4 address.
        for _ in 0..3 {
            lockout.fail("::ffff:192.0.2.7".parse().unwrap());
        }
        assert!(lockout.check("192.0.2.7".parse().unwrap()).is_err());
    }

    #[test]
    fn the_table_stays_bounded_and_keeps_locked_addresses() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let lockout = Lockout::with_capacity(2, Duration::from_secs(60), 4);
        let locked: IpAddr = "10.0.0.1".parse().unwrap();
        lockout.fail_at(locked, ms(0));
        lockout.fail_at(locked, ms(0));
        for i in 2..200u8 {
            lockout.fail_at(IpAddr::from([10, 0, 1, i]), ms(1));
            assert!(lockout.entries.lock().unwrap().map.len() <= 4);
        }
        assert!(lockout.check_at(locked, ms(1)).is_err(), "still locked out");
        // Full of locked-out parties: a new one's failure is not counted,
        // and the table is not walked again for a second.
        for i in 2..5u8 {
            let ip = IpAddr::from([10, 0, 2, i]);
            lockout.fail_at(ip, ms(2));
            lockout.fail_at(ip, ms(2));
        }
        let entries = |l: &Lockout| l.entries.lock().unwrap().map.len();
        let full_until = |l: &Lockout| l.entries.lock().unwrap().full_until;
        assert_eq!(entries(&lockout), 4);
        assert!(!lockout.fail_at(IpAddr::from([10, 0, 3, 1]), ms(3)));
        assert_eq!(full_until(&lockout), Some(ms(1_003)), "for a second");
        // Within that second: refused without a walk, which would have set
        // the time anew.
        assert!(!lockout.fail_at(IpAddr::from([10, 0, 3, 2]), ms(500)));
        assert_eq!(full_until(&lockout), Some(ms(1_003)));
        assert_eq!(entries(&lockout), 4);
        assert!(lockout
            .check_at(IpAddr::from([10, 0, 3, 1]), ms(500))
            .is_ok());
    }

    /// A failure counted while the address is already locked out (a
    /// request that passed the check just before the lockout began) keeps
    /// the lockout: SPEC, Authentication, "Repeated failed attempts from
    /// one address are locked out for a while and answer 429".
    #[test]
    fn a_failure_while_locked_out_keeps_the_lockout() {
        let lockout = Lockout::new(2, Duration::from_secs(60));
        let ip: IpAddr = "192.0.2.5".parse().unwrap();
        assert!(!lockout.fail(ip));
        assert!(lockout.fail(ip));
        assert!(!lockout.fail(ip), "already locked: not locked anew");
        let e = lockout.check(ip).unwrap_err();
        assert_eq!(e.code, ErrorCode::RateLimited);
    }

    /// Once the locked-out parties that filled the table have served their
    /// lockout, a new party's failures count again (after the second in
    /// which a full table is not walked): SPEC, Authentication, "Repeated
    /// failed attempts from one address are locked out for a while".
    #[test]
    fn new_parties_are_counted_again_once_a_full_tables_lockouts_end() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let lockout = Lockout::with_capacity(1, Duration::from_millis(100), 2);
        assert!(lockout.fail_at(IpAddr::from([10, 0, 0, 1]), ms(0)));
        assert!(lockout.fail_at(IpAddr::from([10, 0, 0, 2]), ms(0)));
        let late: IpAddr = IpAddr::from([10, 0, 0, 3]);
        assert!(
            !lockout.fail_at(late, ms(1)),
            "the table is full of locked parties"
        );
        lockout.check_at(late, ms(1)).unwrap();
        // Inside the second, the lockouts over: still not counted.
        assert!(!lockout.fail_at(late, ms(900)));
        // Past the second: the table is swept, the failure counted.
        assert!(
            lockout.fail_at(late, ms(1_001)),
            "counted, and locked out at once"
        );
        assert!(lockout.check_at(late, ms(1_001)).is_err());
    }

    /// A sweep of the table forgets only what has ended: a failure in the
    /// window is still counted, and a lockout still running is kept even
    /// when its first failure is older than the window. SPEC,
    /// Authentication, "Repeated failed attempts from one address are
    /// locked out for a while and answer 429".
    #[test]
    fn a_sweep_keeps_failures_in_the_window_and_running_lockouts() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let lockout = Lockout::with_capacity(2, Duration::from_secs(3), 3);
        let locked: IpAddr = "10.0.0.1".parse().unwrap();
        let ended: IpAddr = "10.0.0.2".parse().unwrap();
        let recent: IpAddr = "10.0.0.3".parse().unwrap();
        let new: IpAddr = "10.0.0.4".parse().unwrap();
        assert!(!lockout.fail_at(locked, ms(0)));
        assert!(!lockout.fail_at(ended, ms(0)));
        assert!(
            lockout.fail_at(locked, ms(2_000)),
            "two failures in the window"
        );
        // Full at 3.1 s: the new party's failure sweeps out only `ended`
        // (its one failure past the window); `locked`'s first failure is
        // past it too, but its lockout runs to 5 s.
        assert!(!lockout.fail_at(recent, ms(3_100)));
        assert!(!lockout.fail_at(new, ms(3_100)));
        assert!(
            lockout.check_at(locked, ms(3_100)).is_err(),
            "a running lockout is kept by the sweep"
        );
        assert!(
            lockout.fail_at(recent, ms(3_200)),
            "the failure before the sweep still counts"
        );
    }

    /// Every character of a token is as likely as any other (the rejection
    /// of bytes 252 to 255 is what keeps it so): over a million characters
    /// each of the 36 comes within six standard deviations of a 36th. A
    /// favoured character makes key ids, secrets and admin tokens easier
    /// to guess (SPEC, Authentication, key format: the secret is the
    /// credential).
    #[test]
    fn tokens_draw_every_character_equally_often() {
        const N: usize = 1_000_000;
        let drawn = random_token(N);
        assert_eq!(drawn.len(), N);
        let mut counts = [0usize; 256];
        for b in drawn.bytes() {
            counts[usize::from(b)] += 1;
        }
        let p = 1.0 / 36.0;
        let expected = N as f64 * p;
        let sd = (N as f64 * p * (1.0 - p)).sqrt();
        for c in b"abcdefghijklmnopqrstuvwxyz0123456789" {
            let n = counts[usize::from(*c)] as f64;
            assert!(
                (n - expected).abs() < 6.0 * sd,
                "{}: {n} of {N}, expected {expected:.0} ± {:.0}",
                *c as char,
                6.0 * sd
            );
        }
    }
}
