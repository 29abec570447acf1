//! Live settings: what an operator may change while the cluster runs (README, "Live settings").
//!
//! They travel with the rounds, as the voters do (`voters.rs`): a change made at any node is a
//! new version of the whole set, written by that node; counts carry the newest version each
//! subtree knows up to the root, and the root's result carries its newest down to every
//! member. A change therefore reaches every node in the round after it was made (two at
//! most, if it came in while a round was under way), survives the death of the root and of the
//! node it was made at once any round has carried it, and a node that (re)joins with another
//! file configuration adopts the cluster's with its first result. Nothing is stored outside
//! the nodes: a cluster restarted as a whole starts from its file configuration again.
//!
//! Versions are ordered by number, then by the id of the node that wrote them, so two changes
//! made at once on two nodes settle on the same one everywhere (the higher id's); the other is
//! lost, and `GET /admin/settings` shows which won. The file configuration is version 0 and
//! never travels: until the first change, every node keeps its own.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use waitingroom_core::{NodeId, Settings, SettingsError, Time};

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
}

/// The settings an operator may change while the cluster runs, with their version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveSettings {
    /// Grows with every change (0: the node's file configuration).
    pub version: u64,
    /// The node that wrote this version (breaks a tie between two changes made at once).
    pub author: NodeId,
    /// Visitors on the site at once; [`Settings::UNLIMITED`] for no limit.
    pub target_on_site: u64,
    /// Most visitors let out per minute, cluster-wide (spread over the rounds); None: no cap.
    pub new_users_per_minute: Option<u64>,
    /// What the room does with visitors.
    pub mode: Mode,
    /// In which order visitors are let out.
    pub queueing_method: QueueingMethod,
    /// How long a pass stays valid without a refresh: how long an idle visitor keeps a place.
    pub pass_expiry_ms: Time,
    /// The longest one admission lasts, refreshes included (the pass's maximum lifetime).
    pub session_duration_ms: Time,
}

/// Version 0 of the default settings: what a count from a node that sends none stands for
/// (never adopted: it is no newer than any node's own).
impl Default for LiveSettings {
    fn default() -> Self {
        LiveSettings::from_file(&Settings::default(), Mode::Normal, None)
    }
}

impl LiveSettings {
    /// Version 0: what a node's file configuration says.
    pub fn from_file(s: &Settings, mode: Mode, new_users_per_minute: Option<u64>) -> LiveSettings {
        LiveSettings {
            version: 0,
            author: NodeId(0),
            target_on_site: s.target_on_site,
            new_users_per_minute,
            mode,
            queueing_method: QueueingMethod::Fifo,
            pass_expiry_ms: s.pass_expiry_ms,
            session_duration_ms: s.pass_max_lifetime_ms,
        }
    }

    /// Whether `other` is a newer version than these (and so to be adopted).
    pub fn is_older_than(&self, other: &LiveSettings) -> bool {
        (other.version, other.author) > (self.version, self.author)
    }

    /// The room settings these make of the file's `file`: passthrough lifts the limit (and
    /// lets everyone straight through), queue-all lets nobody straight through.
    pub fn apply_to(&self, file: &Settings) -> Settings {
        let passthrough = self.mode == Mode::Passthrough;
        Settings {
            target_on_site: if passthrough {
                Settings::UNLIMITED
            } else {
                self.target_on_site
            },
            pass_expiry_ms: self.pass_expiry_ms,
            pass_max_lifetime_ms: self.session_duration_ms,
            admit_straight_through: passthrough
                || self.mode != Mode::QueueAll && file.admit_straight_through,
            ..file.clone()
        }
    }

    /// Checks these against the file's other settings, naming the field at fault.
    pub fn validate(&self, file: &Settings) -> Result<(), SettingsError> {
        if self.new_users_per_minute == Some(0) {
            return Err(SettingsError::new(
                "new_users_per_minute",
                "must be at least 1, or null for no cap",
            ));
        }
        self.apply_to(file).validate().map_err(|e| {
            if e.field == "pass_max_lifetime_ms" {
                SettingsError::new("session_duration_ms", "must be at least pass_expiry_ms")
            } else {
                e
            }
        })
    }

    /// The next version, written by `author`: these with `patch` applied, checked against the
    /// file's other settings.
    pub fn patched(
        &self,
        patch: &SettingsPatch,
        author: NodeId,
        file: &Settings,
    ) -> Result<LiveSettings, SettingsError> {
        let p = patch;
        let next = LiveSettings {
            version: self.version.saturating_add(1),
            author,
            target_on_site: p.target_on_site.unwrap_or(self.target_on_site),
            new_users_per_minute: p.new_users_per_minute.unwrap_or(self.new_users_per_minute),
            mode: p.mode.unwrap_or(self.mode),
            queueing_method: p.queueing_method.unwrap_or(self.queueing_method),
            pass_expiry_ms: p.pass_expiry_ms.unwrap_or(self.pass_expiry_ms),
            session_duration_ms: p.session_duration_ms.unwrap_or(self.session_duration_ms),
        };
        next.validate(file)?;
        Ok(next)
    }

    /// Most visitors a round at interval boundary `boundary` may let out under the rate cap
    /// (None: no cap). The allowance is the cap's whole visitors that fall due in the
    /// interval ending at the boundary, so rounds share a minute evenly and a skipped round
    /// is not made up later: a burst is at most one round's share.
    pub fn round_allowance(&self, boundary: Time, interval: Time) -> Option<u64> {
        let per_minute = u128::from(self.new_users_per_minute?);
        let due = |t: Time| per_minute * u128::from(t) / 60_000;
        let allowance = due(boundary) - due(boundary.saturating_sub(interval));
        Some(u64::try_from(allowance).unwrap_or(u64::MAX))
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

fn queueing_method(v: &Value) -> Result<QueueingMethod, SettingsError> {
    match text("queueing_method", v)? {
        "fifo" => Ok(QueueingMethod::Fifo),
        "random" => Err(SettingsError::new(
            "queueing_method",
            "random queueing is not built yet; fifo is the only method",
        )),
        other => Err(SettingsError::new(
            "queueing_method",
            format!("unknown method `{other}` (fifo)"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn file() -> Settings {
        Settings {
            target_on_site: 100,
            pass_expiry_ms: 60_000,
            pass_max_lifetime_ms: 3_600_000,
            ..Settings::default()
        }
    }

    fn live() -> LiveSettings {
        LiveSettings::from_file(&file(), Mode::Normal, None)
    }

    #[test]
    fn a_patch_names_the_field_at_fault() {
        let err = |v: Value| SettingsPatch::from_json(&v).unwrap_err().field;
        assert_eq!(err(json!({"target_on_site": "lots"})), "target_on_site");
        assert_eq!(err(json!({"target_on_site": -1})), "target_on_site");
        assert_eq!(err(json!({"mode": "closed"})), "mode");
        assert_eq!(err(json!({"queueing_method": "random"})), "queueing_method");
        assert_eq!(err(json!({"pass_expiry_ms": 1.5})), "pass_expiry_ms");
        assert_eq!(err(json!({"version": 7})), "version");
        assert_eq!(err(json!({"colour": "red"})), "body");
        assert_eq!(err(json!([1])), "body");
        let bad = |p: SettingsPatch| live().patched(&p, NodeId(2), &file()).unwrap_err().field;
        let zero = SettingsPatch {
            target_on_site: Some(0),
            ..SettingsPatch::default()
        };
        assert_eq!(bad(zero), "target_on_site");
        let no_rate = SettingsPatch {
            new_users_per_minute: Some(Some(0)),
            ..SettingsPatch::default()
        };
        assert_eq!(bad(no_rate), "new_users_per_minute");
        let short = SettingsPatch {
            session_duration_ms: Some(1_000),
            ..SettingsPatch::default()
        };
        assert_eq!(bad(short), "session_duration_ms");
    }

    #[test]
    fn a_patch_changes_only_its_fields_and_makes_a_newer_version() {
        let p = SettingsPatch::from_json(&json!({
            "target_on_site": "unlimited", "new_users_per_minute": 600, "mode": "queue_all"
        }))
        .unwrap();
        let old = live();
        let new = old.patched(&p, NodeId(3), &file()).unwrap();
        assert_eq!(new.version, 1);
        assert_eq!(new.author, NodeId(3));
        assert_eq!(new.target_on_site, Settings::UNLIMITED);
        assert_eq!(new.new_users_per_minute, Some(600));
        assert_eq!(new.mode, Mode::QueueAll);
        assert_eq!(new.pass_expiry_ms, old.pass_expiry_ms);
        assert!(old.is_older_than(&new));
        let cleared = SettingsPatch::from_json(&json!({"new_users_per_minute": null})).unwrap();
        let newer = new.patched(&cleared, NodeId(1), &file()).unwrap();
        assert_eq!(newer.new_users_per_minute, None);
        // Two changes made at once: the higher author wins, everywhere.
        let other = old.patched(&cleared, NodeId(1), &file()).unwrap();
        assert!(other.is_older_than(&new) && !new.is_older_than(&other));
        // The file configuration never replaces another node's.
        let mut elsewhere = live();
        elsewhere.target_on_site = 5;
        assert!(!live().is_older_than(&elsewhere));
    }

    #[test]
    fn modes_shape_the_room_settings() {
        let mut l = live();
        l.mode = Mode::Passthrough;
        let s = l.apply_to(&file());
        assert!(s.is_unlimited() && s.admit_straight_through);
        l.mode = Mode::QueueAll;
        let s = l.apply_to(&file());
        assert_eq!(s.target_on_site, 100);
        assert!(!s.admit_straight_through);
        l.mode = Mode::Reject;
        assert_eq!(l.apply_to(&file()), file());
    }

    #[test]
    fn the_rate_cap_spreads_a_minute_evenly_over_the_rounds() {
        let mut l = live();
        assert_eq!(l.round_allowance(5_000, 1_000), None);
        l.new_users_per_minute = Some(90);
        let per_round: Vec<u64> = (1..=60)
            .map(|i| l.round_allowance(i * 1_000, 1_000).unwrap())
            .collect();
        assert_eq!(per_round.iter().sum::<u64>(), 90);
        assert!(per_round.iter().all(|&n| n == 1 || n == 2));
        l.new_users_per_minute = Some(30);
        // Half a visitor per one-second round: every other round lets one out.
        assert_eq!(l.round_allowance(1_000, 1_000), Some(0));
        assert_eq!(l.round_allowance(2_000, 1_000), Some(1));
    }
}
