//! The venue's own price feeds, printing into it as journaled `Price`
//! commands: the built-in simulator (a seeded random walk per symbol, so
//! the server runs with no outside service) and the replay of a file of
//! recorded prints (`price_file`). A real feed adapter uses the admin
//! ingest path instead (`POST /admin/prices`).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sequencer::validate::is_symbol;
use sequencer::wire::parse_e8;
use sequencer::{Command, SeriesConfig};
use serde_json::Value;

use crate::engine::{now_ms, Submitter};

/// A small deterministic generator (xorshift64*), seeded per symbol.
struct Walk {
    state: u64,
    price: f64,
}

impl Walk {
    fn next_unit(&mut self) -> f64 {
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        let bits = self.state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11;
        bits as f64 / (1u64 << 53) as f64
    }

    /// One step: a move of about 2 basis points, up or down.
    fn step(&mut self) -> f64 {
        let u = self.next_unit() + self.next_unit() + self.next_unit() - 1.5;
        self.price *= 1.0 + u * 0.0004;
        self.price = self.price.max(0.01);
        self.price
    }
}

/// Starts the simulator thread for `symbols` (symbol -> start price).
pub fn start(
    submitter: Submitter,
    symbols: BTreeMap<String, f64>,
    interval: Duration,
    seed: u64,
    stop: Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("price-sim".into())
        .spawn(move || {
            let mut walks: Vec<(String, Walk)> = symbols
                .into_iter()
                .enumerate()
                .map(|(i, (symbol, price))| {
                    let state = seed
                        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                        .wrapping_add(i as u64 + 1)
                        | 1;
                    (symbol, Walk { state, price })
                })
                .collect();
            while !stop.load(Ordering::SeqCst) {
                let t_ms = now_ms();
                for (symbol, walk) in &mut walks {
                    let price_e8 = (walk.step() * 1e8).round() as i64;
                    submitter.internal_nowait(Command::Price {
                        symbol: symbol.clone(),
                        price_e8,
                        t_ms,
                    });
                }
                sleep_until(Instant::now() + interval, &stop);
            }
        })
}

/// Sleeps until `when`, waking every 50 ms to see whether to stop.
fn sleep_until(when: Instant, stop: &AtomicBool) {
    loop {
        let now = Instant::now();
        if now >= when || stop.load(Ordering::SeqCst) {
            return;
        }
        std::thread::sleep((when - now).min(Duration::from_millis(50)));
    }
}

/// One recorded print: when it printed at its source, which symbol (an
/// index into `Prints::symbols`) and the price x 10^8.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Print {
    pub t_ms: u64,
    pub symbol: u32,
    pub price_e8: i64,
}

/// A file of recorded prints, read and checked whole before the venue
/// starts: each symbol's in time order, each symbol of the pattern, each
/// price positive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prints {
    pub symbols: Vec<String>,
    pub prints: Vec<Print>,
}

impl Prints {
    /// Reads `path` (see `parse`); errors name the file and the line.
    /// A relative path is taken from the working directory, and named
    /// whole.
    pub fn read(path: &Path) -> Result<Prints, String> {
        if path.as_os_str().is_empty() {
            return Err("price_file is empty: name a file of prints".into());
        }
        let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("price_file {}: {e}", path.display()))?;
        Prints::parse(&text).map_err(|e| format!("price_file {}: {e}", path.display()))
    }

    /// One print a line, each symbol's in time order, in either of two forms:
    /// - CSV `t_ms,symbol,price`, such as `1763856000000,X:BTCUSD,97123.45`,
    ///   fields quoted or not (a first line naming the three, in any case,
    ///   is a header);
    /// - a JSON object `{"symbol", "price", "t_ms"}` as the admin ingest
    ///   path takes it, or a websocket message that carries one in `msg`
    ///   (a recording of the `prices` channel; messages of other types,
    ///   such as `subscribed`, are passed over).
    ///
    /// Blank lines and lines starting with `#` are passed over.
    pub fn parse(text: &str) -> Result<Prints, String> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let mut symbols: Vec<String> = Vec::new();
        // Each symbol's last time so far.
        let mut last_of: Vec<u64> = Vec::new();
        let mut prints = Vec::new();
        let mut header_allowed = true;
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            let at = |e: String| format!("line {}: {e}", i + 1);
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if std::mem::take(&mut header_allowed) && is_header(line) {
                continue;
            }
            let Some((t_ms, symbol, price)) = parse_line(line).map_err(at)? else {
                continue;
            };
            if !is_symbol(&symbol) {
                return Err(at(format!(
                    "symbol {symbol:?} must be upper case, such as AAPL or X:BTCUSD"
                )));
            }
            let price_e8 = parse_e8(&price).filter(|&p| p > 0).ok_or_else(|| {
                at(format!(
                    "price {price:?} must be a positive decimal with at most 8 decimals, such as 97123.45"
                ))
            })?;
            if t_ms > sequencer::limits::TS_MS_MAX {
                return Err(at(format!(
                    "t_ms {t_ms} is not a time in epoch milliseconds"
                )));
            }
            let symbol = match symbols.iter().position(|s| *s == symbol) {
                Some(n) => n,
                None => {
                    symbols.push(symbol);
                    last_of.push(0);
                    symbols.len() - 1
                }
            };
            // In time order per symbol, as the venue takes them; symbols
            // may interleave out of order (a websocket recording opens
            // with each symbol's current price, however old).
            if t_ms < last_of[symbol] {
                return Err(at(format!(
                    "t_ms {t_ms} is before the {} print above it at {}: a symbol's prints must be in time order",
                    symbols[symbol], last_of[symbol]
                )));
            }
            last_of[symbol] = t_ms;
            let symbol = symbol as u32;
            prints.push(Print {
                t_ms,
                symbol,
                price_e8,
            });
        }
        if prints.is_empty() {
            return Err("no prints in it".into());
        }
        Ok(Prints { symbols, prints })
    }

    /// The earliest and the latest time of the file.
    pub fn times(&self) -> (u64, u64) {
        let earliest = self.prints.iter().map(|p| p.t_ms).min().unwrap_or(0);
        let latest = self.prints.iter().map(|p| p.t_ms).max().unwrap_or(0);
        (earliest, latest)
    }

    /// Milliseconds from the earliest print to the latest, as recorded.
    pub fn span_ms(&self) -> u64 {
        let (earliest, latest) = self.times();
        latest - earliest
    }

    /// Says at start what an operator should know before the file is
    /// replayed on a venue whose journal holds `state` and whose
    /// configuration adds `series`: series whose symbol it lacks (their
    /// windows will not open), a wait of over an hour between two prints
    /// at `speed` (a `t_ms` typed wrong?), times that look like seconds,
    /// and each symbol whose price jumps from its last journaled one (the
    /// file starts again at its first print).
    pub fn warn_at_start(&self, state: &sequencer::State, series: &[SeriesConfig], speed: f64) {
        let journaled = state.series.iter().map(|s| &s.config);
        let added = series
            .iter()
            .filter(|s| state.series_by_ticker(&s.ticker).is_none());
        for config in journaled.chain(added) {
            if !self.symbols.contains(&config.symbol) {
                tracing::warn!(
                    series = %config.ticker,
                    symbol = %config.symbol,
                    "the price file has no prints of this series' symbol: its windows will not open or settle without another feed"
                );
            }
        }
        let (gap_ms, after) = self.longest_gap();
        let waits_ms = gap_ms as f64 / speed;
        if waits_ms > 3_600_000.0 {
            tracing::warn!(
                recorded_gap_ms = gap_ms,
                waits_secs = (waits_ms / 1000.0).round(),
                print = after + 1,
                "the price file waits more than an hour before this print (at the speed set): a t_ms typed wrong?"
            );
        }
        if self.times().1 < 100_000_000_000 {
            tracing::warn!(
                "the price file's t_ms are all before 1973 as milliseconds: seconds? (it would replay a thousand times too fast)"
            );
        }
        for (n, symbol) in self.symbols.iter().enumerate() {
            let journaled = state.prices.get(symbol).and_then(|p| p.latest());
            let first = self.prints.iter().find(|p| p.symbol as usize == n);
            if let (Some((_, from_e8)), Some(first)) = (journaled, first) {
                if first.price_e8 != from_e8 {
                    tracing::warn!(
                        symbol = %symbol,
                        journaled = %sequencer::wire::price_e8(from_e8),
                        file_starts_at = %sequencer::wire::price_e8(first.price_e8),
                        "the price file starts again at its first print: this symbol's price jumps from its last journaled one"
                    );
                }
            }
        }
    }

    /// The longest wait between two prints in file order (milliseconds),
    /// and the line index of the print after it; for a warning at start.
    pub fn longest_gap(&self) -> (u64, usize) {
        let mut longest = (0, 0);
        let mut latest = self.prints.first().map_or(0, |p| p.t_ms);
        for (i, p) in self.prints.iter().enumerate() {
            if p.t_ms.saturating_sub(latest) > longest.0 {
                longest = (p.t_ms - latest, i);
            }
            latest = latest.max(p.t_ms);
        }
        longest
    }
}

/// A CSV header line: the three names, any case, spaces allowed.
fn is_header(line: &str) -> bool {
    let names: Vec<String> = line
        .split(',')
        .map(|f| f.trim().to_ascii_lowercase())
        .collect();
    names == ["t_ms", "symbol", "price"]
}

/// One line's `(t_ms, symbol, price)`; `None` for a websocket message of
/// another type.
fn parse_line(line: &str) -> Result<Option<(u64, String, String)>, String> {
    if line.starts_with('{') {
        let value: Value =
            serde_json::from_str(line).map_err(|e| format!("not a JSON object: {e}"))?;
        let print = match value.get("msg") {
            Some(msg) => match value.get("type").and_then(Value::as_str) {
                Some("price") => msg,
                Some(_) => return Ok(None),
                None => return Err("a message with `msg` but no `type`".into()),
            },
            None => &value,
        };
        let t_ms = print
            .get("t_ms")
            .and_then(Value::as_u64)
            .ok_or("t_ms must be epoch milliseconds")?;
        let symbol = print
            .get("symbol")
            .and_then(Value::as_str)
            .ok_or("symbol must be a string")?;
        let price = match print.get("price") {
            Some(Value::String(text)) => text.clone(),
            Some(Value::Number(n)) => n.to_string(),
            _ => return Err("price must be a decimal string such as \"97123.45\"".into()),
        };
        return Ok(Some((t_ms, symbol.to_string(), price)));
    }
    // Fields may be quoted, as spreadsheets export them.
    let fields: Vec<&str> = line
        .split(',')
        .map(|f| {
            let f = f.trim();
            f.strip_prefix('"')
                .and_then(|f| f.strip_suffix('"'))
                .unwrap_or(f)
        })
        .collect();
    let [t_ms, symbol, price] = fields[..] else {
        return Err(format!(
            "{} fields where t_ms,symbol,price are three",
            fields.len()
        ));
    };
    let t_ms = t_ms
        .parse::<u64>()
        .map_err(|_| format!("t_ms {t_ms:?} must be epoch milliseconds"))?;
    Ok(Some((t_ms, symbol.to_string(), price.to_string())))
}

/// When the replay sends each print, in milliseconds from the start of the
/// replay, and which print, lap after lap: the file forward, then (when it
/// loops) backward, then forward again, so that every symbol goes on from
/// the price it is at, never jumping back to the file's first. A print is
/// due `(its time - the file's earliest) / speed` after a forward lap
/// starts, `(the latest - its time) / speed` after a backward one; a lap
/// starts `gap_ms` after the last one's end. Prints go out in file order:
/// one due before the print ahead of it (symbols interleaved out of time
/// order) goes right after that one.
pub struct Schedule<'a> {
    prints: &'a Prints,
    /// The file's earliest and latest times, found once.
    times: (u64, u64),
    speed: f64,
    looping: bool,
    gap_ms: f64,
    lap: u64,
    lap_start_ms: f64,
    next: usize,
}

impl<'a> Schedule<'a> {
    pub fn new(prints: &'a Prints, speed: f64, looping: bool, gap_ms: u64) -> Self {
        Schedule {
            prints,
            times: prints.times(),
            speed,
            looping,
            gap_ms: gap_ms as f64,
            lap: 0,
            lap_start_ms: 0.0,
            next: 0,
        }
    }
}

impl Iterator for Schedule<'_> {
    /// (due in ms from the start, the print)
    type Item = (f64, Print);

    fn next(&mut self) -> Option<(f64, Print)> {
        let all = &self.prints.prints;
        if all.is_empty() {
            return None;
        }
        if self.next == all.len() {
            if !self.looping {
                return None;
            }
            self.lap += 1;
            let (earliest, latest) = self.times;
            self.lap_start_ms += (latest - earliest) as f64 / self.speed + self.gap_ms;
            self.next = 0;
        }
        let (earliest, latest) = self.times;
        let (print, offset) = if self.lap.is_multiple_of(2) {
            let p = all[self.next];
            (p, p.t_ms - earliest)
        } else {
            let p = all[all.len() - 1 - self.next];
            (p, latest - p.t_ms)
        };
        self.next += 1;
        Some((self.lap_start_ms + offset as f64 / self.speed, print))
    }
}

/// Starts the thread that replays `prints` into the venue, each stamped with
/// the time it is sent (the venue's windows run on its own clock), paced by
/// the recorded gaps divided by `speed`.
pub fn start_file(
    submitter: Submitter,
    prints: Prints,
    speed: f64,
    looping: bool,
    gap: Duration,
    stop: Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("price-file".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the price file's thread");
            let started = Instant::now();
            let mut last_t_ms = 0;
            for (due_ms, print) in Schedule::new(&prints, speed, looping, gap.as_millis() as u64) {
                let Some(due) = Duration::try_from_secs_f64(due_ms / 1000.0)
                    .ok()
                    .and_then(|d| started.checked_add(d))
                else {
                    tracing::warn!(
                        "the next print of the price file is due too far ahead; no more prints"
                    );
                    return;
                };
                sleep_until(due, &stop);
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                // Never before the last print sent, should the clock step back.
                last_t_ms = now_ms().max(last_t_ms);
                let symbol = &prints.symbols[print.symbol as usize];
                let command = Command::Price {
                    symbol: symbol.clone(),
                    price_e8: print.price_e8,
                    t_ms: last_t_ms,
                };
                // Waited for (up to the request timeout for room in the
                // queue), not dropped at once when it is full as a
                // simulated print is.
                match runtime.block_on(submitter.internal(command)) {
                    Ok(sequencer::Reply::Rejected(reject)) => tracing::warn!(
                        symbol = %symbol,
                        reason = %reject.message,
                        "a print of the price file was refused"
                    ),
                    Ok(_) => {}
                    Err(e) => tracing::warn!(
                        symbol = %symbol,
                        error = ?e,
                        "a print of the price file was not taken"
                    ),
                }
            }
            tracing::info!("the price file has been replayed to its end; no more prints");
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_are_read_in_every_form_and_symbols_are_named_once() {
        let text = "t_ms,symbol,price\n\
            # a comment, then a blank line\n\
            \n\
            1000,X:BTCUSD,97000.5\n\
            {\"symbol\":\"AAPL\",\"price\":\"230.10\",\"t_ms\":1500}\n\
            {\"type\":\"subscribed\",\"id\":1,\"msg\":{\"channel\":\"prices\",\"sid\":1}}\n\
            {\"type\":\"price\",\"sid\":1,\"seq\":2,\"msg\":{\"symbol\":\"X:BTCUSD\",\"price\":\"97001\",\"t_ms\":1500}}\n\
            {\"symbol\":\"AAPL\",\"price\":231,\"t_ms\":2000}\n";
        let prints = Prints::parse(text).unwrap();
        assert_eq!(prints.symbols, ["X:BTCUSD", "AAPL"]);
        let got: Vec<(u64, u32, i64)> = prints
            .prints
            .iter()
            .map(|p| (p.t_ms, p.symbol, p.price_e8))
            .collect();
        assert_eq!(
            got,
            [
                (1000, 0, 9_700_050_000_000),
                (1500, 1, 23_010_000_000),
                (1500, 0, 9_700_100_000_000),
                (2000, 1, 23_100_000_000),
            ]
        );
        assert_eq!(prints.span_ms(), 1000);
    }

    #[test]
    fn a_bad_line_is_refused_naming_it() {
        for (text, says) in [
            ("", "no prints in it"),
            ("# only a comment\n", "no prints in it"),
            (
                "1000,X:BTCUSD\n",
                "line 1: 2 fields where t_ms,symbol,price are three",
            ),
            (
                "soon,X:BTCUSD,1\n",
                "line 1: t_ms \"soon\" must be epoch milliseconds",
            ),
            ("1000,btc,1\n", "line 1: symbol \"btc\" must be upper case"),
            (
                "1000,X:BTCUSD,0\n",
                "line 1: price \"0\" must be a positive decimal",
            ),
            (
                "1000,X:BTCUSD,-5\n",
                "line 1: price \"-5\" must be a positive",
            ),
            (
                "1000,X:BTCUSD,1\n5,AAPL,1\n999,X:BTCUSD,1\n",
                "line 3: t_ms 999 is before the X:BTCUSD print above it at 1000",
            ),
            (
                "1e19,A,1\n",
                "line 1: t_ms \"1e19\" must be epoch milliseconds",
            ),
            (
                "10000000000000000000,A,1\n",
                "line 1: t_ms 10000000000000000000 is not a time",
            ),
            (
                "{\"symbol\":\"A\",\"price\":\"1\"}\n",
                "line 1: t_ms must be epoch milliseconds",
            ),
            (
                "{\"symbol\":\"A\",\"price\":true,\"t_ms\":1}\n",
                "line 1: price must be a decimal string",
            ),
            (
                "{\"msg\":{}}\n",
                "line 1: a message with `msg` but no `type`",
            ),
            ("{not json\n", "line 1: not a JSON object"),
            (
                "t_ms,symbol,price\nt_ms,symbol,price\n",
                "line 2: t_ms \"t_ms\" must be",
            ),
        ] {
            let error = Prints::parse(text).unwrap_err();
            assert!(error.starts_with(says), "{text:?}: {error}");
        }
    }

    /// Symbols may interleave out of time order (a websocket recording
    /// opens with each symbol's current price, however old); headers and
    /// fields are taken as spreadsheets write them.
    #[test]
    fn symbols_interleave_and_spreadsheet_csv_is_read() {
        let prints =
            Prints::parse("T_MS, Symbol, Price\n1000,A,1\n400,B,2\n\"1200\",\"A\",\"3\"\n")
                .unwrap();
        assert_eq!(prints.times(), (400, 1200));
        assert_eq!(prints.span_ms(), 800);
        assert_eq!(prints.longest_gap(), (200, 2));
        // In file order; the one due before the print ahead of it goes
        // right after that one.
        let due: Vec<f64> = Schedule::new(&prints, 1.0, false, 10)
            .map(|(d, _)| d)
            .collect();
        assert_eq!(due, [600.0, 0.0, 800.0]);
    }

    fn sample() -> Prints {
        Prints::parse("0,A,1\n100,B,2\n300,A,3\n").unwrap()
    }

    #[test]
    fn a_file_without_loop_is_sent_once_at_its_recorded_pace() {
        let prints = sample();
        let sent: Vec<(f64, i64)> = Schedule::new(&prints, 2.0, false, 50)
            .map(|(due, p)| (due, p.price_e8 / 100_000_000))
            .collect();
        assert_eq!(sent, [(0.0, 1), (50.0, 2), (150.0, 3)]);
    }

    /// Looping plays the file backward, then forward: every symbol goes on
    /// from its price, with the recorded gaps mirrored, a gap between laps.
    #[test]
    fn a_looping_file_goes_back_and_forth_without_a_jump() {
        let prints = sample();
        let sent: Vec<(f64, String, i64)> = Schedule::new(&prints, 1.0, true, 10)
            .take(9)
            .map(|(due, p)| {
                (
                    due,
                    prints.symbols[p.symbol as usize].clone(),
                    p.price_e8 / 100_000_000,
                )
            })
            .collect();
        let expect = [
            (0.0, "A", 1),
            (100.0, "B", 2),
            (300.0, "A", 3),
            (310.0, "A", 3),
            (510.0, "B", 2),
            (610.0, "A", 1),
            (620.0, "A", 1),
            (720.0, "B", 2),
            (920.0, "A", 3),
        ];
        let expect: Vec<(f64, String, i64)> = expect
            .iter()
            .map(|&(t, s, p)| (t, s.to_string(), p))
            .collect();
        assert_eq!(sent, expect);
    }
}
