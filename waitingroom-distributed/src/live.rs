//! Live settings: what an operator may change while the cluster runs
//! (waitingroom-distributed/README.md#live-settings).
//!
//! They travel with the rounds, as the voters do (`voters.rs`): a change made at any node is a
//! new version of the whole set, written by that node; counts carry the newest version each
//! subtree knows up to the root, and the root's result carries its newest down to every
//! member. A change therefore reaches every node in the round after it was made (two at
//! most, if it came in while a round was under way), survives the death of the root and of the
//! node it was made at once any round has carried it, and a node that (re)joins with another
//! file configuration adopts the cluster's with its first result. Nothing is stored outside
//! the nodes but for a node's durable state (`node/durable.rs`): a cluster restarted as a whole
//! goes on from the newest version its nodes kept, or from its file configuration without one.
//!
//! Versions are ordered by number, then by when they were written (the earlier first), then
//! by the id of the node that wrote them, so two changes made at once on two nodes settle on
//! the same version everywhere. The other change is not lost: the node it was made at keeps
//! its last changes ([`MAX_PENDING`]) and, when it adopts a version that does not include one
//! (each version says, per node, the newest of its versions it builds on), makes it again on
//! top of that version. Made again, a change writes only the settings that no later change
//! wrote ([`FieldStamps`]). So every change is applied, concurrent changes to one setting in
//! the order they were made, whichever version reached the root first.
//! A change that no longer fits (an event that now overlaps one scheduled at once elsewhere)
//! is dropped, and the node says so (`Event::SettingsChangeDropped`). The file configuration
//! is version 0 and never travels: until the first change, every node keeps its own.

use std::cmp::Reverse;
use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use waitingroom_core::lottery::{LotteryRecord, LotterySeed};
use waitingroom_core::{NodeId, Settings, SettingsError, Time};

use crate::events::{EventPhase, MAX_EVENTS, ScheduledEvent};
use crate::patch::{Mode, QueueingMethod, SettingsPatch};

/// The name of the room's own lottery in its record (events are named by their names).
pub const ROOM_LOTTERY: &str = "random";

/// How many of its own changes a node keeps, to make them again on top of a version that
/// won over them; an older one is almost surely in every version by then.
pub const MAX_PENDING: usize = 32;

/// The settings an operator may change while the cluster runs, with their version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveSettings {
    /// Grows with every change (0: the node's file configuration).
    pub version: u64,
    /// The node that wrote this version (breaks a tie between two changes made at once).
    pub author: NodeId,
    /// When the change this version carries was made (reference clock): of two versions of
    /// the same number, the earlier wins, and the later is made again on top of it.
    #[serde(default)]
    pub written_at: Time,
    /// For each node that wrote a version these build on, the newest such version: how the
    /// node that made a change tells whether a version includes it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub written: Vec<(NodeId, u64)>,
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
    /// When random queueing was last switched on (reference clock): the join time its
    /// visitors are stamped (see [`QueueingMethod::Random`]).
    #[serde(default)]
    pub lottery_since: Time,
    /// The seed of the room's lottery, drawn where random queueing was last switched on: the
    /// ids of its visitors are drawn from it, and it is revealed once the lottery is switched
    /// off (`waitingroom_core::lottery`). None until a lottery has been opened live.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lottery_seed: Option<LotterySeed>,
    /// Scheduled events, in start order (`events.rs`).
    #[serde(default)]
    pub events: Vec<ScheduledEvent>,
    /// Which change last wrote each of the settings above that a patch sets (boxed: the
    /// settings travel by value in every result and event).
    #[serde(default)]
    pub stamps: Box<FieldStamps>,
}

/// A change's stamp: when it was made on the reference clock, and the node it was made at.
/// A change made on top of a version is stamped after every change that version holds, so
/// stamps order the changes that built on each other as they were made.
pub type ChangeStamp = (Time, NodeId);

/// The stamp of the change that last wrote each setting a patch sets (all zero: the file's).
/// A change made again on top of a version that won over it (see the module doc) writes a
/// setting only if it is stamped later than the change that wrote it there: of two changes
/// made at once to one setting the later stays, whichever of them a node heard first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldStamps {
    /// Of [`LiveSettings::target_on_site`].
    pub target_on_site: ChangeStamp,
    /// Of [`LiveSettings::new_users_per_minute`].
    pub new_users_per_minute: ChangeStamp,
    /// Of [`LiveSettings::mode`].
    pub mode: ChangeStamp,
    /// Of [`LiveSettings::queueing_method`] (and the lottery it opens).
    pub queueing_method: ChangeStamp,
    /// Of [`LiveSettings::pass_expiry_ms`].
    pub pass_expiry_ms: ChangeStamp,
    /// Of [`LiveSettings::session_duration_ms`].
    pub session_duration_ms: ChangeStamp,
}

/// The file's settings: written by no change.
impl Default for FieldStamps {
    fn default() -> Self {
        let file = (0, NodeId(0));
        FieldStamps {
            target_on_site: file,
            new_users_per_minute: file,
            mode: file,
            queueing_method: file,
            pass_expiry_ms: file,
            session_duration_ms: file,
        }
    }
}

impl FieldStamps {
    /// The latest of them.
    pub fn latest(&self) -> ChangeStamp {
        let all = [
            self.target_on_site,
            self.new_users_per_minute,
            self.mode,
            self.queueing_method,
            self.pass_expiry_ms,
            self.session_duration_ms,
        ];
        all.into_iter().max().unwrap_or((0, NodeId(0)))
    }
}

/// `value`, if a change stamped `stamp` sets it and is later than the one that `wrote` the
/// setting (which it then becomes).
fn later<T>(value: Option<T>, wrote: &mut ChangeStamp, stamp: ChangeStamp) -> Option<T> {
    let value = value.filter(|_| stamp > *wrote)?;
    *wrote = stamp;
    Some(value)
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
            written_at: 0,
            written: Vec::new(),
            target_on_site: s.target_on_site,
            new_users_per_minute,
            mode,
            queueing_method: QueueingMethod::Fifo,
            pass_expiry_ms: s.pass_expiry_ms,
            session_duration_ms: s.pass_max_lifetime_ms,
            lottery_since: 0,
            lottery_seed: None,
            events: Vec::new(),
            stamps: Box::default(),
        }
    }

    /// Whether `other` is a newer version than these (and so to be adopted).
    pub fn is_older_than(&self, other: &LiveSettings) -> bool {
        let order = |l: &LiveSettings| (l.version, Reverse(l.written_at), l.author);
        order(other) > order(self)
    }

    /// Whether these build on version `version` written by `author` (or on a later one of
    /// that node's, which builds on it).
    pub fn includes(&self, author: NodeId, version: u64) -> bool {
        version == 0
            || (self.author == author && self.version >= version)
            || self
                .written
                .iter()
                .any(|&(n, v)| n == author && v >= version)
    }

    /// The next version's number, author and lineage, written by `author` at `now`; the
    /// settings still these.
    fn next(&self, author: NodeId, now: Time) -> LiveSettings {
        let version = self.version.saturating_add(1);
        let mut written = self.written.clone();
        match written.iter_mut().find(|(n, _)| *n == author) {
            Some(entry) => entry.1 = version,
            None => written.push((author, version)),
        }
        LiveSettings {
            version,
            author,
            written_at: now,
            written,
            ..self.clone()
        }
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

    /// The next version, written by `author` at `now` (reference clock): these with `patch`
    /// applied, checked against the file's other settings. A setting that a later change wrote
    /// ([`FieldStamps`]) keeps its value. A lottery it opens draws its ids from `seed`.
    pub fn patched(
        &self,
        patch: &SettingsPatch,
        (author, now, seed): (NodeId, Time, LotterySeed),
        file: &Settings,
    ) -> Result<LiveSettings, SettingsError> {
        patch.check_bounds()?;
        let p = patch;
        let (stamp, mut stamps) = ((now, author), *self.stamps);
        let method = later(p.queueing_method, &mut stamps.queueing_method, stamp)
            .unwrap_or(self.queueing_method);
        let lottery_opens = method == QueueingMethod::Random && self.queueing_method != method;
        let rate = later(
            p.new_users_per_minute,
            &mut stamps.new_users_per_minute,
            stamp,
        );
        let pass_expiry = later(p.pass_expiry_ms, &mut stamps.pass_expiry_ms, stamp);
        let session = later(
            p.session_duration_ms,
            &mut stamps.session_duration_ms,
            stamp,
        );
        let next = LiveSettings {
            target_on_site: later(p.target_on_site, &mut stamps.target_on_site, stamp)
                .unwrap_or(self.target_on_site),
            new_users_per_minute: rate.unwrap_or(self.new_users_per_minute),
            mode: later(p.mode, &mut stamps.mode, stamp).unwrap_or(self.mode),
            queueing_method: method,
            pass_expiry_ms: pass_expiry.unwrap_or(self.pass_expiry_ms),
            session_duration_ms: session.unwrap_or(self.session_duration_ms),
            lottery_since: if lottery_opens {
                now
            } else {
                self.lottery_since
            },
            lottery_seed: if lottery_opens {
                Some(seed)
            } else {
                self.lottery_seed
            },
            stamps: Box::new(stamps),
            ..self.next(author, now)
        };
        next.validate(file)?;
        Ok(next)
    }

    /// The next version with `event` added, written by `author` at `now`, its lottery (if it
    /// draws lots) drawn from `seed`. Events that have ended are dropped; one whose time
    /// overlaps another's, or whose name is taken, is refused.
    pub fn with_event(
        &self,
        mut event: ScheduledEvent,
        (author, now, seed): (NodeId, Time, LotterySeed),
        file: &Settings,
    ) -> Result<LiveSettings, SettingsError> {
        if event.end_ms <= now {
            return Err(SettingsError::new("end_ms", "is already past"));
        }
        event.check_bounds(now)?;
        event.seed = event.draws_lots().then_some(seed);
        let mut events: Vec<ScheduledEvent> = self
            .events
            .iter()
            .filter(|e| e.end_ms > now)
            .cloned()
            .collect();
        if let Some(e) = events
            .iter()
            .find(|e| e.name == event.name || e.overlaps(&event))
        {
            let why = if e.name == event.name {
                "an event of that name is scheduled; delete it first".to_owned()
            } else {
                format!("overlaps event `{}`", e.name)
            };
            return Err(SettingsError::new("name", why));
        }
        if events.len() >= MAX_EVENTS {
            return Err(SettingsError::new(
                "name",
                format!("{MAX_EVENTS} events are scheduled already; delete one first"),
            ));
        }
        events.push(event);
        events.sort_by_key(|e| e.start_ms);
        let next = LiveSettings {
            events,
            ..self.next(author, now)
        };
        for e in &next.events {
            next.in_force_at(e.start_ms).validate(file)?;
        }
        Ok(next)
    }

    /// The next version without the event `name`, written by `author` at `now`.
    pub fn without_event(&self, name: &str, author: NodeId, now: Time) -> Option<LiveSettings> {
        let events: Vec<ScheduledEvent> = self
            .events
            .iter()
            .filter(|e| e.name != name)
            .cloned()
            .collect();
        (events.len() < self.events.len()).then(|| LiveSettings {
            events,
            ..self.next(author, now)
        })
    }

    /// The event on at `t` (reference clock), and where it stands.
    pub fn event_at(&self, t: Time) -> Option<EventPhase<'_>> {
        self.events.iter().find_map(|e| e.phase_at(t))
    }

    /// The settings in force at `t`: these, with the settings of an event that is on. A
    /// pre-queue lets nobody out (queue-all), unless the room is closed (reject).
    pub fn in_force_at(&self, t: Time) -> LiveSettings {
        let mut now = LiveSettings {
            events: Vec::new(),
            ..self.clone()
        };
        let Some(phase) = self.event_at(t) else {
            return now;
        };
        let (EventPhase::Prequeue(e) | EventPhase::Running(e)) = phase;
        let s = &e.settings;
        now.target_on_site = s.target_on_site.unwrap_or(now.target_on_site);
        now.new_users_per_minute = s.new_users_per_minute.or(now.new_users_per_minute);
        now.mode = s.mode.unwrap_or(now.mode);
        now.queueing_method = self.queueing_method_at(t);
        if matches!(phase, EventPhase::Prequeue(_)) && now.mode != Mode::Reject {
            now.mode = Mode::QueueAll;
        }
        now
    }

    /// The join time a visitor who joins at `t` (reference clock) is stamped, and the seed of
    /// the lottery that draws their id if one does: `t`, except in a shuffled pre-queue (the
    /// pre-queue's opening and the event's seed: `events.rs`) and under random queueing (the
    /// lottery's opening and seed, or the start and seed of the latest event that has begun if
    /// later, so that a lottery never jumps an event's pre-queue). Never 0, so that a visitor
    /// whose admission was decided can be re-queued just before the lottery
    /// (`Tag::decided_join_time`). A lottery opened by the file configuration has no seed: its
    /// ids are drawn as any others, and it publishes no record.
    pub fn join_stamp(&self, t: Time) -> (Time, Option<&LotterySeed>) {
        match self.event_at(t) {
            Some(EventPhase::Prequeue(e)) if e.shuffle_at_start => {
                (e.prequeue_start_ms, e.seed.as_ref())
            }
            Some(EventPhase::Prequeue(_)) => (t, None),
            _ if self.queueing_method_at(t) == QueueingMethod::Random => {
                let room = (self.lottery_since.max(1), self.lottery_seed.as_ref());
                let begun = self.events.iter().filter(|e| e.start_ms <= t);
                begun.fold(room, |latest, e| {
                    if e.start_ms > latest.0 {
                        (e.start_ms, e.seed.as_ref().or(room.1))
                    } else {
                        latest
                    }
                })
            }
            _ => (t, None),
        }
    }

    /// The records of the lotteries these settings hold, as of `t` (reference clock): the
    /// room's, revealed once random queueing is off, and each lottery event's, revealed at its
    /// start (`waitingroom_core::lottery`).
    pub fn lotteries(&self, t: Time) -> Vec<LotteryRecord> {
        let room = self.lottery_seed.as_ref().map(|seed| {
            let revealed = self.queueing_method != QueueingMethod::Random;
            LotteryRecord::new(ROOM_LOTTERY, seed, None, revealed)
        });
        let events = self.events.iter().filter_map(|e| {
            let seed = e.seed.as_ref()?;
            Some(LotteryRecord::new(
                &e.name,
                seed,
                Some(e.start_ms),
                t >= e.start_ms,
            ))
        });
        room.into_iter().chain(events).collect()
    }

    /// The queueing method in force at `t`: an event's while one is on (what
    /// [`LiveSettings::in_force_at`] says, without building the whole set: every join asks).
    fn queueing_method_at(&self, t: Time) -> QueueingMethod {
        match self.event_at(t) {
            Some(EventPhase::Prequeue(e) | EventPhase::Running(e)) => {
                e.settings.queueing_method.unwrap_or(self.queueing_method)
            }
            None => self.queueing_method,
        }
    }

    /// Whether an event has ended by `t` and none is on: a room closed then is closed because
    /// the event is over (the page says so).
    pub fn event_over_at(&self, t: Time) -> bool {
        self.event_at(t).is_none() && self.events.iter().any(|e| e.end_ms <= t)
    }

    /// When the pre-queue on at `t` opens its doors, if one is on.
    pub fn prequeue_until(&self, t: Time) -> Option<Time> {
        match self.event_at(t) {
            Some(EventPhase::Prequeue(e)) => Some(e.start_ms),
            _ => None,
        }
    }

    /// The first time after `t` at which an event changes what is in force (`Time::MAX`:
    /// none scheduled).
    pub fn next_edge_after(&self, t: Time) -> Time {
        self.events
            .iter()
            .flat_map(ScheduledEvent::edges)
            .filter(|&edge| edge > t)
            .min()
            .unwrap_or(Time::MAX)
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

/// An operator's change, kept by the node it was made at until every version includes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Change {
    /// Settings changed, by (author, reference time, lottery seed).
    Patch(SettingsPatch, (NodeId, Time, LotterySeed)),
    /// An event scheduled, by (author, reference time, lottery seed).
    AddEvent(ScheduledEvent, (NodeId, Time, LotterySeed)),
    /// An event deleted, by (author, reference time).
    RemoveEvent(String, (NodeId, Time)),
}

impl Change {
    /// The node the change was made at.
    fn author(&self) -> NodeId {
        match self {
            Change::Patch(_, (author, ..))
            | Change::AddEvent(_, (author, ..))
            | Change::RemoveEvent(_, (author, _)) => *author,
        }
    }

    /// This change, made on top of `live`: a patch is stamped after every change `live`
    /// holds, so it writes its settings over theirs whatever this node's clock says, and it
    /// keeps that stamp when it is made again ([`FieldStamps`]).
    fn on_top_of(mut self, live: &LiveSettings) -> Change {
        if let Change::Patch(_, (_, now, _)) = &mut self {
            *now = (*now).max(live.stamps.latest().0.saturating_add(1));
        }
        self
    }

    /// The next version after `live` with this change, checked against the file settings.
    fn apply(&self, live: &LiveSettings, file: &Settings) -> Result<LiveSettings, SettingsError> {
        match self {
            Change::Patch(patch, stamp) => live.patched(patch, *stamp, file),
            Change::AddEvent(event, stamp) => live.with_event(event.clone(), *stamp, file),
            Change::RemoveEvent(name, (author, now)) => live
                .without_event(name, *author, *now)
                .ok_or_else(|| SettingsError::new("name", "no such event")),
        }
    }
}

/// A change made at this node and the version it made, or last made again: kept across a
/// restart (`node/durable.rs`), so that a change made just before one is still made again on
/// top of a version that won over it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnChange {
    change: Change,
    version: u64,
}

/// The settings a node goes by: the newest live version it knows, and what of it is in force
/// at the reference time it last looked (events switch settings on and off by the clock).
#[derive(Debug, Clone)]
pub(crate) struct InForce {
    /// The file's room settings, which the live settings apply to.
    file: Settings,
    /// The newest live settings this node knows.
    live: LiveSettings,
    /// What of them is in force at the time last looked at (`LiveSettings::in_force_at`).
    current: LiveSettings,
    /// The room settings in force: the file's, with `current` applied.
    settings: Settings,
    /// The reference time last looked at, and the times between which `current` holds.
    clock: Time,
    window: (Time, Time),
    /// The longest pass expiry in force since this node started: passes issued before an
    /// operator shortened it live that long, and departed places are counted for it.
    longest_pass_expiry: Time,
    /// This node's last changes, oldest first, made again on top of a version that lacks them.
    pending: VecDeque<OwnChange>,
    /// Changes that no longer fit when made again, for the node to report.
    dropped: Vec<(Change, SettingsError)>,
    /// How many newer versions this node took: moves whenever `live` does, for a driver that
    /// keeps them (`node/durable.rs`).
    taken: u64,
}

impl InForce {
    /// A node's settings at start: its file's.
    pub(crate) fn new(file: &Settings, live: LiveSettings) -> InForce {
        let settings = live.apply_to(file);
        InForce {
            file: file.clone(),
            longest_pass_expiry: settings.pass_expiry_ms,
            current: live.clone(),
            live,
            settings,
            clock: 0,
            window: (0, Time::MAX),
            pending: VecDeque::new(),
            dropped: Vec::new(),
            taken: 0,
        }
    }

    /// Moves whenever a newer live version is taken.
    pub(crate) fn taken(&self) -> u64 {
        self.taken
    }

    /// The newest live settings known.
    pub(crate) fn live(&self) -> &LiveSettings {
        &self.live
    }

    /// The live settings in force now (an event's applied).
    pub(crate) fn current(&self) -> &LiveSettings {
        &self.current
    }

    /// The room settings in force now.
    pub(crate) fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The file's room settings.
    pub(crate) fn file(&self) -> &Settings {
        &self.file
    }

    /// The longest pass expiry in force since the node started.
    pub(crate) fn longest_pass_expiry(&self) -> Time {
        self.longest_pass_expiry
    }

    /// Whether nothing limits admission: no target, and no rate cap (or passthrough). Then
    /// nobody needs a place to let a visitor through, and no majority is needed.
    pub(crate) fn unlimited(&self) -> bool {
        let now = &self.current;
        self.settings.is_unlimited()
            && (now.new_users_per_minute.is_none() || now.mode == Mode::Passthrough)
    }

    /// Whether nothing limits admission for good: [`InForce::unlimited`], with no target in the
    /// file either. Only then may a node let visitors out with no majority behind it. A limit
    /// lifted live (passthrough, or the target taken off) comes back with the round that
    /// carries the operator's next change, which a node cut off from the majority never
    /// hears: it lets visitors through only under a live grant from a root that holds a
    /// majority, so it stops within a grant's life of being cut off
    /// (waitingroom-distributed/README.md#admission-leases).
    pub(crate) fn unguarded(&self) -> bool {
        self.unlimited() && self.file.is_unlimited()
    }

    /// An operator's change made at this node: the next version, in force here at once and
    /// carried to the others by the next rounds; kept, to be made again on top of any version
    /// that wins over it without it (see the module doc).
    pub(crate) fn change(&mut self, change: Change) -> Result<LiveSettings, SettingsError> {
        let change = change.on_top_of(&self.live);
        let next = change.apply(&self.live, &self.file)?;
        self.adopt(&next)?;
        if self.pending.len() == MAX_PENDING {
            self.pending.pop_front();
        }
        self.pending.push_back(OwnChange {
            change,
            version: next.version,
        });
        Ok(next)
    }

    /// Adopts `other` if it is a newer version than the one known, with this node's own
    /// changes that it lacks made again on top. A version that does not fit the file settings
    /// (another file configuration) is kept and passed on, but the room settings stay as they
    /// were; the error says why.
    pub(crate) fn adopt(&mut self, other: &LiveSettings) -> Result<(), SettingsError> {
        if !self.live.is_older_than(other) {
            return Ok(());
        }
        self.live = self.rebased(other);
        self.taken += 1;
        self.look(self.clock);
        let current = self.live.in_force_at(self.clock);
        current.validate(&self.file)?;
        self.take(current);
        Ok(())
    }

    /// `other` with this node's changes it does not include made again on top, in the order
    /// they were made; one that no longer fits is dropped (`take_dropped`).
    fn rebased(&mut self, other: &LiveSettings) -> LiveSettings {
        let mut live = other.clone();
        let lacking: Vec<bool> = self
            .pending
            .iter()
            .map(|p| !other.includes(p.change.author(), p.version))
            .collect();
        let mut keep = lacking.iter();
        self.pending.retain_mut(|p| {
            if !keep.next().copied().unwrap_or(false) {
                return true;
            }
            match p.change.apply(&live, &self.file) {
                Ok(next) => {
                    p.version = next.version;
                    live = next;
                    true
                }
                Err(e) => {
                    self.dropped.push((p.change.clone(), e));
                    false
                }
            }
        });
        live
    }

    /// This node's last changes, for its durable state.
    pub(crate) fn own_changes(&self) -> Vec<OwnChange> {
        self.pending.iter().cloned().collect()
    }

    /// Takes back the changes an earlier life of this node made (`own_changes`), to be made
    /// again on top of a version that lacks them; the live settings they made were restored
    /// before (`adopt`).
    pub(crate) fn restore_own_changes(&mut self, kept: &[OwnChange]) {
        let newest = kept.len().saturating_sub(MAX_PENDING);
        self.pending = kept[newest..].iter().cloned().collect();
    }

    /// The changes of this node's that no longer fitted when made again, since last asked.
    pub(crate) fn take_dropped(&mut self) -> Vec<(Change, SettingsError)> {
        std::mem::take(&mut self.dropped)
    }

    /// Looks at the reference clock: whether what is in force changed (an event's edge passed).
    pub(crate) fn at(&mut self, t: Time) -> bool {
        let (from, until) = self.window;
        if (from..until).contains(&t) {
            return false;
        }
        self.look(t);
        let current = self.live.in_force_at(t);
        if current == self.current || current.validate(&self.file).is_err() {
            return false;
        }
        self.take(current);
        true
    }

    /// The clock is at `t`: between which event edges it is.
    fn look(&mut self, t: Time) {
        self.clock = t;
        let last_edge = self.live.events.iter().flat_map(ScheduledEvent::edges);
        let from = last_edge.filter(|&e| e <= t).max().unwrap_or(0);
        self.window = (from, self.live.next_edge_after(t));
    }

    fn take(&mut self, current: LiveSettings) {
        self.settings = current.apply_to(&self.file);
        self.current = current;
        self.longest_pass_expiry = self.longest_pass_expiry.max(self.settings.pass_expiry_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    const SEED: LotterySeed = [1; 32];

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
        assert_eq!(
            err(json!({"queueing_method": "lottery"})),
            "queueing_method"
        );
        assert_eq!(err(json!({"pass_expiry_ms": 1.5})), "pass_expiry_ms");
        assert_eq!(err(json!({"version": 7})), "version");
        assert_eq!(err(json!({"colour": "red"})), "body");
        assert_eq!(err(json!([1])), "body");
        let bad = |p: SettingsPatch| {
            live()
                .patched(&p, (NodeId(2), 0, SEED), &file())
                .unwrap_err()
                .field
        };
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
        let new = old.patched(&p, (NodeId(3), 0, SEED), &file()).unwrap();
        assert_eq!(new.version, 1);
        assert_eq!(new.author, NodeId(3));
        assert_eq!(new.target_on_site, Settings::UNLIMITED);
        assert_eq!(new.new_users_per_minute, Some(600));
        assert_eq!(new.mode, Mode::QueueAll);
        assert_eq!(new.pass_expiry_ms, old.pass_expiry_ms);
        assert!(old.is_older_than(&new));
        let cleared = SettingsPatch::from_json(&json!({"new_users_per_minute": null})).unwrap();
        let newer = new
            .patched(&cleared, (NodeId(1), 1, SEED), &file())
            .unwrap();
        assert_eq!(newer.new_users_per_minute, None);
        // A change stamped before the one that wrote the cap leaves it (made again on top of a
        // version that won over it: `InForce::change` stamps a new change after its base).
        let older = new
            .patched(&cleared, (NodeId(1), 0, SEED), &file())
            .unwrap();
        assert_eq!(older.new_users_per_minute, Some(600));
        assert!(new.is_older_than(&older));
        // Two changes made at once: the higher author wins, everywhere.
        let other = old
            .patched(&cleared, (NodeId(1), 0, SEED), &file())
            .unwrap();
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

    fn event(v: Value) -> ScheduledEvent {
        ScheduledEvent::from_json(&v).unwrap()
    }

    /// Every value an operator sets has a bound, and a value past it is refused naming its
    /// field: counts up to `MAX_COUNT`, durations 1 ms to 30 days, an event's times within a
    /// year of now (an event at `u64::MAX` ms would wrap the time left to its start).
    #[test]
    fn every_value_an_operator_sets_is_bounded() {
        use crate::patch::{MAX_COUNT, MAX_DURATION_MS, MAX_TIME_OFFSET_MS};
        let now = 1_800_000_000_000;
        let bad = |v: Value| {
            let p = SettingsPatch::from_json(&v).unwrap();
            live()
                .patched(&p, (NodeId(2), now, SEED), &file())
                .map(|_| ())
                .map_err(|e| e.field)
        };
        let week = 7 * 24 * 3_600_000;
        assert_eq!(
            bad(
                json!({"target_on_site": MAX_COUNT, "new_users_per_minute": MAX_COUNT,
                "pass_expiry_ms": week, "session_duration_ms": MAX_DURATION_MS})
            ),
            Ok(())
        );
        assert_eq!(bad(json!({"target_on_site": "unlimited"})), Ok(()));
        for (v, field) in [
            (json!({"target_on_site": MAX_COUNT + 1}), "target_on_site"),
            (json!({"target_on_site": u64::MAX - 1}), "target_on_site"),
            (
                json!({"new_users_per_minute": u64::MAX}),
                "new_users_per_minute",
            ),
            (json!({"pass_expiry_ms": 0}), "pass_expiry_ms"),
            (
                json!({"pass_expiry_ms": MAX_DURATION_MS + 1}),
                "pass_expiry_ms",
            ),
            (
                json!({"session_duration_ms": u64::MAX}),
                "session_duration_ms",
            ),
        ] {
            assert_eq!(bad(v.clone()), Err(field), "{v}");
        }
        let add = |v: Value| {
            live()
                .with_event(event(v), (NodeId(2), now, SEED), &file())
                .map(|_| ())
                .map_err(|e| e.field)
        };
        let year = MAX_TIME_OFFSET_MS;
        let ok = json!({"name": "s", "prequeue_start_ms": now - year, "start_ms": now + year - 1,
            "end_ms": now + year});
        assert_eq!(add(ok), Ok(()));
        for (v, field) in [
            (
                json!({"name": "s", "start_ms": u64::MAX - 1, "end_ms": u64::MAX}),
                "start_ms",
            ),
            (
                json!({"name": "s", "start_ms": now, "end_ms": now + year + 1}),
                "end_ms",
            ),
            (
                json!({"name": "s", "prequeue_start_ms": now - year - 1, "start_ms": now,
                    "end_ms": now + 1}),
                "prequeue_start_ms",
            ),
            (
                json!({"name": "s", "start_ms": now, "end_ms": now + 1,
                    "settings": {"target_on_site": MAX_COUNT + 1}}),
                "target_on_site",
            ),
            (
                json!({"name": "s", "start_ms": now, "end_ms": now + 1,
                    "settings": {"new_users_per_minute": u64::MAX}}),
                "new_users_per_minute",
            ),
        ] {
            assert_eq!(add(v.clone()), Err(field), "{v}");
        }
    }

    #[test]
    fn a_lottery_stamps_everyone_the_time_it_opened() {
        let random = SettingsPatch::from_json(&json!({"queueing_method": "random"})).unwrap();
        let l = live()
            .patched(&random, (NodeId(1), 5_000, SEED), &file())
            .unwrap();
        assert_eq!(
            (l.queueing_method, l.lottery_since),
            (QueueingMethod::Random, 5_000)
        );
        assert_eq!(l.join_stamp(9_000), (5_000, Some(&SEED)));
        // Its record commits to the seed until the lottery is switched off, then shows it.
        let commit = waitingroom_core::lottery::commitment(&SEED);
        let open = &l.lotteries(9_000)[0];
        assert_eq!(
            (open.name.as_str(), &open.commit, &open.seed),
            ("random", &commit, &None)
        );
        // Changing something else keeps the lottery's opening.
        let other = SettingsPatch::from_json(&json!({"target_on_site": 7})).unwrap();
        let l = l
            .patched(&other, (NodeId(1), 8_000, SEED), &file())
            .unwrap();
        assert_eq!(l.join_stamp(9_000).0, 5_000);
        let fifo = SettingsPatch::from_json(&json!({"queueing_method": "fifo"})).unwrap();
        let l = l
            .patched(&fifo, (NodeId(1), 10_000, SEED), &file())
            .unwrap();
        assert_eq!(l.join_stamp(11_000), (11_000, None));
        assert_eq!(l.lotteries(11_000)[0].revealed_seed(), Some(SEED));
    }

    #[test]
    fn an_event_prequeues_then_applies_its_settings_then_ends() {
        let e = event(
            json!({"name": "sale", "prequeue_start_ms": 1_000, "start_ms": 2_000,
            "end_ms": 3_000, "shuffle_at_start": true, "settings": {"target_on_site": 5}}),
        );
        let l = live()
            .with_event(e.clone(), (NodeId(2), 0, SEED), &file())
            .unwrap();
        assert_eq!(l.version, 1);
        assert_eq!(l.in_force_at(999).mode, Mode::Normal);
        assert_eq!(l.in_force_at(999).target_on_site, 100);
        let pre = l.in_force_at(1_500);
        assert_eq!((pre.mode, pre.target_on_site), (Mode::QueueAll, 5));
        assert_eq!(l.prequeue_until(1_500), Some(2_000));
        // Pre-queued visitors share the pre-queue's opening: their ticket ids draw the order.
        assert_eq!(l.join_stamp(1_500), (1_000, Some(&SEED)));
        // Its lottery is committed to at once and revealed at the start.
        assert_eq!(l.lotteries(1_999)[0].seed, None);
        assert_eq!(l.lotteries(2_000)[0].revealed_seed(), Some(SEED));
        let on = l.in_force_at(2_500);
        assert_eq!((on.mode, on.target_on_site), (Mode::Normal, 5));
        assert_eq!(l.join_stamp(2_500).0, 2_500);
        assert_eq!(l.in_force_at(3_000).target_on_site, 100);
        assert_eq!(l.next_edge_after(0), 1_000);
        assert_eq!(l.next_edge_after(2_000), 3_000);
        assert_eq!(l.next_edge_after(3_000), Time::MAX);
        // Taken names, overlaps, past events and bad settings are refused.
        let again = l.with_event(e.clone(), (NodeId(2), 0, SEED), &file());
        assert_eq!(again.unwrap_err().field, "name");
        let past = live().with_event(e.clone(), (NodeId(2), 3_000, SEED), &file());
        assert_eq!(past.unwrap_err().field, "end_ms");
        let mut zero = e.clone();
        zero.settings.target_on_site = Some(0);
        let zero = live().with_event(zero, (NodeId(2), 0, SEED), &file());
        assert_eq!(zero.unwrap_err().field, "target_on_site");
        // Deleting it makes a newer version without it.
        let gone = l.without_event("sale", NodeId(1), 0).unwrap();
        assert!(gone.events.is_empty() && l.is_older_than(&gone));
        assert_eq!(l.without_event("other", NodeId(1), 0), None);
    }

    #[test]
    fn a_lottery_never_jumps_an_events_prequeue() {
        let random = SettingsPatch::from_json(&json!({"queueing_method": "random"})).unwrap();
        let l = live()
            .patched(&random, (NodeId(1), 500, SEED), &file())
            .unwrap();
        let e = event(
            json!({"name": "sale", "prequeue_start_ms": 1_000, "start_ms": 2_000,
            "end_ms": 3_000}),
        );
        let l = l.with_event(e, (NodeId(1), 600, SEED), &file()).unwrap();
        assert_eq!(l.join_stamp(700).0, 500);
        // Without a shuffle, pre-queued visitors keep their join order.
        assert_eq!(l.join_stamp(1_500).0, 1_500);
        // After its start the room's lottery goes on, from the start and with its own seed.
        assert_eq!(l.join_stamp(2_500), (2_000, Some(&SEED)));
        assert_eq!(l.join_stamp(3_500).0, 2_000);
        assert_eq!(
            l.lotteries(2_500).len(),
            1,
            "an event that draws no lots has no record"
        );
        // A closed room stays closed through a pre-queue.
        let mut closed = l.clone();
        closed.mode = Mode::Reject;
        assert_eq!(closed.in_force_at(1_500).mode, Mode::Reject);
    }
    /// Two nodes change one setting at once, and the one whose clock is behind changes it
    /// again: the latest change stays, whichever node heard the other's first. The change
    /// that lost is still made again on top (the version includes it), leaving the later
    /// value; a change made on top of a version comes after all it holds, whatever the clock.
    #[test]
    fn of_two_changes_to_one_setting_made_at_once_the_later_stays() {
        let mut one = InForce::new(&file(), live());
        let mut two = InForce::new(&file(), live());
        let target = |n: u64, (node, at): (u64, Time)| {
            let patch = SettingsPatch {
                target_on_site: Some(n),
                ..SettingsPatch::default()
            };
            Change::Patch(patch, (NodeId(node), at, SEED))
        };
        one.change(target(49, (1, 2_107))).unwrap();
        two.change(target(92, (2, 1_227))).unwrap();
        let lowered = two.change(target(33, (2, 2_198))).unwrap();
        one.adopt(&lowered).unwrap();
        let merged = one.live().clone();
        assert_eq!((merged.version, merged.author), (3, NodeId(1)));
        assert_eq!(merged.target_on_site, 33, "the earlier change is no later");
        assert!(merged.includes(NodeId(1), 3) && merged.includes(NodeId(2), 2));
        two.adopt(&merged).unwrap();
        assert_eq!(two.live(), &merged);
        let raised = two.change(target(60, (2, 1_000))).unwrap();
        assert_eq!(raised.stamps.target_on_site, (2_199, NodeId(2)));
        one.adopt(&raised).unwrap();
        assert_eq!(one.live().target_on_site, 60);
    }

    /// Two nodes' changes made at once: the earlier wins the tie, the later is made again on
    /// top of it at the node it was made at, and an event that no longer fits is dropped and
    /// reported, not lost without a word.
    #[test]
    fn a_change_that_loses_a_tie_is_made_again_on_top_of_the_winner() {
        let mut one = InForce::new(&file(), live());
        let mut two = InForce::new(&file(), live());
        let patch = |v: Value| SettingsPatch::from_json(&v).unwrap();
        let a = one
            .change(Change::Patch(
                patch(json!({"mode": "queue_all"})),
                (NodeId(1), 10, SEED),
            ))
            .unwrap();
        let b = two
            .change(Change::Patch(
                patch(json!({"target_on_site": 7})),
                (NodeId(2), 20, SEED),
            ))
            .unwrap();
        assert_eq!((a.version, b.version), (1, 1));
        assert!(b.is_older_than(&a), "the earlier change wins the tie");
        // The root (say node one) adopts node two's version from the count: no change.
        one.adopt(&b).unwrap();
        assert_eq!(one.live(), &a);
        // Node two takes the result: its change is made again on top.
        two.adopt(&a).unwrap();
        let merged = two.live().clone();
        assert_eq!((merged.version, merged.author), (2, NodeId(2)));
        assert_eq!((merged.mode, merged.target_on_site), (Mode::QueueAll, 7));
        assert!(merged.includes(NodeId(1), 1) && merged.includes(NodeId(2), b.version));
        one.adopt(&merged).unwrap();
        assert_eq!(one.live(), &merged, "node one has nothing to make again");
        // Two events that overlap, scheduled at once: the later one no longer fits.
        let sale = |name: &str| {
            event(
                json!({"name": name, "prequeue_start_ms": 1_000, "start_ms": 2_000,
                "end_ms": 3_000, "settings": {}}),
            )
        };
        let x = one
            .change(Change::AddEvent(sale("x"), (NodeId(1), 30, SEED)))
            .unwrap();
        two.change(Change::AddEvent(sale("y"), (NodeId(2), 40, SEED)))
            .unwrap();
        two.adopt(&x).unwrap();
        assert_eq!(two.live(), &x);
        let dropped = two.take_dropped();
        assert_eq!(dropped.len(), 1);
        assert_eq!(dropped[0].1.field, "name");
        assert!(two.take_dropped().is_empty());
    }
}
