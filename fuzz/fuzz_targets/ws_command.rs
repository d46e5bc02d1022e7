//! Websocket command frames: `gateway::ws::protocol::parse` on arbitrary
//! text never panics, echoes only an integer id (or null), keeps to the
//! per-command limits, and every refusal makes a well-formed error frame.
#![no_main]

use gateway::ws::protocol::{self, Command};
use libfuzzer_sys::fuzz_target;
use sequencer::limits::{WS_SYMBOLS_PER_COMMAND, WS_TICKERS_PER_COMMAND};
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    // The connection hands `parse` text frames only, as UTF-8 (others are
    // refused before); lossy conversion keeps every input useful.
    let text = String::from_utf8_lossy(data);
    let (id, result) = protocol::parse(&text);
    assert!(id.is_null() || id.is_i64() || id.is_u64(), "id {id}");
    match result {
        Ok(Command::Subscribe { channels, keys }) => {
            assert!(!channels.is_empty());
            assert!(
                keys.market_tickers.len() + keys.series_tickers.len() <= WS_TICKERS_PER_COMMAND
            );
            assert!(keys.symbols.len() <= WS_SYMBOLS_PER_COMMAND);
        }
        Ok(Command::Unsubscribe { sids }) => {
            assert!(!sids.is_empty() && sids.iter().all(|&s| s > 0));
        }
        Ok(Command::Update { sid, keys, .. }) => {
            assert!(sid > 0);
            assert!(
                keys.market_tickers.len() + keys.series_tickers.len() <= WS_TICKERS_PER_COMMAND
            );
            assert!(keys.symbols.len() <= WS_SYMBOLS_PER_COMMAND);
        }
        Ok(Command::List) | Ok(Command::Login { .. }) => {}
        Err(e) => {
            let frame: Value =
                serde_json::from_str(&protocol::error(&id, &e)).expect("error frame is JSON");
            assert_eq!(frame["type"], "error");
            assert_eq!(frame["msg"]["code"], e.code as u16);
        }
    }
});
