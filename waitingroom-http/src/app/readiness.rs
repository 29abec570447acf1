//! `/readyz`: whether a balancer should send this node visitors (docs/operating.md#readiness).
//! It exists so that one answer, with its reason, is worked out in one place, and shown the
//! same way in `/readyz`, the gauges `waitingroom_ready` and `waitingroom_unready_reason` and a
//! log line each time it changes.
//!
//! A node is not ready when it cannot do its part of the cluster's work: it is stopping or not
//! in a cluster yet; its peers refuse its signed requests and it hears no valid peer traffic
//! (another cluster key, or a clock outside the peers' window:
//! [`crate::peer::auth::Standing`]); its voters file cannot be written; it is alone with voters
//! other than itself, or its root has no majority of the voters (it lets nobody out, and a
//! balancer that sends it visitors keeps them waiting while the rest of the room serves); or
//! its own clock is the one that is off.
//!
//! Whose clock is off, the majority decides: the node takes the median of its measured offsets
//! to the members, its own (0) included. When that median is certainly beyond
//! `max_clock_offset_ms`, most members' clocks agree with each other and not with this one:
//! this node is the outlier. One member whose clock is off moves the median of the others not
//! at all, so it makes that member unready, never the room. With two members the median is the
//! nearer of the two (nobody is a majority), so neither is judged off.

use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};

use waitingroom_core::{NodeId, Time};
use waitingroom_distributed::{Node, Pause};

use super::App;
use crate::clock::now_ms;

/// Every reason `/readyz` fails, as its error code and the gauge's label.
pub const REASONS: [&str; 8] = [
    "not_ready",
    "stopping",
    "refused_by_peers",
    "voters_file",
    "state_dir",
    "alone",
    "no_majority",
    "clock_skew",
];

/// Why a node is not ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unready {
    /// Not a cluster member yet (joining).
    Joining,
    /// Shutting down.
    Stopping,
    /// Peers refuse its signed requests, and it has heard no valid peer traffic for a while.
    RefusedByPeers,
    /// The voters file could not be written at the last try.
    VotersFile,
    /// The state directory could not be written at the last try (the node's state or the
    /// releases): a restart of the whole cluster would forget what changed since.
    StateDir,
    /// The only member of its cluster, with voters other than itself (or none).
    Alone,
    /// Its root does not hear from a majority of the voters.
    NoMajority,
    /// Its clock is the outlier: the median offset to the members, certainly beyond the limit.
    ClockSkew {
        /// The median offset (the members' clocks minus this node's), ms.
        median_ms: i64,
        /// That measurement's error, ms.
        error_ms: u64,
        /// `max_clock_offset_ms`.
        limit_ms: u64,
    },
}

impl Unready {
    /// The error code and gauge label.
    pub fn reason(&self) -> &'static str {
        match self {
            Unready::Joining => "not_ready",
            Unready::Stopping => "stopping",
            Unready::RefusedByPeers => "refused_by_peers",
            Unready::VotersFile => "voters_file",
            Unready::StateDir => "state_dir",
            Unready::Alone => "alone",
            Unready::NoMajority => "no_majority",
            Unready::ClockSkew { .. } => "clock_skew",
        }
    }

    /// What an operator reads: what is wrong and what to do.
    pub fn message(&self) -> String {
        match self {
            Unready::Joining => {
                "this node is not in a cluster yet; try again or another node".into()
            }
            Unready::Stopping => "shutting down".into(),
            Unready::RefusedByPeers => "peers refuse this node's signed requests and it hears \
                no valid peer traffic: check that it has the cluster's key and that its clock \
                is within peer_clock_window_ms of theirs"
                .into(),
            Unready::VotersFile => "the voters file cannot be written (see the log): a restart \
                would forget the voters"
                .into(),
            Unready::StateDir => "the state directory cannot be written (see the log): a \
                restart of the whole cluster would forget the passes given and given back since"
                .into(),
            Unready::Alone => "this node is alone, without a majority of the voters it knows: \
                it lets nobody out until it finds its cluster again"
                .into(),
            Unready::NoMajority => "this node's root hears from no majority of the voters: it \
                lets nobody out (docs/operating.md#lost-majority)"
                .into(),
            Unready::ClockSkew {
                median_ms,
                error_ms,
                limit_ms,
            } => format!(
                "this node's clock is {} ms {} most members' (the median offset, measured \
                 within {error_ms} ms; limit {limit_ms} ms): fix its time sync (NTP)",
                median_ms.unsigned_abs(),
                if *median_ms < 0 { "ahead of" } else { "behind" }
            ),
        }
    }
}

/// What readiness reads of the protocol node, in one look.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    /// A cluster member.
    pub member: bool,
    /// The only member, with voters other than itself (or none).
    pub alone: bool,
    /// Why it lets nobody out, if it does not.
    pub pause: Option<Pause>,
    /// Each member's clock offset from this node's, and the round trip that measured it.
    pub offsets: Vec<(NodeId, i64, u64)>,
}

impl View {
    /// Reads `node` at `now`.
    pub fn of(node: &Node, now: Time) -> View {
        View {
            member: node.is_member(),
            alone: node.membership().members.len() <= 1 && !votes_alone(node),
            pause: node.pause(now),
            offsets: node.clock_offsets(),
        }
    }
}

/// Whether `node` alone holds a majority of the voters it knows: a founder that never had
/// company, or the lowest voter of two (an even split goes to the lowest id). A node that
/// started alone after its seeds did not answer knows no voters, and holds no majority.
fn votes_alone(node: &Node) -> bool {
    let me = node.id();
    match node.agreed_voters() {
        Some(voters) => voters.is_majority(&BTreeSet::from([me])),
        None => node.voters() == [me],
    }
}

/// Which of the files a node keeps failed at their last write.
#[derive(Debug, Clone, Copy, Default)]
pub struct Files {
    /// The voters file (`--voters-file`).
    pub voters: bool,
    /// The state directory (`--state-dir`).
    pub state: bool,
}

/// Whether a node is ready, from its `view`, whether its peers refuse it, which of its files
/// fail, and the clock limit (`max_clock_offset_ms`, 0: no clock check). The first reason that
/// holds, in the order of [`REASONS`].
pub fn judge(view: &View, refused: bool, files: Files, limit: u64) -> Result<(), Unready> {
    if !view.member {
        return Err(Unready::Joining);
    }
    if refused {
        return Err(Unready::RefusedByPeers);
    }
    if files.voters {
        return Err(Unready::VotersFile);
    }
    if files.state {
        return Err(Unready::StateDir);
    }
    if view.alone {
        return Err(Unready::Alone);
    }
    if view.pause == Some(Pause::NoMajority) {
        return Err(Unready::NoMajority);
    }
    match median_offset(&view.offsets) {
        (median_ms, error_ms) if limit > 0 && skew(median_ms, error_ms) > limit => {
            Err(Unready::ClockSkew {
                median_ms,
                error_ms,
                limit_ms: limit,
            })
        }
        _ => Ok(()),
    }
}

/// The median of the members' clock offsets, this node's own (0, exactly) among them, and its
/// error (half the round trip that measured it). Of two middle values, the one certainly
/// nearer to this node's clock: with no majority either way, this node is not the one off.
fn median_offset(offsets: &[(NodeId, i64, u64)]) -> (i64, u64) {
    let mut all: Vec<(i64, u64)> = offsets.iter().map(|&(_, o, rtt)| (o, rtt / 2)).collect();
    all.push((0, 0));
    all.sort_unstable();
    let n = all.len();
    if n % 2 == 1 {
        return all[n / 2];
    }
    let (a, b) = (all[n / 2 - 1], all[n / 2]);
    if skew(a.0, a.1) <= skew(b.0, b.1) {
        a
    } else {
        b
    }
}

/// How far an offset certainly is: its size less its error.
fn skew(offset: i64, error: u64) -> u64 {
    offset.unsigned_abs().saturating_sub(error)
}

/// The last answer, to log and show a change once.
#[derive(Debug)]
pub struct Readiness {
    last: Mutex<Option<&'static str>>,
}

impl Default for Readiness {
    fn default() -> Self {
        // A node starts joining.
        Readiness {
            last: Mutex::new(Some("not_ready")),
        }
    }
}

impl App {
    /// Whether this node is ready now, and why not; a change from the last answer is logged
    /// and shown in the gauges.
    pub fn readiness(&self) -> Result<(), Unready> {
        let now = now_ms();
        let verdict = if self.is_stopping() {
            Err(Unready::Stopping)
        } else {
            let view = self.driver.read(|n| View::of(n, now));
            // A peer is heard from at least every few probe periods while it is a member.
            let grace = self
                .cfg
                .protocol
                .probe_interval_ms
                .saturating_mul(3)
                .max(1_000);
            let refused = self.transport.standing().is_refused(now, grace);
            let files = Files {
                voters: self.driver.voters_file_failing(),
                state: self.driver.state_dir_failing(),
            };
            judge(&view, refused, files, self.cfg.limits.max_clock_offset_ms)
        };
        self.note_readiness(&verdict);
        verdict
    }

    fn note_readiness(&self, verdict: &Result<(), Unready>) {
        let reason = verdict.as_ref().err().map(Unready::reason);
        let mut last = self
            .readiness
            .last
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if *last == reason {
            return;
        }
        *last = reason;
        self.metrics.set_readiness(&REASONS, reason);
        match verdict {
            Ok(()) => tracing::info!("ready"),
            Err(Unready::Stopping) => {}
            Err(why) => tracing::warn!(reason = why.reason(), "not ready: {}", why.message()),
        }
    }

    /// Works out readiness every second for as long as the process runs, so the gauges and the
    /// log follow it even when no balancer asks.
    pub async fn watch_readiness(self: std::sync::Arc<Self>) {
        loop {
            let _ = self.readiness();
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(offsets: &[i64]) -> View {
        View {
            member: true,
            alone: false,
            pause: None,
            offsets: offsets
                .iter()
                .enumerate()
                .map(|(i, &o)| (NodeId(i as u64 + 2), o, 10))
                .collect(),
        }
    }

    /// docs/operating.md#readiness: one clock 3 s off makes that node unready, and only it: the
    /// others see one member off and the rest in step.
    #[test]
    fn the_majority_decides_whose_clock_is_off() {
        // Three nodes; the third runs 3 s ahead.
        let off = judge(&view(&[-3_000, -3_000]), false, Files::default(), 2_000).unwrap_err();
        assert_eq!(off.reason(), "clock_skew");
        assert!(matches!(
            off,
            Unready::ClockSkew {
                median_ms: -3_000,
                error_ms: 5,
                ..
            }
        ));
        assert!(
            off.message().contains("3000 ms ahead of"),
            "{}",
            off.message()
        );
        assert_eq!(
            judge(&view(&[3_000, 5]), false, Files::default(), 2_000),
            Ok(())
        );
        assert_eq!(
            judge(&view(&[-5, 3_000]), false, Files::default(), 2_000),
            Ok(())
        );
        // Five nodes, two off in opposite directions: only they are.
        assert_eq!(
            judge(
                &view(&[0, 4, 3_000, -3_000]),
                false,
                Files::default(),
                2_000
            ),
            Ok(())
        );
        let ahead = [-3_000, -3_000, -3_000, -6_000];
        assert!(judge(&view(&ahead), false, Files::default(), 2_000).is_err());
        // Two nodes: no majority either way, neither is the outlier.
        assert_eq!(
            judge(&view(&[9_000]), false, Files::default(), 2_000),
            Ok(())
        );
        assert_eq!(
            judge(&view(&[-9_000]), false, Files::default(), 2_000),
            Ok(())
        );
        // Within the measurement's error, no measurement, or the check off: ready.
        let mut rough = view(&[-2_100, -2_100]);
        rough.offsets.iter_mut().for_each(|o| o.2 = 400);
        assert_eq!(judge(&rough, false, Files::default(), 2_000), Ok(()));
        assert_eq!(judge(&view(&[]), false, Files::default(), 2_000), Ok(()));
        assert_eq!(
            judge(&view(&[-9_000, -9_000]), false, Files::default(), 0),
            Ok(())
        );
    }

    const BOTH: Files = Files {
        voters: true,
        state: true,
    };

    /// A node cut off from its cluster, or unable to keep its voters or state, is not ready, whatever
    /// its clock; a lone founder (a single-node deployment) is.
    #[test]
    fn a_node_outside_its_cluster_is_not_ready() {
        let fine = view(&[]);
        assert_eq!(judge(&fine, false, Files::default(), 2_000), Ok(()));
        let joining = View {
            member: false,
            ..fine.clone()
        };
        assert_eq!(judge(&joining, true, BOTH, 2_000), Err(Unready::Joining));
        assert_eq!(
            judge(&fine, true, BOTH, 2_000),
            Err(Unready::RefusedByPeers)
        );
        assert_eq!(judge(&fine, false, BOTH, 2_000), Err(Unready::VotersFile));
        let state = Files {
            state: true,
            ..Files::default()
        };
        assert_eq!(judge(&fine, false, state, 2_000), Err(Unready::StateDir));
        let alone = View {
            alone: true,
            ..fine.clone()
        };
        assert_eq!(
            judge(&alone, false, Files::default(), 2_000),
            Err(Unready::Alone)
        );
        let paused = |pause| View {
            pause: Some(pause),
            ..fine.clone()
        };
        let no_majority = judge(&paused(Pause::NoMajority), false, Files::default(), 2_000);
        assert_eq!(no_majority, Err(Unready::NoMajority));
        // A lapsed grant or a lost round is the cluster's ordinary business, not the node's.
        assert_eq!(
            judge(&paused(Pause::NoGrant), false, Files::default(), 2_000),
            Ok(())
        );
        assert_eq!(
            judge(&paused(Pause::LostRound), false, Files::default(), 2_000),
            Ok(())
        );
        for why in [Unready::Joining, Unready::Alone, Unready::NoMajority] {
            assert!(REASONS.contains(&why.reason()));
        }
    }

    /// A lone founder is not alone in this sense, nor the lower of two voters; a lone node
    /// that needs others for a majority is.
    #[test]
    fn a_lone_founder_is_ready() {
        let cfg = waitingroom_distributed::NodeConfig::new(
            NodeId(1),
            1,
            "http://127.0.0.1:1",
            waitingroom_core::Settings::default(),
        );
        let mut node = Node::new(cfg.clone()).unwrap();
        node.start_cluster(0);
        assert!(!View::of(&node, 0).alone);
        let voters = |epoch, set: &[u64]| waitingroom_distributed::voters::Voters {
            epoch,
            set: set.iter().map(|&i| NodeId(i)).collect(),
            ..Default::default()
        };
        // The lower of two voters goes on alone; the higher, or one of three, does not.
        node.remember_voters(&voters(3, &[1, 2]));
        assert!(!View::of(&node, 0).alone);
        node.remember_voters(&voters(4, &[0, 1]));
        assert!(View::of(&node, 0).alone);
        let mut node = Node::new(cfg.clone()).unwrap();
        node.start_cluster(0);
        node.remember_voters(&voters(3, &[1, 2, 3]));
        assert!(View::of(&node, 0).alone);
    }
}
