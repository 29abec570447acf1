//! What an operator may set while the cluster runs: the modes, the queueing methods, and a
//! change to the live settings as the admin API reads it
//! (waitingroom-distributed/README.md#live-settings). The live settings (`live.rs`) and scheduled
//! events (`events.rs`), which may carry a change of their own, both build on it; it needs neither.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use waitingroom_core::{Settings, SettingsError, Time};

/// What the room does with visitors, besides the limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Visitors queue while the site is full and are let out as it has room.
    #[default]
    Normal,
    /// Everyone queues and nobody is let out (check-ins go on, places are kept): a pre-sale,
    /// or an origin in trouble.
    QueueAll,
    /// Everyone is let in at once, with a pass (so the origin's gate keeps working): the spike
    /// is over, or the room is not needed.
    Passthrough,
    /// New visitors are turned away (the room is closed); those already queued or on the site
    /// keep their places.
    Reject,
}

impl Mode {
    /// Every mode, in the order help texts list them.
    pub const ALL: [Mode; 4] = [
        Mode::Normal,
        Mode::QueueAll,
        Mode::Passthrough,
        Mode::Reject,
    ];

    /// The mode's name, as the admin API, `--mode` and the metrics spell it.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Normal => "normal",
            Mode::QueueAll => "queue_all",
            Mode::Passthrough => "passthrough",
            Mode::Reject => "reject",
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = SettingsError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Mode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                SettingsError::new(
                    "mode",
                    format!("unknown mode `{s}` (normal, queue_all, passthrough or reject)"),
                )
            })
    }
}

/// In which order waiting visitors are let out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QueueingMethod {
    /// First in, first out: the product's promise.
    #[default]
    Fifo,
    /// A lottery: every visitor who joins while it is in force is stamped the same join time
    /// (`LiveSettings::lottery_since`), so the queue orders them by their ticket ids: drawn
    /// from the lottery's seed and a number from the node they joined (its ChaCha8 generator,
    /// seeded at random by the server and from the run's seed by the simulator, so a simulated
    /// run replays), which makes the order checkable once the seed is revealed
    /// (`LiveSettings::lotteries`; a lottery set in the file configuration has no seed). Each
    /// round lets out the smallest ids waiting: a uniformly random pick among those waiting,
    /// late joiners included (one who joins between a round's count and its result may win
    /// that round at their node). Visitors who joined before it was switched on keep their
    /// places ahead. A visitor who joins several times holds several draws, as far as the
    /// per-client join limit lets them.
    Random,
}

impl QueueingMethod {
    /// Every method.
    pub const ALL: [QueueingMethod; 2] = [QueueingMethod::Fifo, QueueingMethod::Random];

    /// The method's name, as the admin API and the metrics spell it.
    pub fn name(self) -> &'static str {
        match self {
            QueueingMethod::Fifo => "fifo",
            QueueingMethod::Random => "random",
        }
    }
}

/// A change an operator asks for: the fields given, each checked on its own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SettingsPatch {
    /// New target (`"unlimited"` in JSON for no limit).
    pub target_on_site: Option<u64>,
    /// New rate cap (`null` in JSON for none).
    pub new_users_per_minute: Option<Option<u64>>,
    /// New mode.
    pub mode: Option<Mode>,
    /// New queueing method.
    pub queueing_method: Option<QueueingMethod>,
    /// New pass expiry.
    pub pass_expiry_ms: Option<Time>,
    /// New session duration.
    pub session_duration_ms: Option<Time>,
}

impl SettingsPatch {
    /// Reads a JSON object of the fields to change; an unknown field or a value of the wrong
    /// kind is an error that names the field.
    pub fn from_json(value: &Value) -> Result<SettingsPatch, SettingsError> {
        let Value::Object(fields) = value else {
            return Err(SettingsError::new(
                "body",
                "must be a JSON object of the settings to change",
            ));
        };
        let mut p = SettingsPatch::default();
        for (name, v) in fields {
            match name.as_str() {
                "target_on_site" => p.target_on_site = Some(target(v)?),
                "new_users_per_minute" => {
                    p.new_users_per_minute = Some(if v.is_null() {
                        None
                    } else {
                        Some(number("new_users_per_minute", v)?)
                    })
                }
                "mode" => p.mode = Some(text("mode", v)?.parse()?),
                "queueing_method" => p.queueing_method = Some(queueing_method(v)?),
                "pass_expiry_ms" => p.pass_expiry_ms = Some(number("pass_expiry_ms", v)?),
                "session_duration_ms" => {
                    p.session_duration_ms = Some(number("session_duration_ms", v)?)
                }
                "version" | "author" => {
                    return Err(SettingsError::new(
                        "version",
                        "is set by the cluster; send only the settings to change",
                    ));
                }
                _ => {
                    return Err(SettingsError::new(
                        "body",
                        format!("unknown setting `{name}`"),
                    ));
                }
            }
        }
        Ok(p)
    }
}

fn number(field: &'static str, v: &Value) -> Result<u64, SettingsError> {
    v.as_u64()
        .ok_or_else(|| SettingsError::new(field, "must be a whole number, 0 or more"))
}

fn text<'a>(field: &'static str, v: &'a Value) -> Result<&'a str, SettingsError> {
    v.as_str()
        .ok_or_else(|| SettingsError::new(field, "must be a string"))
}

fn target(v: &Value) -> Result<u64, SettingsError> {
    const FIELD: &str = "target_on_site";
    match v {
        Value::String(s) if s == "unlimited" => Ok(Settings::UNLIMITED),
        Value::Number(_) => number(FIELD, v),
        _ => Err(SettingsError::new(
            FIELD,
            "must be a whole number or \"unlimited\"",
        )),
    }
}

impl std::str::FromStr for QueueingMethod {
    type Err = SettingsError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        QueueingMethod::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                SettingsError::new(
                    "queueing_method",
                    format!("unknown method `{s}` (fifo or random)"),
                )
            })
    }
}

fn queueing_method(v: &Value) -> Result<QueueingMethod, SettingsError> {
    text("queueing_method", v)?.parse()
}
