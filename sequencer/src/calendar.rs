//! Market tickers from window times: `<series>-<YYMMDD>-<HHMM>-<HHMM>` in UTC
//! of the open date, open and close time, with `d<N>` when the close falls N
//! days after the open. Pure arithmetic, no clock.

use crate::limits::DAY_MS;
use crate::types::TsMs;

/// (year, month, day) of a day number since 1970-01-01 (proleptic Gregorian).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    // Howard Hinnant's algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The market ticker of a window of `series`.
pub fn market_ticker(series: &str, open_ts_ms: TsMs, close_ts_ms: TsMs) -> String {
    let open_day = open_ts_ms / DAY_MS;
    let close_day = close_ts_ms / DAY_MS;
    let (year, month, day) = civil_from_days(open_day as i64);
    let hhmm = |ts: TsMs| {
        let minute_of_day = (ts % DAY_MS) / 60_000;
        (minute_of_day / 60, minute_of_day % 60)
    };
    let (oh, om) = hhmm(open_ts_ms);
    let (ch, cm) = hhmm(close_ts_ms);
    let mut ticker = format!(
        "{series}-{:02}{month:02}{day:02}-{oh:02}{om:02}-{ch:02}{cm:02}",
        year.rem_euclid(100)
    );
    let days_later = close_day - open_day;
    if days_later > 0 {
        ticker.push_str(&format!("d{days_later}"));
    }
    ticker
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(20_513), (2026, 3, 1));
    }

    #[test]
    fn tickers_follow_the_pattern() {
        // 2026-11-21 21:00 UTC.
        let open = 1_795_294_800_000;
        assert_eq!(
            market_ticker("btc-15m", open, open + 900_000),
            "btc-15m-261121-2100-2115"
        );
        assert_eq!(
            market_ticker("btc-1d", open, open + DAY_MS),
            "btc-1d-261121-2100-2100d1"
        );
        let midnight = open + 3 * 3_600_000;
        assert_eq!(
            market_ticker("x", midnight - 900_000, midnight),
            "x-261121-2345-0000d1"
        );
    }
}
