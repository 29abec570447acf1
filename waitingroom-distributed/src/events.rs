//! Scheduled events: a sale that opens at a known time
//! (waitingroom-distributed/README.md#scheduled-events).
//!
//! An event is part of the live settings (`live.rs`), so it travels with the rounds like any
//! other change, and survives the death of the root and of the node it was made at. Its times
//! are on the cluster's reference clock (waitingroom-distributed/README.md#clocks), in ms since the
//! Unix epoch.
//!
//! From `prequeue_start_ms` to `start_ms` visitors who join are pre-queued: nobody is let out
//! (as in `queue_all`). With `shuffle_at_start` every pre-queued visitor is stamped the same
//! join time, `prequeue_start_ms`, so their order in the queue is their random ticket ids:
//! a uniformly random order, drawn when they join, that holds on every node and through
//! re-queueing after a node dies (the join time travels in the ticket). Without it they keep
//! their join order. Either way their join times are earlier than `start_ms`, so they all come
//! before anyone who joins after the start. From `prequeue_start_ms` to `end_ms` the event's
//! own settings (if any) replace the room's.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use waitingroom_core::lottery::LotterySeed;
use waitingroom_core::{SettingsError, Time};

use crate::patch::{Mode, QueueingMethod, SettingsPatch, check_count, check_time};

/// Most events kept at once (ended ones are dropped when another is added).
pub const MAX_EVENTS: usize = 16;

/// Longest event name.
const MAX_NAME: usize = 64;

/// A scheduled event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduledEvent {
    /// Names the event in the admin API (letters, digits, `-` and `_`).
    pub name: String,
    /// When the pre-queue opens (ms since the epoch, reference clock).
    pub prequeue_start_ms: Time,
    /// When visitors start to be let out.
    pub start_ms: Time,
    /// When the event's settings stop applying.
    pub end_ms: Time,
    /// Whether pre-queued visitors are let out in a random order rather than join order.
    #[serde(default)]
    pub shuffle_at_start: bool,
    /// Settings that apply from the pre-queue's opening to the end.
    #[serde(default)]
    pub settings: EventSettings,
    /// The seed its lottery draws ids from, if it draws lots ([`ScheduledEvent::draws_lots`]):
    /// drawn by the node it was scheduled at, revealed at its start (`lottery.rs` in the core
    /// crate). Never from the operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<LotterySeed>,
}

/// The live settings an event may replace while it lasts (pass expiry and session duration
/// stay the room's: passes outlive events).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventSettings {
    /// Visitors on the site at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_on_site: Option<u64>,
    /// Most visitors let out per minute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_users_per_minute: Option<u64>,
    /// What the room does with visitors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    /// In which order visitors are let out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queueing_method: Option<QueueingMethod>,
}

/// Where an event stands at some time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventPhase<'a> {
    /// Visitors are pre-queued; nobody is let out.
    Prequeue(&'a ScheduledEvent),
    /// Visitors are let out, under the event's settings.
    Running(&'a ScheduledEvent),
}

impl ScheduledEvent {
    /// Reads an event from the admin API's JSON, naming the field at fault.
    pub fn from_json(value: &Value) -> Result<ScheduledEvent, SettingsError> {
        let Value::Object(fields) = value else {
            return Err(SettingsError::new("body", "must be a JSON object"));
        };
        for name in fields.keys() {
            if !matches!(
                name.as_str(),
                "name"
                    | "prequeue_start_ms"
                    | "start_ms"
                    | "end_ms"
                    | "shuffle_at_start"
                    | "settings"
            ) {
                return Err(SettingsError::new(
                    "body",
                    format!("unknown field `{name}`"),
                ));
            }
        }
        let time = |field: &'static str| {
            fields
                .get(field)
                .and_then(Value::as_u64)
                .ok_or_else(|| SettingsError::new(field, "must be a time in ms since the epoch"))
        };
        let start_ms = time("start_ms")?;
        let event = ScheduledEvent {
            name: event_name(fields.get("name"))?,
            prequeue_start_ms: match fields.get("prequeue_start_ms") {
                None => start_ms,
                Some(_) => time("prequeue_start_ms")?,
            },
            start_ms,
            end_ms: time("end_ms")?,
            shuffle_at_start: match fields.get("shuffle_at_start") {
                None => false,
                Some(v) => v.as_bool().ok_or_else(|| {
                    SettingsError::new("shuffle_at_start", "must be true or false")
                })?,
            },
            settings: match fields.get("settings") {
                None => EventSettings::default(),
                Some(v) => EventSettings::from_json(v)?,
            },
            seed: None,
        };
        event.check_times()?;
        Ok(event)
    }

    /// Whether it draws lots: a shuffled pre-queue, or random queueing while it is on.
    pub fn draws_lots(&self) -> bool {
        self.shuffle_at_start || self.settings.queueing_method == Some(QueueingMethod::Random)
    }

    fn check_times(&self) -> Result<(), SettingsError> {
        if self.prequeue_start_ms > self.start_ms {
            return Err(SettingsError::new(
                "prequeue_start_ms",
                "must not be after start_ms",
            ));
        }
        if self.end_ms <= self.start_ms {
            return Err(SettingsError::new("end_ms", "must be after start_ms"));
        }
        Ok(())
    }

    /// Checks the event against the bounds of what an operator may set, naming the field at
    /// fault: each time within a year of `now` (reference clock), each count at most
    /// [`crate::patch::MAX_COUNT`]. Where the protocol takes an event
    /// ([`crate::LiveSettings::with_event`]), so the server and the simulator refuse the same
    /// ones.
    pub fn check_bounds(&self, now: Time) -> Result<(), SettingsError> {
        check_time("start_ms", self.start_ms, now)?;
        check_time("end_ms", self.end_ms, now)?;
        check_time("prequeue_start_ms", self.prequeue_start_ms, now)?;
        if let Some(t) = self.settings.target_on_site
            && t != waitingroom_core::Settings::UNLIMITED
        {
            check_count("target_on_site", t)?;
        }
        if let Some(n) = self.settings.new_users_per_minute {
            check_count("new_users_per_minute", n)?;
        }
        Ok(())
    }

    /// Where this event stands at `t`, if it is on.
    pub fn phase_at(&self, t: Time) -> Option<EventPhase<'_>> {
        if t < self.prequeue_start_ms || t >= self.end_ms {
            None
        } else if t < self.start_ms {
            Some(EventPhase::Prequeue(self))
        } else {
            Some(EventPhase::Running(self))
        }
    }

    /// Whether this event's time overlaps `other`'s (phases would be ambiguous).
    pub fn overlaps(&self, other: &ScheduledEvent) -> bool {
        self.prequeue_start_ms < other.end_ms && other.prequeue_start_ms < self.end_ms
    }

    /// The times at which this event changes what is in force.
    pub fn edges(&self) -> [Time; 3] {
        [self.prequeue_start_ms, self.start_ms, self.end_ms]
    }
}

impl EventSettings {
    /// Reads an event's settings: the live settings' JSON, less the ones an event may not
    /// change.
    fn from_json(value: &Value) -> Result<EventSettings, SettingsError> {
        let p = SettingsPatch::from_json(value)?;
        if p.pass_expiry_ms.is_some() || p.session_duration_ms.is_some() {
            return Err(SettingsError::new(
                "settings",
                "an event may set target_on_site, new_users_per_minute, mode and \
                 queueing_method; passes outlive events",
            ));
        }
        Ok(EventSettings {
            target_on_site: p.target_on_site,
            new_users_per_minute: match p.new_users_per_minute {
                Some(None) => {
                    return Err(SettingsError::new(
                        "new_users_per_minute",
                        "an event may set a cap, not lift the room's",
                    ));
                }
                other => other.flatten(),
            },
            mode: p.mode,
            queueing_method: p.queueing_method,
        })
    }
}

fn event_name(v: Option<&Value>) -> Result<String, SettingsError> {
    let name = v.and_then(Value::as_str).unwrap_or("");
    let fine = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    if name.is_empty() || name.len() > MAX_NAME || !name.chars().all(fine) {
        return Err(SettingsError::new(
            "name",
            format!("must be 1 to {MAX_NAME} letters, digits, `-` or `_`"),
        ));
    }
    Ok(name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_event_names_the_field_at_fault() {
        let err = |v: Value| ScheduledEvent::from_json(&v).unwrap_err().field;
        let ok = json!({"name": "sale", "start_ms": 2_000, "end_ms": 3_000});
        assert!(ScheduledEvent::from_json(&ok).is_ok());
        assert_eq!(err(json!({"start_ms": 2_000, "end_ms": 3_000})), "name");
        assert_eq!(
            err(json!({"name": "a b", "start_ms": 2, "end_ms": 3})),
            "name"
        );
        assert_eq!(err(json!({"name": "s", "end_ms": 3_000})), "start_ms");
        assert_eq!(
            err(json!({"name": "s", "start_ms": 3, "end_ms": 3})),
            "end_ms"
        );
        let early = json!({"name": "s", "prequeue_start_ms": 5, "start_ms": 3, "end_ms": 9});
        assert_eq!(err(early), "prequeue_start_ms");
        let shuffle = json!({"name": "s", "start_ms": 3, "end_ms": 9, "shuffle_at_start": 1});
        assert_eq!(err(shuffle), "shuffle_at_start");
        let expiry = json!({"name": "s", "start_ms": 3, "end_ms": 9,
            "settings": {"pass_expiry_ms": 5}});
        assert_eq!(err(expiry), "settings");
        let lift = json!({"name": "s", "start_ms": 3, "end_ms": 9,
            "settings": {"new_users_per_minute": null}});
        assert_eq!(err(lift), "new_users_per_minute");
        assert_eq!(
            err(json!({"name": "s", "start_ms": 3, "end_ms": 9, "x": 1})),
            "body"
        );
    }

    #[test]
    fn an_event_has_a_prequeue_then_runs_then_ends() {
        let e = ScheduledEvent::from_json(&json!({"name": "sale",
            "prequeue_start_ms": 1_000, "start_ms": 2_000, "end_ms": 3_000,
            "shuffle_at_start": true, "settings": {"target_on_site": 5}}))
        .unwrap();
        assert_eq!(e.settings.target_on_site, Some(5));
        assert_eq!(e.phase_at(999), None);
        assert_eq!(e.phase_at(1_000), Some(EventPhase::Prequeue(&e)));
        assert_eq!(e.phase_at(1_999), Some(EventPhase::Prequeue(&e)));
        assert_eq!(e.phase_at(2_000), Some(EventPhase::Running(&e)));
        assert_eq!(e.phase_at(3_000), None);
        let mut later = e.clone();
        later.prequeue_start_ms = 3_000;
        assert!(!e.overlaps(&later));
        later.prequeue_start_ms = 2_999;
        assert!(e.overlaps(&later));
    }
}
