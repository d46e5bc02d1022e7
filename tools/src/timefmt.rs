//! Times for people: epoch milliseconds as UTC ISO-8601, and times given on
//! the command line as epoch milliseconds or RFC 3339. Pure arithmetic on
//! the proleptic Gregorian calendar (the sequencer's `civil_from_days`).

use anyhow::{bail, Result};
use sequencer::calendar::civil_from_days;

const DAY_MS: i64 = 86_400_000;

/// `1795294800123` -> `2026-11-21T21:00:00.123Z`.
pub fn iso(ts_ms: u64) -> String {
    let ms = ts_ms as i64;
    let (days, in_day) = (ms.div_euclid(DAY_MS), ms.rem_euclid(DAY_MS));
    let (year, month, day) = civil_from_days(days);
    let (h, m, s, milli) = (
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1000 % 60,
        in_day % 1000,
    );
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{milli:03}Z")
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Hinnant's algorithm).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let month = i64::from(month);
    let doy = (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Parses a time given on the command line: epoch milliseconds (digits
/// only), or RFC 3339 such as `2026-11-21T21:00:00Z`,
/// `2026-11-21T21:00:00.250+01:00` (a space may replace the `T`), or a bare
/// date `2026-11-21` (its midnight, UTC).
pub fn parse_time(text: &str) -> Result<u64> {
    let text = text.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text
            .parse()
            .map_err(|_| anyhow::anyhow!("time {text:?} is too large"));
    }
    parse_rfc3339(text).ok_or_else(|| {
        anyhow::anyhow!(
            "time {text:?} is neither epoch milliseconds nor RFC 3339 (like 2026-11-21T21:00:00Z)"
        )
    })
}

fn parse_rfc3339(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = b.get(range)?;
        if part.is_empty() || !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(part).ok()?.parse().ok()
    };
    if b.len() < 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)? as u32, num(8..10)? as u32);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    let days = days_from_civil(year, month, day);
    // Reject dates such as 02-31 that roll over into the next month.
    if civil_from_days(days) != (year, month, day) {
        return None;
    }
    let mut ms = days * DAY_MS;
    if b.len() == 10 {
        return u64::try_from(ms).ok();
    }
    if !matches!(b[10], b'T' | b't' | b' ') || b.len() < 19 || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (h, m, s) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if h > 23 || m > 59 || s > 60 {
        return None;
    }
    ms += (h * 3600 + m * 60 + s) * 1000;
    let mut pos = 19;
    if b.get(pos) == Some(&b'.') {
        let start = pos + 1;
        let mut end = start;
        while end < b.len() && b[end].is_ascii_digit() {
            end += 1;
        }
        if end == start {
            return None;
        }
        // Milliseconds: the first three digits, the rest truncated.
        let digits = &text[start..end.min(start + 3)];
        ms += digits.parse::<i64>().ok()? * 10i64.pow(3 - digits.len() as u32);
        pos = end;
    }
    match b.get(pos) {
        Some(b'Z' | b'z') if pos + 1 == b.len() => {}
        Some(&sign @ (b'+' | b'-')) if b.len() == pos + 6 && b[pos + 3] == b':' => {
            let (oh, om) = (num(pos + 1..pos + 3)?, num(pos + 4..pos + 6)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let offset = (oh * 60 + om) * 60_000;
            ms += if sign == b'+' { -offset } else { offset };
        }
        _ => return None,
    }
    u64::try_from(ms).ok()
}

/// Parses a duration such as `60s`, `1m`, `15m`, `1h`, `500ms` or plain
/// seconds, into milliseconds.
pub fn parse_duration_ms(text: &str) -> Result<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let Ok(n) = digits.parse::<u64>() else {
        bail!("duration {text:?} should look like 10s, 1m or 1h");
    };
    let unit_ms = match unit {
        "ms" => 1,
        "" | "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => DAY_MS as u64,
        _ => bail!("duration {text:?} should look like 10s, 1m or 1h"),
    };
    match n.checked_mul(unit_ms) {
        Some(ms) if ms > 0 => Ok(ms),
        _ => bail!("duration {text:?} must be positive"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_parses_round_trip() {
        assert_eq!(iso(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso(1_795_294_800_123), "2026-11-21T21:00:00.123Z");
        for ts in [
            0u64,
            1,
            951_782_400_000,
            1_795_294_800_123,
            4_102_444_799_999,
        ] {
            assert_eq!(parse_time(&iso(ts)).unwrap(), ts, "{}", iso(ts));
        }
        assert_eq!(parse_time("1795294800123").unwrap(), 1_795_294_800_123);
        assert_eq!(
            parse_time("2026-11-21T22:00:00+01:00").unwrap(),
            1_795_294_800_000
        );
        assert_eq!(
            parse_time("2026-11-21 21:00:00.5Z").unwrap(),
            1_795_294_800_500
        );
        assert_eq!(parse_time("2026-11-21").unwrap(), 1_795_219_200_000);
        for bad in [
            "",
            "2026-02-30",
            "2026-11-21T25:00:00Z",
            "yesterday",
            "2026-11-21T21:00:00",
        ] {
            assert!(parse_time(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_duration_ms("1m").unwrap(), 60_000);
        assert_eq!(parse_duration_ms("10").unwrap(), 10_000);
        assert!(parse_duration_ms("0s").is_err());
    }

    /// `journal stats --bucket 1h` (or `1d`, `500ms`) buckets by that
    /// width, not by some other unit's.
    #[test]
    fn every_duration_unit_has_its_width() {
        assert_eq!(parse_duration_ms("500ms").unwrap(), 500);
        assert_eq!(parse_duration_ms("10s").unwrap(), 10_000);
        assert_eq!(parse_duration_ms("15m").unwrap(), 900_000);
        assert_eq!(parse_duration_ms("1h").unwrap(), 3_600_000);
        assert_eq!(parse_duration_ms("2d").unwrap(), 172_800_000);
    }

    /// `--from-time 2026-11-21T16:00:00-05:00` is 21:00 UTC (a zone west of
    /// UTC is behind it), and digits past the milliseconds are cut, not
    /// read as more milliseconds.
    #[test]
    fn a_western_offset_and_long_fractions_give_the_utc_millisecond() {
        assert_eq!(
            parse_time("2026-11-21T16:00:00-05:00").unwrap(),
            1_795_294_800_000
        );
        assert_eq!(
            parse_time("2026-11-21T21:00:00.123999Z").unwrap(),
            1_795_294_800_123
        );
    }

    /// An offset's minutes count (India is +05:30), offsets and clock
    /// fields stop at their last valid value, a leap second is the next
    /// second, and anything else malformed is refused rather than read as
    /// some other moment (an auditor's `--until-time` must never move).
    #[test]
    fn offsets_with_minutes_and_every_malformed_time() {
        let at_21 = 1_795_294_800_000;
        assert_eq!(parse_time("2026-11-22T02:30:00+05:30").unwrap(), at_21);
        assert_eq!(parse_time("2026-11-21T17:30:00-03:30").unwrap(), at_21);
        assert_eq!(
            parse_time("2026-11-21T21:59:00+00:59").unwrap(),
            at_21,
            "the last minute of an offset"
        );
        assert_eq!(
            parse_time("2026-11-22T20:00:00+23:00").unwrap(),
            at_21,
            "the last hour of an offset"
        );
        assert_eq!(parse_time("2026-11-21t21:00:00z").unwrap(), at_21);
        assert_eq!(
            parse_time("2026-11-21T20:59:60Z").unwrap(),
            at_21,
            "a leap second"
        );
        for bad in [
            "2026/11/21",
            "2026-11/21",
            "2026-+1-05",
            "2026-11-21X21:00:00Z",
            "2026-11-21T21-00:00Z",
            "2026-11-21T21:00-00Z",
            "2026-11-21T21:00Z",
            "2026-11-21T2",
            "2026-11-21T21:0",
            "2026-11-21T24:00:00Z",
            "2026-11-21T21:60:00Z",
            "2026-11-21T21:00:61Z",
            "2026-11-21T21:00:00.Z",
            "2026-11-21T21:00:00.5",
            "2026-11-21T21:00:00Zjunk",
            "2026-11-21T22:00:00+01:00x",
            "2026-11-21T22:00:00+01-00",
            "2026-11-21T22:00:00+0100",
            "2026-11-21T22:00:00+24:00",
            "2026-11-21T22:00:00+00:60",
        ] {
            assert!(parse_time(bad).is_err(), "{bad} was taken");
        }
    }
}
