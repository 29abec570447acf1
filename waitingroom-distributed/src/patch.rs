//! What an operator may set while the cluster runs: the modes, the queueing methods, and a
//! change to the live settings as the admin API reads it
//! (waitingroom-distributed/README.md#live-settings). The live settings (`live.rs`) and scheduled
//! events (`events.rs`), which may carry a change of their own, both build on it; it needs neither.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use waitingroom_core::{Settings, SettingsError, Time};

/// Longest duration an operator may set: a pass's expiry, a session, a bypass pass's life.
pub const MAX_DURATION_MS: Time = 30 * 24 * 3_600_000;

/// Furthest from now, either way, a time an operator sets may lie (an event's times): a year.
pub const MAX_TIME_OFFSET_MS: Time = 366 * 24 * 3_600_000;

/// Largest count an operator may set (visitors on the site at once, visitors let out per
/// minute): beyond any site, and small enough that no sum or product of counts the protocol
/// forms comes near `u64::MAX`.
pub const MAX_COUNT: u64 = 1_000_000_000;

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

impl SettingsPatch {
    /// The JSON object [`SettingsPatch::from_json`] reads back into this patch: the fields
    /// given, and only those.
    pub fn to_json(&self) -> Value {
        let mut fields = serde_json::Map::new();
        let mut put = |name: &str, v: Option<Value>| {
            if let Some(v) = v {
                fields.insert(name.to_owned(), v);
            }
        };
        put("target_on_site", self.target_on_site.map(Value::from));
        put(
            "new_users_per_minute",
            (self.new_users_per_minute).map(|cap| cap.map_or(Value::Null, Value::from)),
        );
        put("mode", self.mode.map(|m| m.name().into()));
        let method = self.queueing_method.map(|m| m.name().into());
        put("queueing_method", method);
        put("pass_expiry_ms", self.pass_expiry_ms.map(Value::from));
        put(
            "session_duration_ms",
            self.session_duration_ms.map(Value::from),
        );
        Value::Object(fields)
    }
}

/// Kept in the form the admin API reads (`node/durable.rs` keeps a node's own changes).
impl Serialize for SettingsPatch {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(s)
    }
}

impl<'de> Deserialize<'de> for SettingsPatch {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        SettingsPatch::from_json(&value).map_err(serde::de::Error::custom)
    }
}

impl SettingsPatch {
    /// Checks every value given against its bound (counts up to [`MAX_COUNT`], durations from
    /// 1 ms to [`MAX_DURATION_MS`]), naming the field at fault: where the protocol takes a change
    /// ([`crate::LiveSettings::patched`]), so the server and the simulator refuse the same ones.
    pub fn check_bounds(&self) -> Result<(), SettingsError> {
        if let Some(t) = self.target_on_site
            && t != Settings::UNLIMITED
        {
            check_count("target_on_site", t)?;
        }
        if let Some(Some(n)) = self.new_users_per_minute {
            check_count("new_users_per_minute", n)?;
        }
        if let Some(ms) = self.pass_expiry_ms {
            check_duration("pass_expiry_ms", ms)?;
        }
        if let Some(ms) = self.session_duration_ms {
            check_duration("session_duration_ms", ms)?;
        }
        Ok(())
    }
}

/// `n` if it is at most [`MAX_COUNT`].
pub(crate) fn check_count(field: &'static str, n: u64) -> Result<u64, SettingsError> {
    if n > MAX_COUNT {
        return Err(SettingsError::new(
            field,
            format!("must be at most {MAX_COUNT}"),
        ));
    }
    Ok(n)
}

/// `ms` if it is from 1 ms to [`MAX_DURATION_MS`] (30 days).
pub fn check_duration(field: &'static str, ms: Time) -> Result<Time, SettingsError> {
    if ms == 0 || ms > MAX_DURATION_MS {
        return Err(SettingsError::new(
            field,
            format!("must be 1 to {MAX_DURATION_MS} ms (30 days)"),
        ));
    }
    Ok(ms)
}

/// `t` if it lies within [`MAX_TIME_OFFSET_MS`] (a year) of `now`, either way.
pub(crate) fn check_time(field: &'static str, t: Time, now: Time) -> Result<Time, SettingsError> {
    if t.abs_diff(now) > MAX_TIME_OFFSET_MS {
        return Err(SettingsError::new(
            field,
            format!("must be within a year ({MAX_TIME_OFFSET_MS} ms) of now ({now} ms)"),
        ));
    }
    Ok(t)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_patch_reads_back_from_its_json() {
        let every = SettingsPatch {
            target_on_site: Some(Settings::UNLIMITED),
            new_users_per_minute: Some(None),
            mode: Some(Mode::QueueAll),
            queueing_method: Some(QueueingMethod::Random),
            pass_expiry_ms: Some(60_000),
            session_duration_ms: Some(1_000),
        };
        let capped = SettingsPatch {
            new_users_per_minute: Some(Some(30)),
            ..SettingsPatch::default()
        };
        for patch in [every, capped, SettingsPatch::default()] {
            let text = serde_json::to_string(&patch).unwrap();
            let back: SettingsPatch = serde_json::from_str(&text).unwrap();
            assert_eq!(back, patch, "{text}");
        }
    }
}
