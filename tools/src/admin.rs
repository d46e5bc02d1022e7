//! `updown admin`: the operator's CLI over the admin endpoint. It finds the
//! server's address (server.json) and token (admin.token) in the data
//! directory, prints readable tables, or JSON with `--json`.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use serde_json::{json, Value};

#[derive(Args)]
pub struct AdminArgs {
    /// Data directory of the running server (the same as `serve`'s).
    #[arg(long, global = true, default_value = "updown-data")]
    data_dir: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: AdminCommand,
}

#[derive(Subcommand)]
enum AdminCommand {
    /// Accounts: create, fund, flag.
    #[command(subcommand)]
    Account(AccountCommand),
    /// API keys: issue, revoke, list.
    #[command(subcommand)]
    Key(KeyCommand),
    /// Platform-wide trading pause.
    #[command(subcommand)]
    Trading(TradingCommand),
    /// Configured series.
    #[command(subcommand)]
    Series(ListCommand),
    /// Markets (windows).
    #[command(subcommand)]
    Markets(MarketsCommand),
    /// The live state's last seq, state hash and event hash, to compare
    /// with `updown replay --until-seq SEQ` of the same journal.
    State,
}

#[derive(Subcommand)]
enum AccountCommand {
    /// Opens an account; prints its id.
    Create {
        /// Cash to start with (dollars, up to two decimals).
        #[arg(long, default_value = "0")]
        cash: String,
    },
    /// Adds cash (dollars, up to two decimals).
    Deposit {
        /// The account's id.
        account: u32,
        /// Dollars, up to two decimals.
        amount: String,
    },
    /// Takes cash out, from buying power only (not what orders hold).
    Withdraw {
        /// The account's id.
        account: u32,
        /// Dollars, up to two decimals.
        amount: String,
    },
    /// Records that the account accepted the Terms of Service (needed to buy).
    AcceptTerms {
        /// The account's id.
        account: u32,
    },
    /// Allows trading on the account's wallet (needed to buy).
    AllowTrading {
        /// The account's id.
        account: u32,
    },
    /// Refuses the account's keys (cancels too) and cancels its resting
    /// orders.
    Suspend {
        /// The account's id.
        account: u32,
    },
    /// Lets the account's keys in again (its cancelled orders stay
    /// cancelled).
    Unsuspend {
        /// The account's id.
        account: u32,
    },
    /// Shows cash, holds and flags.
    Show {
        /// The account's id.
        account: u32,
    },
    /// Sets the account's cap on the amount at risk across open windows
    /// (dollars), or with `default` goes back to the venue's
    /// `account_risk_cap_usd`.
    RiskCap {
        /// The account's id.
        account: u32,
        /// Dollars, up to two decimals, or `default`.
        usd: String,
    },
}

#[derive(Subcommand)]
enum KeyCommand {
    /// Issues a key; prints it once.
    Issue {
        /// The account the key acts for.
        #[arg(long)]
        account: u32,
        /// `read`, `trade` or `read,trade`.
        #[arg(long, default_value = "read")]
        scopes: String,
        /// `live` or `test`: the key's environment (the venue's own when
        /// left out; a key of the other one is refused with 401).
        #[arg(long)]
        env: Option<String>,
        /// A name to tell keys apart in `key list`.
        #[arg(long, default_value = "")]
        name: String,
        #[command(flatten)]
        limits: LimitArgs,
        /// An allowed address; repeat for more (at most 10).
        #[arg(long = "ip")]
        ips: Vec<String>,
        /// Days until the key stops working by itself (1 to 365; never
        /// when left out).
        #[arg(long)]
        expires_days: Option<u32>,
    },
    /// Revokes a key at once (its resting orders stay on the book).
    Revoke {
        /// The key's id (`key list` shows it; never the secret).
        key_id: String,
    },
    /// Replaces a key's limits with those given. A limit left out is none,
    /// but a trade key always has both dollar limits: one left out is the
    /// default, $20 an order or $500 a day.
    Limits {
        /// The key's id (`key list` shows it).
        key_id: String,
        #[command(flatten)]
        limits: LimitArgs,
    },
    /// Lists keys (never a secret).
    List {
        /// Only this account's keys.
        #[arg(long)]
        account: Option<u32>,
    },
}

/// A key's limits, as `key issue` and `key limits` take them.
#[derive(Args)]
struct LimitArgs {
    /// Largest order in dollars: price times count (a sell at the prices
    /// it would fill at); $20 for a trade key when left out.
    #[arg(long, value_parser = usd)]
    max_order_usd: Option<String>,
    /// Most the key's orders may add up to in a UTC day, counted as an
    /// order is, in dollars; $500 for a trade key when left out.
    #[arg(long, value_parser = usd)]
    max_daily_usd: Option<String>,
    /// Most resting orders the key may have in one market.
    #[arg(long)]
    max_open_orders: Option<u32>,
    /// Series the key may trade, comma separated.
    #[arg(long)]
    series: Option<String>,
}

impl LimitArgs {
    /// The limits' members of an admin API body.
    fn members(&self) -> serde_json::Map<String, Value> {
        let series: Option<Vec<&str>> = self
            .series
            .as_deref()
            .map(|s| s.split(',').map(str::trim).collect());
        let mut map = serde_json::Map::new();
        map.insert("max_order_usd".into(), json!(self.max_order_usd));
        map.insert("max_daily_usd".into(), json!(self.max_daily_usd));
        map.insert("max_open_orders".into(), json!(self.max_open_orders));
        map.insert("series".into(), json!(series));
        map
    }
}

#[derive(Subcommand)]
enum TradingCommand {
    /// Pauses trading on the whole platform: new orders answer 503
    /// TRADING_PAUSED, cancels still work.
    Pause {
        /// When the pause ends by itself: epoch ms or RFC 3339 (like
        /// 2026-11-21T21:00:00Z).
        #[arg(long, value_name = "TIME", value_parser = crate::timefmt::parse_time)]
        until: Option<u64>,
    },
    /// Ends a pause.
    Resume,
}

#[derive(Subcommand)]
enum ListCommand {
    /// Every series with its settings.
    List,
}

#[derive(Subcommand)]
enum MarketsCommand {
    /// The newest 1,000 markets, newest first.
    List {
        /// Only this series' markets.
        #[arg(long, value_name = "TICKER")]
        series: Option<String>,
        /// Only markets in this status: scheduled, open, closed or settled.
        #[arg(long)]
        status: Option<String>,
    },
}

/// A small blocking client of the admin endpoint.
pub struct Client {
    base: String,
    token: String,
    agent: ureq::Agent,
}

impl Client {
    pub fn new(addr: String, token: String) -> Self {
        // Bounded waits: an operator's command against a venue that does
        // not answer (its descriptors all taken, say) ends with an error
        // instead of hanging. The venue waits up to 30 s for an admin
        // command's journaling; a minute covers that.
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(std::time::Duration::from_secs(10)))
            .timeout_global(Some(std::time::Duration::from_secs(60)))
            .build()
            .into();
        Self {
            base: format!("http://{addr}"),
            token,
            agent,
        }
    }

    /// Finds the running server of a data directory.
    pub fn from_data_dir(dir: &std::path::Path) -> Result<Self> {
        let server =
            std::fs::read_to_string(gateway::server::server_file_path(dir)).with_context(|| {
                format!(
                    "no running server found in {} (is `updown serve --data-dir {}` running?)",
                    dir.display(),
                    dir.display()
                )
            })?;
        let server: Value = serde_json::from_str(&server).context("server.json is not JSON")?;
        let addr = server["admin_listen"]
            .as_str()
            .context("server.json has no admin_listen")?
            .to_string();
        let token = std::fs::read_to_string(gateway::server::admin_token_path(dir))
            .with_context(|| format!("reading the admin token in {}", dir.display()))?;
        Ok(Self::new(addr, token.trim().to_string()))
    }

    fn answer(
        &self,
        response: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<Value> {
        let mut response = match response {
            Ok(response) => response,
            // Nothing listens there: nothing was sent (it was reported as
            // a timeout, sending the operator to look for a phantom
            // deposit).
            Err(ureq::Error::Io(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => bail!(
                "no venue answers at {} (connection refused): the server is not running, or the server.json of the data directory is left from one that stopped; nothing was sent",
                self.base
            ),
            Err(ureq::Error::ConnectionFailed) => bail!(
                "no venue answers at {} (the connection failed): the server is not running, or the server.json of the data directory is left from one that stopped; nothing was sent",
                self.base
            ),
            Err(e) => {
                return Err(anyhow::Error::new(e).context(
                    "the admin endpoint did not answer in time (a command sent may still be applied: look before sending it again)",
                ))
            }
        };
        let status = response.status();
        let body: Value = response.body_mut().read_json().unwrap_or(Value::Null);
        if !status.is_success() {
            let message = body["message"].as_str().unwrap_or("no message");
            bail!(
                "{} {}: {message}",
                status.as_u16(),
                body["code"].as_str().unwrap_or("ERROR")
            );
        }
        Ok(body)
    }

    pub fn post(&self, path: &str, body: Value) -> Result<Value> {
        let url = format!("{}{path}", self.base);
        self.answer(
            self.agent
                .post(&url)
                .header("Authorization", &format!("Bearer {}", self.token))
                .send_json(body),
        )
    }

    pub fn get(&self, path: &str) -> Result<Value> {
        let url = format!("{}{path}", self.base);
        self.answer(
            self.agent
                .get(&url)
                .header("Authorization", &format!("Bearer {}", self.token))
                .call(),
        )
    }
}

pub fn run(args: AdminArgs) -> Result<()> {
    let client = Client::from_data_dir(&args.data_dir)?;
    let output = match args.command {
        AdminCommand::Account(command) => account(&client, command)?,
        AdminCommand::Key(command) => key(&client, command)?,
        AdminCommand::Trading(TradingCommand::Pause { until }) => {
            client.post("/admin/trading/pause", json!({ "until_ts_ms": until }))?
        }
        AdminCommand::Trading(TradingCommand::Resume) => {
            client.post("/admin/trading/resume", json!({}))?
        }
        AdminCommand::Series(ListCommand::List) => client.get("/admin/series")?,
        AdminCommand::Markets(MarketsCommand::List { series, status }) => {
            let mut query = Vec::new();
            if let Some(series) = series {
                query.push(format!("series_ticker={}", encoded(&series)));
            }
            if let Some(status) = status {
                query.push(format!("status={}", encoded(&status)));
            }
            let path = if query.is_empty() {
                "/admin/markets".to_string()
            } else {
                format!("/admin/markets?{}", query.join("&"))
            };
            client.get(&path)?
        }
        AdminCommand::State => client.get("/admin/state")?,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&output)?);
    } else {
        print!("{}", table(&output));
        let shown = output["markets"].as_array().map_or(0, Vec::len);
        if shown == sequencer::limits::LIST_LIMIT_MAX as usize {
            println!("(the newest {shown} markets; narrow the list with --series or --status)");
        }
    }
    Ok(())
}

fn account(client: &Client, command: AccountCommand) -> Result<Value> {
    let flag = |account: u32, name: &str, value: bool| {
        client.post(
            &format!("/admin/accounts/{account}/flags"),
            json!({ name: value }),
        )
    };
    match command {
        AccountCommand::Create { cash } => client.post("/admin/accounts", json!({ "cash": cash })),
        AccountCommand::Deposit { account, amount } => client.post(
            &format!("/admin/accounts/{account}/deposit"),
            json!({ "amount": amount }),
        ),
        AccountCommand::Withdraw { account, amount } => client.post(
            &format!("/admin/accounts/{account}/withdraw"),
            json!({ "amount": amount }),
        ),
        AccountCommand::AcceptTerms { account } => flag(account, "terms_accepted", true),
        AccountCommand::AllowTrading { account } => flag(account, "trading_allowed", true),
        AccountCommand::Suspend { account } => flag(account, "suspended", true),
        AccountCommand::Unsuspend { account } => flag(account, "suspended", false),
        AccountCommand::Show { account } => client.get(&format!("/admin/accounts/{account}")),
        AccountCommand::RiskCap { account, usd } => client.post(
            &format!("/admin/accounts/{account}/risk-cap"),
            if usd == "default" {
                json!({ "usd": null })
            } else {
                json!({ "usd": usd })
            },
        ),
    }
}

/// An object without its null members (options not given).
fn without_nulls(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            Value::Object(map.into_iter().filter(|(_, v)| !v.is_null()).collect())
        }
        other => other,
    }
}

/// Text put into a URL's path or query: every byte but the unreserved
/// ones percent-encoded (a key id `a/../b` was a path of its own, a
/// series `x&status=open` a second filter).
fn encoded(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn key(client: &Client, command: KeyCommand) -> Result<Value> {
    match command {
        KeyCommand::Issue {
            account,
            scopes,
            env,
            name,
            limits,
            ips,
            expires_days,
        } => {
            let mut body = limits.members();
            body.insert("account".into(), json!(account));
            body.insert("scopes".into(), json!(scopes));
            body.insert("env".into(), json!(env));
            body.insert("name".into(), json!(name));
            body.insert("ips".into(), json!(ips));
            body.insert("expires_days".into(), json!(expires_days));
            client.post("/admin/keys", without_nulls(Value::Object(body)))
        }
        KeyCommand::Revoke { key_id } => client.post(
            &format!("/admin/keys/{}/revoke", encoded(&key_id)),
            json!({}),
        ),
        KeyCommand::Limits { key_id, limits } => client.post(
            &format!("/admin/keys/{}/limits", encoded(&key_id)),
            without_nulls(Value::Object(limits.members())),
        ),
        KeyCommand::List { account } => match account {
            Some(a) => client.get(&format!("/admin/keys?account={a}")),
            None => client.get("/admin/keys"),
        },
    }
}

/// A readable rendering: a list of objects as a table, an object as lines.
fn table(value: &Value) -> String {
    let list = value.as_object().and_then(|m| {
        if m.len() == 1 {
            m.values().next().and_then(Value::as_array)
        } else {
            None
        }
    });
    if let Some(rows) = list {
        let mut columns: Vec<String> = Vec::new();
        for row in rows {
            for key in row.as_object().into_iter().flat_map(|m| m.keys()) {
                if !columns.contains(key) {
                    columns.push(key.clone());
                }
            }
        }
        let cell = |row: &Value, c: &str| readable(c, &row[c]);
        let widths: Vec<usize> = columns
            .iter()
            .map(|c| {
                rows.iter()
                    .map(|r| cell(r, c).len())
                    .chain([c.len()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        let line = |cells: Vec<String>| {
            cells
                .iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect::<Vec<_>>()
                .join("  ")
                .trim_end()
                .to_string()
                + "\n"
        };
        out += &line(columns.clone());
        for row in rows {
            out += &line(columns.iter().map(|c| cell(row, c)).collect());
        }
        if rows.is_empty() {
            out += "(none)\n";
        }
        return out;
    }
    match value.as_object() {
        Some(map) => map
            .iter()
            .map(|(k, v)| format!("{k}: {}\n", readable(k, v)))
            .collect(),
        None => format!("{value}\n"),
    }
}

/// A value as a readable table shows it: strings bare, null as `-`, and a
/// time in epoch milliseconds (a name ending in `ts_ms` or `time_ms`) as
/// UTC, as the journal tools print times (`--json` keeps the number).
fn readable(name: &str, value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        Value::Number(n) if name.ends_with("ts_ms") || name.ends_with("time_ms") => n
            .as_u64()
            .map_or_else(|| n.to_string(), crate::timefmt::iso),
        other => other.to_string(),
    }
}

/// A dollar limit on the command line: a positive amount in the form the
/// admin API reads (`250`, `19.99`), sent as the text given: as a JSON
/// number, 10000000000.01 lost its cents to binary rounding and was
/// refused as no dollar amount (`NaN` or `inf` had reached the server as
/// JSON `null`, that is no limit given).
fn usd(text: &str) -> Result<String, String> {
    match sequencer::wire::parse_dollars(text) {
        Some(cents) if cents > 0 => Ok(text.to_string()),
        _ => Err(format!(
            "{text} is not a positive dollar amount such as 250 or 19.99"
        )),
    }
}
